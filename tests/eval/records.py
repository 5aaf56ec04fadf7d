"""The decode loop's own result records, with defaults for the fields a metrics test does not care about."""

from eaglehead.decode import GenerationResult as _Result
from eaglehead.decode import RoundRecord as _Round


def RoundRecord(gamma, accepted, committed, active, t_draft=0.0, t_verify=0.0, t_rest=0.0):  # noqa: N802
    return _Round(gamma, accepted, committed, active, t_draft, t_verify, t_rest)


def GenerationResult(tokens, rounds, token_times=None, t_start=0.0, t_end=1.0, prompt_lengths=None):  # noqa: N802
    token_times = [[] for _ in tokens] if token_times is None else token_times
    prompt_lengths = [1] * len(tokens) if prompt_lengths is None else prompt_lengths
    return _Result(tokens, rounds, token_times, t_start, t_end, prompt_lengths)
