"""llama.cpp as an evaluation engine: methods ``llamacpp`` (plain), ``llamacpp-eagle3`` (the ``--draft``
head exported to GGUF, llama.cpp's EAGLE-3 drafter), ``llamacpp-dflash`` (the ``--dflash`` block drafter exported
to GGUF, llama.cpp's ``draft-dflash``) and ``llamacpp-ngram`` (its ``ngram-simple`` lookup),
run through :mod:`eaglehead.engines.llamacpp` on the same token ids as the torch methods, each server in a
child process (:class:`LlamaCppProcess`: in this process llama.cpp's OpenMP threads would slow every torch
method about 2x, see that module).

Usage (``run_eval`` does this when a llama.cpp method is planned)::

    engines = LlamaCppEngines.for_plan(plan, tok, eos, n_ctx=longest_prompt + plan.max_new_tokens)
    res = engines.generate("llamacpp-eagle3", 3, ids, mask, SamplingConfig(temperature=0), max_new=64, seed=0)
    res.tokens, res.token_times, res.engine_stats     # an EngineResult (eval/engine_result.py)
    engines.close()

What runs: the target GGUF as-is (``--llamacpp-dtype as-is``) or a float32/float16 copy written from it
(``float_gguf_path``; float32 is the model the torch methods run, dequantized the same way). The head GGUF
is exported from ``--draft`` into ``OUT/llamacpp/`` (``--llamacpp-head-dtype``, float16 by default), the DFlash
drafter from ``--dflash`` beside it (same dtype; every draft length must fit its block, ``block_size - 1``). One
server per (method, draft length), started on first use (the weights are memory-mapped, so servers share
them); draft length 0 is the plain server. Threads: ``--threads``, default ``torch.get_num_threads()``.

Each call streams, so every token has its arrival time (TTFT, ITL). A token that ends inside a UTF-8
character is held back by the engine and sent, without its id, with the next chunk; then the ids come from
the same request repeated without streaming (deterministic: same seed), and a held-back token is timed at
the next chunk, which is when it reached the client. Sampling at T > 0: ``LlamaCppServer.complete`` passes
only the temperature and seed, so llama.cpp's default chain (top-k 40, top-p 0.95, min-p 0.05) applies:
not the distribution of the torch methods (the report says so).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from eaglehead.engines.llamacpp import (XLLAMACPP_VERSION, DFlashDraft, Eagle3Draft, LlamaCppError,
                                        LlamaCppProcess, NgramDraft)
from eaglehead.decode import SamplingConfig

from .engine_result import EngineResult
from .plan_options import llamacpp_source

ENGINE = "llama.cpp"
NGRAM_MATCH = 3  # tokens matched by ngram-simple (size_n), as our prompt lookup's longest n-gram
LLAMACPP_TIMING_NOTE = ("llama.cpp: decode time = the engine's predicted_ms (after the first token), all booked as "
                        "T_v; time_per_token_s = predicted_ms / (predicted_n - 1), engine_time_per_token_s = "
                        "predicted_ms / predicted_n (the engine's own); TTFT and ITL from streamed chunk times")
LLAMACPP_ROUND_DETAIL = ("engine totals only (no per-round records): tau = 1 + draft_n_accepted / draft rounds, "
                         "rounds without a draft = committed - accepted - draft rounds; survival not available")
SAMPLING_NOTE = ("llama.cpp samples at T > 0 from softmax(logits / T) with the plan's top-k and top-p and its own "
                 "min-p off (the requests override its default chain of top-k 40, top-p 0.95, min-p 0.05): the "
                 "torch methods' distribution, drawn from another random stream, so outputs differ by sample")


class LlamaCppEngines:
    """The llama.cpp servers of one evaluation (module docstring)."""

    def __init__(self, model_path: Path, *, threads: int, n_ctx: int, tok, eos: set[int], head_path: Path | None,
                 describe: dict[str, Any], dflash_path: Path | None = None):
        self.model_path, self.head_path, self.threads, self.n_ctx = model_path, head_path, threads, n_ctx
        self.dflash_path = dflash_path
        self.tok, self.eos = tok, set(eos)
        self.description = describe
        self._servers: dict[tuple[str, int], LlamaCppProcess] = {}

    @classmethod
    def for_plan(cls, plan, tok, eos: set[int], *, n_ctx: int) -> LlamaCppEngines:
        """The engines ``plan`` asks for: the GGUF to run (converted once, cached) and the head exported."""
        source = llamacpp_source(plan.target)
        model = source if plan.llamacpp_dtype == "as-is" else _float_copy(source, plan.llamacpp_dtype)
        head = checkpoint = None
        if "llamacpp-eagle3" in plan.methods:
            own = "llamacpp-eagle3" in plan.drafts  # --llamacpp-draft, else --draft's head
            checkpoint, option = ((plan.drafts["llamacpp-eagle3"], "--llamacpp-draft") if own
                                  else (plan.drafts["eagle3"], "--draft"))
            head = _export_head(checkpoint, option, model, Path(plan.out) / "llamacpp", plan.llamacpp_head_dtype)
        dflash = None
        if "llamacpp-dflash" in plan.methods:
            dflash = _export_dflash(plan.drafts["dflash"], model, Path(plan.out) / "llamacpp",
                                    plan.llamacpp_head_dtype, [n for n in plan.axis("llamacpp-dflash") if n])
        threads = plan.threads or torch.get_num_threads()
        n_ctx = 256 * -(-(n_ctx + 32) // 256)  # + room for one round's drafts, in whole 256-token pages
        describe = {"xllamacpp": XLLAMACPP_VERSION, "source_gguf": str(source), "model_gguf": str(model),
                    "model_dtype": plan.llamacpp_dtype, "head_gguf": None if head is None else str(head),
                    "head_dtype": plan.llamacpp_head_dtype if head else None,
                    "head_checkpoint": checkpoint if head else None,
                    "dflash_gguf": None if dflash is None else str(dflash),
                    "dflash_dtype": plan.llamacpp_head_dtype if dflash else None,
                    "dflash_checkpoint": plan.drafts.get("dflash") if dflash else None,
                    "threads": threads, "n_ctx": n_ctx,
                    "ngram_match": NGRAM_MATCH, "stream": True, "process": "child"}
        return cls(model, threads=threads, n_ctx=n_ctx, tok=tok, eos=eos, head_path=head, describe=describe,
                   dflash_path=dflash)

    def server(self, method: str, n_max: int) -> LlamaCppProcess:
        """The server of ``method`` drafting ``n_max`` tokens (0 or ``llamacpp``: the plain one)."""
        kind = "plain" if method == "llamacpp" or not n_max else method
        key = (kind, int(n_max) if kind != "plain" else 0)
        if key not in self._servers:
            draft: dict[str, Any] = {}
            if kind == "llamacpp-eagle3":
                draft["eagle3"] = Eagle3Draft(self.head_path, n_max=int(n_max))
            elif kind == "llamacpp-dflash":
                draft["dflash"] = DFlashDraft(self.dflash_path, n_max=int(n_max))
            elif kind == "llamacpp-ngram":
                draft["ngram"] = NgramDraft(size_n=NGRAM_MATCH, size_m=int(n_max))
            self._servers[key] = LlamaCppProcess(self.model_path, threads=self.threads, n_ctx=self.n_ctx, **draft)
        return self._servers[key]

    def generate(self, method: str, n_max: int | None, ids: torch.Tensor, mask: torch.Tensor,
                 sampling: SamplingConfig, *, max_new: int, seed: int) -> EngineResult:
        """One request (batch 1): the prompt's real tokens to llama.cpp, its reply as an ``EngineResult``."""
        if ids.shape[0] != 1:
            raise ValueError(f"{method}: llama.cpp methods run one request at a time, got a batch of {ids.shape[0]}")
        prompt = ids[0][mask[0].bool()].tolist()
        n_max = int(n_max or 0)
        server = self.server(method, n_max)
        temperature = 0.0 if sampling.greedy else float(sampling.temperature)
        t_start = time.perf_counter()
        chain = {"top_k": int(sampling.top_k or 0), "top_p": float(sampling.top_p or 1.0)}
        out = server.complete(prompt, max_new, temperature=temperature, seed=seed, stream=True, **chain)
        t_end = time.perf_counter()
        times = [t_start + t for t in out.chunk_times_s]
        tokens = out.tokens
        if tokens is None:  # held-back UTF-8 pieces: the ids from the same request, unstreamed
            tokens = server.complete(prompt, max_new, temperature=temperature, seed=seed, **chain).tokens
            times = held_back_times(tokens, times, self.tok, method)
        elif len(times) != len(tokens):
            raise LlamaCppError(f"{method}: {len(times)} streamed chunks carried {len(tokens)} token ids; "
                                "cannot time each token")
        tm = out.timings
        stats = {"engine": ENGINE, "n_max": 0 if method == "llamacpp" else n_max, "draft_rounds": out.draft_rounds,
                 "drafted": int(tm.get("draft_n") or 0), "accepted": int(tm.get("draft_n_accepted") or 0),
                 "predicted_n": int(tm.get("predicted_n") or len(tokens)), "predicted_ms": float(tm["predicted_ms"]),
                 "prompt_n": int(tm.get("prompt_n") or 0), "prompt_ms": float(tm.get("prompt_ms") or 0.0),
                 "wall_s": float(out.wall_s)}
        return EngineResult(tokens=[list(tokens)], rounds=[], token_times=[times], t_start=t_start, t_end=t_end,
                            prompt_lengths=[len(prompt)], t_prefill=stats["prompt_ms"] / 1000.0,
                            finished_by_eos=[out.finish_reason == "stop"], prefill_tokens=1, engine_stats=stats)

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()


