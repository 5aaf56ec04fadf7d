"""What writes the tokens of the chat data (``regenerate.engine``): the in-process torch sampler, a running
OpenAI-compatible server, or llama.cpp started by eaglehead.

    with open_engine(cfg, target) as engine:       # None for "torch": the pipeline samples in process
        toks, ended = engine.complete(prompts, sampling=..., max_new_tokens=..., seeds=..., labels=..., eos_ids=...)

:func:`open_engine` starts or connects, checks the server's tokenizer against the target's before any work, and
stops a server it started on leaving (success, error or Ctrl-C). Modules: :mod:`.engine_http` (requests, retries,
bounded concurrency), :mod:`.engine_openai` (any OpenAI-compatible server), :mod:`.engine_llamacpp` (the built-in
one, whose process is :mod:`eaglehead.engines.llamacpp_server`), :mod:`.engine_vllm` (vLLM's CPU build, started likewise).
"""

from __future__ import annotations

from contextlib import contextmanager

from .engine_http import EngineError
from .engine_openai import EngineStats, OpenAIEngine

__all__ = ["EngineError", "EngineStats", "OpenAIEngine", "open_engine", "request_seed"]

# A chat-templated conversation the server's tokenizer must split exactly as the target's: plain words, code,
# digits, punctuation and accented letters, between the template's special tokens.
PROBE = "Tokenizer probe: naïve café, 3.14 x 2 = 6.28; def f(x):\n    return x ** 2  # ok!"


@contextmanager
def open_engine(cfg, target):
    """The engine of ``cfg.regenerate.engine`` for ``target`` (the pipeline's target), or ``None`` for torch."""
    kind = cfg.regenerate.engine
    if kind == "torch":
        yield None
        return
    if kind == "openai":
        engine = OpenAIEngine.connect(cfg.regenerate, target.tok, target.turn_end_id)
    elif kind == "vllm":
        from .engine_vllm import VllmEngine

        engine = VllmEngine.start(cfg, target.tok, target.turn_end_id)
    else:
        from .engine_llamacpp import LlamaCppEngine

        engine = LlamaCppEngine.start(cfg, target.tok, target.turn_end_id)
    try:
        probe = [{"role": "user", "content": PROBE}]
        text = target.assistant_text(probe)  # as every prompt is rendered (regenerate.enable_thinking included)
        engine.check_tokenizer(text, target.assistant_prefix(probe), cfg.target)
        yield engine
    finally:
        engine.close()


def request_seed(shard_seed: int, index: int) -> int:
    """The seed of one request: from the shard's seed and the prompt's place in it, so a prompt gets the same seed
    whichever request finishes first; 31 bits, which every server takes."""
    from .chat_data import shard_seed as seed_of

    return seed_of(shard_seed, "request", index) & 0x7FFFFFFF
