"""transformers' own decoding as evaluation methods: ``hf-generate`` (``generate``) and ``hf-assisted``
(assisted generation with the draft LM, else its prompt lookup; batch size 1 only).

HF methods are timed through a streamer: their first event (the prompt's prefill and first tokens)
counts as prefill, each later event as one round whose whole time is booked as T_v (HF does not
expose the split). The result is a ``GenerationResult`` like our loop's, so metrics treat both alike.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from eaglehead.builtin.devices import sync
from eaglehead.decode import GenerationResult, RoundRecord, SamplingConfig


class StampStreamer:
    """Records ``(perf_counter, tokens per row)`` for each ``generate()`` streamer event after the
    prompt. Vanilla generate puts ``[B]`` (one token per row); assisted generation ``[1, n]``."""

    def __init__(self):
        self.events: list[tuple[float, list[list[int]]]] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        now = time.perf_counter()  # generate moved the tokens to the host already: the device is synced
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        rows = [[t] for t in value.tolist()] if value.dim() == 1 else value.tolist()
        self.events.append((now, rows))

    def end(self) -> None:
        pass


def streamer_result(streamer: StampStreamer, bsz: int, gamma: int | None, eos: set[int], t_start: float, t_end: float,
                    prompt_lengths: list[int], max_new: int) -> GenerationResult:
    """A ``GenerationResult`` from the streamer events: event 0 is the prefill, each later one a round."""
    tokens = [[] for _ in range(bsz)]
    times = [[] for _ in range(bsz)]
    done, by_eos = [False] * bsz, [False] * bsz
    rounds = []
    for k, (now, rows) in enumerate(streamer.events):
        active = [not d for d in done]
        committed = [0] * bsz
        for b, new in enumerate(rows):
            for tok in new:
                if done[b]:
                    break  # HF pads finished rows
                tokens[b].append(tok)
                times[b].append(now)
                committed[b] += 1
                if tok in eos:
                    done[b] = by_eos[b] = True
                if len(tokens[b]) >= max_new:
                    done[b] = True
        if k > 0:
            prev = streamer.events[k - 1][0]
            rounds.append(RoundRecord(gamma=gamma, accepted=[max(c - 1, 0) for c in committed], committed=committed,
                                      active=active, t_draft=0.0, t_verify=now - prev, t_rest=0.0))
    t_prefill = streamer.events[0][0] - t_start if streamer.events else 0.0
    return GenerationResult(tokens=tokens, rounds=rounds, token_times=times, t_start=t_start, t_end=t_end,
                            prompt_lengths=prompt_lengths, t_prefill=t_prefill, finished_by_eos=by_eos)


def hf_generate(target, draft_lm, ids, mask, sampling: SamplingConfig, *, gamma: int | None, max_new: int, seed: int,
                eos: set[int], pad_id: int, device: torch.device) -> GenerationResult:
    """One ``target.generate`` call on a left-padded batch; assisted when ``gamma`` is given (with
    ``draft_lm`` as the assistant, else transformers' prompt lookup)."""
    from transformers import GenerationConfig

    kw: dict[str, Any] = dict(max_new_tokens=max_new, eos_token_id=sorted(eos) or None, pad_token_id=pad_id,
                              do_sample=not sampling.greedy)
    if not sampling.greedy:
        kw.update(temperature=sampling.temperature, top_k=0, top_p=1.0)
    extra = {}
    if gamma is not None and draft_lm is not None:
        # The assistant's draft length lives in its own generation config: a constant gamma, no early stop.
        gc = draft_lm.generation_config
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = gamma, "constant", 0.0
        extra["assistant_model"] = draft_lm
    elif gamma is not None:
        kw.update(prompt_lookup_num_tokens=gamma, max_matching_ngram_size=3)  # as PromptLookupDrafter's n-grams
    torch.manual_seed(seed)  # HF samples from the global generator
    streamer = StampStreamer()
    sync(device)
    t0 = time.perf_counter()
    target.generate(ids, attention_mask=mask, generation_config=GenerationConfig(**kw), streamer=streamer, **extra)
    sync(device)
    t1 = time.perf_counter()
    return streamer_result(streamer, ids.shape[0], gamma, eos, t0, t1, mask.sum(1).tolist(), max_new)