def _float_copy(source: Path, dtype: str) -> Path:
    from eaglehead.builtin.gguf_target import float_gguf_path

    return float_gguf_path(source, dtype)


def _export_head(draft: str, option: str, target_gguf: Path, out_dir: Path, dtype: str) -> Path:
    """The head ``draft`` (given as ``option``) as the EAGLE-3 GGUF llama.cpp loads, written into ``out_dir``
    (replaced every launch: the checkpoint's content is part of the journal's fingerprint, so a resumed run
    exports the same head)."""
    from eaglehead.draftheads.checkpoint import load_head
    from eaglehead.draftheads.gguf_head import GGUFExportError, export_gguf

    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return export_gguf(load_head(draft), out_dir / f"eagle3-head-{dtype}.gguf", target=target_gguf, dtype=dtype,
                           overwrite=True)
    except GGUFExportError as err:
        hint = ("; give llamacpp-eagle3 a plain EAGLE-3 head of this target with --llamacpp-draft"
                if option == "--draft" else "")
        raise ValueError(f"{option} {draft!r}: cannot run in llama.cpp ({err}){hint}") from None


def _export_dflash(draft: str, target_gguf: Path, out_dir: Path, dtype: str, draft_lengths: list[int]) -> Path:
    """``--dflash`` as the DFlash GGUF llama.cpp loads, written into ``out_dir`` (replaced every launch, as the
    EAGLE-3 head); every draft length must fit its block (llama.cpp would clamp it to ``block_size - 1``)."""
    from eaglehead.draftheads.checkpoint import load_head
    from eaglehead.draftheads.dflash import DFlashHead
    from eaglehead.draftheads.dflash_gguf import DFlashGGUFError, export_dflash_gguf

    try:
        head = load_head(draft)
    except ValueError as err:
        raise ValueError(f"--dflash {draft!r}: {err}") from None
    if not isinstance(head, DFlashHead):
        raise ValueError(f"--dflash {draft!r}: a {type(head).__name__}, not a DFlash drafter")
    too_long = [n for n in draft_lengths if n > head.config.block_size - 1]
    if too_long:
        raise ValueError(f"--gamma {too_long}: the --dflash drafter (block size {head.config.block_size}) drafts at "
                         f"most {head.config.block_size - 1} tokens a round in llama.cpp")
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return export_dflash_gguf(head, out_dir / f"dflash-{dtype}.gguf", target=target_gguf, dtype=dtype,
                                  overwrite=True)
    except DFlashGGUFError as err:
        raise ValueError(f"--dflash {draft!r}: cannot run in llama.cpp ({err})") from None


def held_back_times(tokens: list[int], chunk_times: list[float], tok, method: str) -> list[float]:
    """Arrival time per token when some tokens were held back: a token whose text ends inside a UTF-8
    character (its decoded prefix ends in U+FFFD) arrives with the next chunk that is sent."""
    held = [tok.decode(tokens[: i + 1]).endswith("\ufffd") for i in range(len(tokens))]
    sent = [i for i, h in enumerate(held) if not h or i == len(tokens) - 1]
    if len(sent) != len(chunk_times):
        raise LlamaCppError(f"{method}: {len(chunk_times)} streamed chunks for {len(sent)} tokens that end a "
                            "character; cannot time each token")
    times, k = [], 0
    for i in range(len(tokens)):
        times.append(chunk_times[k])
        if i == sent[k] and k < len(sent) - 1:
            k += 1
    return times
