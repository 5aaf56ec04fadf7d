"""vLLM as an evaluation engine: methods ``vllm`` (plain), ``vllm-eagle3`` (the ``--draft`` head exported into
the layout ``--vllm-head-format`` names, vLLM's EAGLE-3 proposer), ``vllm-ngram`` (vLLM's n-gram prompt
lookup) and ``vllm-dflash`` (the ``--dflash`` block drafter exported in z-lab's layout, vLLM's DFlash proposer:
it queries ``1 + n`` block slots where our loop always runs the whole block, so the two draft alike at
``n = block_size - 1``), on the same token ids as the torch methods, each configuration a server of its own
(:class:`eaglehead.engines.VllmServer`: vLLM's OpenAI server in its own venv, a child process on 127.0.0.1).

Usage (``run_eval`` does this when a vLLM method is planned)::

    engines = VllmEngines.for_plan(plan, eos, max_model_len=longest_prompt + plan.max_new_tokens)
    res = engines.generate("vllm-eagle3", 3, ids, mask, SamplingConfig(temperature=0), max_new=64, seed=0)
    res.tokens, res.token_times, res.engine_stats     # an EngineResult (eval/engine_result.py)
    engines.close()

What runs: the target's Hugging Face directory (a built-in or GGUF target as the float directory eaglehead
converts, the torch methods' weights exactly) at ``--dtype`` (float32: the torch model; bfloat16 beside the torch
bfloat16 run). A batch of B rows is B streamed requests sent at once (vLLM batches them continuously): per row
its token ids and arrival times; per call the speculative counters' difference over the call (``/metrics``,
nothing else runs on that server meanwhile), accepted tokens by draft position included, so survival is vLLM's
own. Requests end at the target's EOS ids (``stop_token_ids``, the EOS token kept, as our loops keep it) or at the
budget. Sampling at T > 0: temperature, top-k and top-p as the torch methods (vLLM's own random stream).

One server per (method, draft length), started on first use and kept until the end (``--gamma auto`` starts one
per candidate); each takes ``SERVER_MEMORY_GIB`` of memory or so, and a plan that needs more servers than the
machine's memory holds is refused before anything is loaded (:func:`check_vllm_plan`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from eaglehead.decode import SamplingConfig
from eaglehead.engines import VERSION as VLLM_VERSION
from eaglehead.engines import SpecCounters, VllmMissing, VllmServer, vllm_python

from .engine_result import EngineResult

ENGINE = "vllm"
VLLM_METHODS = ("vllm", "vllm-eagle3", "vllm-ngram", "vllm-dflash")
HEAD_FORMATS = ("eagle3", "speculators")  # the export layouts vLLM's EAGLE-3 proposer loads
NGRAM_MATCH = 3  # longest n-gram matched, as our prompt lookup's and llama.cpp's
SERVER_MEMORY_GIB = 4.0  # one SmolLM2 server: API server ~0.7, engine core ~0.7, worker ~2.5 GiB (its KV cache included), measured
KV_CACHE_GIB = 1
VLLM_TIMING_NOTE = ("vLLM: decode time = first to last streamed token of the call (all booked as T_v); "
                    "time_per_token_s = that over the tokens after each request's first; TTFT and ITL from "
                    "streamed chunk times")
VLLM_ROUND_DETAIL = ("engine totals only: tau = 1 + accepted / draft rounds, survival by position from vLLM's "
                     "num_accepted_tokens_per_pos counters")


def check_vllm_plan(plan) -> None:
    """Plan-time checks: vLLM's venv is there (the error gives the install command), the head format is known,
    and the servers the plan starts fit in memory."""
    try:
        vllm_python(plan.vllm_python)
    except VllmMissing as err:
        methods = [m for m in plan.methods if m in VLLM_METHODS]
        raise ValueError(f"--methods {','.join(methods)}: {err}") from None
    if plan.vllm_head_format not in HEAD_FORMATS:
        raise ValueError(f"--vllm-head-format must be one of {list(HEAD_FORMATS)}, got {plan.vllm_head_format!r}")
    # plain vLLM (always planned beside the others) and one server per drafting method and draft length n > 0
    servers = 1 + sum(sum(1 for n in plan.axis(m) if n) for m in plan.methods if m in VLLM_METHODS and m != "vllm")
    avail = _available_gib()
    if avail is not None and servers * SERVER_MEMORY_GIB > avail:
        raise ValueError(f"--methods/--gamma: the vLLM methods would start {servers} servers (one per method and "
                         f"draft length, ~{SERVER_MEMORY_GIB} GiB each) but {avail:.1f} GiB of memory is available; "
                         "tune fewer draft lengths (--gamma auto:a..b) or run fewer vLLM methods")


def _available_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None


class VllmEngines:
    """The vLLM servers of one evaluation (module docstring)."""

    def __init__(self, model_dir: str, *, dtype: str, max_model_len: int, threads: int, eos: set[int],
                 head_dir: Path | None, python: str | None, enforce_eager: bool, log_dir: Path,
                 describe: dict[str, Any], dflash_dir: Path | None = None):
        self.model_dir, self.dtype, self.max_model_len, self.threads = model_dir, dtype, max_model_len, threads
        self.eos, self.head_dir, self.python, self.enforce_eager = sorted(eos), head_dir, python, enforce_eager
        self.dflash_dir = dflash_dir
        self.log_dir, self.description = log_dir, describe
        self._servers: dict[tuple[str, int], VllmServer] = {}

    @classmethod
    def for_plan(cls, plan, eos: set[int], *, max_model_len: int) -> VllmEngines:
        from eaglehead.builtin.models import resolve_target

        log_dir = Path(plan.out) / "vllm"
        log_dir.mkdir(parents=True, exist_ok=True)
        model_dir = resolve_target(plan.target, plan.dtype)
        head = dflash = None
        if "vllm-eagle3" in plan.methods:
            head = export_head(plan.drafts["eagle3"], plan.vllm_head_format, log_dir, max(plan.gammas))
        if "vllm-dflash" in plan.methods:
            dflash = export_dflash_drafter(plan.drafts["dflash"], log_dir, [n for n in plan.axis("vllm-dflash") if n])
        threads = plan.threads or torch.get_num_threads()
        max_model_len = 256 * -(-(max_model_len + 32) // 256)  # + room for one round's drafts, whole pages
        describe = {"vllm": VLLM_VERSION, "model_dir": str(model_dir), "dtype": plan.dtype,
                    "head_dir": None if head is None else str(head), "head_format": plan.vllm_head_format if head else None,
                    "head_checkpoint": plan.drafts.get("eagle3") if head else None, "threads": threads,
                    "dflash_dir": None if dflash is None else str(dflash), "dflash_layout": "zlab" if dflash else None,
                    "dflash_checkpoint": plan.drafts.get("dflash") if dflash else None,
                    "max_model_len": max_model_len, "ngram_match": NGRAM_MATCH, "enforce_eager": plan.vllm_enforce_eager,
                    "kv_cache_gib": KV_CACHE_GIB, "stream": True, "process": "child",
                    "batching": "a batch of B rows = B concurrent requests (continuous batching)"}
        return cls(model_dir, dtype=plan.dtype, max_model_len=max_model_len, threads=threads, eos=eos,
                   head_dir=head, dflash_dir=dflash, python=plan.vllm_python, enforce_eager=plan.vllm_enforce_eager, log_dir=log_dir,
                   describe=describe)

    def server(self, method: str, n: int) -> VllmServer:
        spec = speculative_config(method, n, self.dflash_dir if method == "vllm-dflash" else self.head_dir)
        key = ("vllm", 0) if spec is None else (method, int(n))
        if key not in self._servers:
            name = key[0] if spec is None else f"{key[0]}-{key[1]}"
            self._servers[key] = VllmServer(self.model_dir, speculative=spec, dtype=self.dtype,
                                            max_model_len=self.max_model_len, enforce_eager=self.enforce_eager,
                                            threads=self.threads, python=self.python,
                                            log=self.log_dir / f"{name}.log", name="target")
        return self._servers[key]

    def generate(self, method: str, n: int | None, ids: torch.Tensor, mask: torch.Tensor, sampling: SamplingConfig,
                 *, max_new: int, seed: int) -> EngineResult:
        """One call: each row of the left-padded batch as a concurrent streamed request."""
        n = 0 if method == "vllm" else int(n or 0)
        server = self.server(method, n)
        prompts = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
        kw = dict(temperature=0.0 if sampling.greedy else float(sampling.temperature), ignore_eos=False,
                  stop_token_ids=self.eos, top_k=int(sampling.top_k or 0), top_p=float(sampling.top_p or 1.0))
        before = server.spec_counters() if n else SpecCounters()
        t_start = time.perf_counter()
        if len(prompts) == 1:
            outs = [server.complete(prompts[0], max_new, seed=seed, **kw)]
        else:
            with ThreadPoolExecutor(len(prompts)) as pool:
                outs = list(pool.map(lambda pr: server.complete(pr[1], max_new, seed=seed + pr[0], **kw),
                                     enumerate(prompts)))
        t_end = time.perf_counter()
        delta = (server.spec_counters() - before) if n else SpecCounters()
        times = [[o.started_s + a for a in o.arrivals_s] for o in outs]
        firsts = [t[0] for t in times if t]
        lasts = [t[-1] for t in times if t]
        decode_ms = 1000.0 * (max(lasts) - min(firsts)) if firsts else 0.0
        ttft_ms = 1000.0 * sum(o.ttft_s for o in outs if o.arrivals_s) / max(len(firsts), 1)
        stats = {"engine": ENGINE, "n_max": n, "draft_rounds": delta.drafts, "drafted": delta.draft_tokens,
                 "accepted": delta.accepted, "accepted_per_pos": list(delta.accepted_per_pos),
                 "predicted_n": sum(len(o.tokens) for o in outs), "requests": len(outs), "predicted_ms": decode_ms,
                 "prompt_n": sum(len(p) for p in prompts), "prompt_ms": ttft_ms, "wall_s": t_end - t_start}
        return EngineResult(tokens=[list(o.tokens) for o in outs], rounds=[], token_times=times, t_start=t_start,
                            t_end=t_end, prompt_lengths=[len(p) for p in prompts], t_prefill=ttft_ms / 1000.0,
                            finished_by_eos=[o.finish_reason == "stop" for o in outs], prefill_tokens=1,
                            engine_stats=stats)

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()


def speculative_config(method: str, n: int, head_dir: str | Path | None = None) -> dict | None:
    """vLLM's ``--speculative-config`` of ``method`` drafting ``n`` tokens (None: plain decoding); ``head_dir``:
    the exported EAGLE-3 head (``vllm-eagle3``) or DFlash drafter (``vllm-dflash``)."""
    if method == "vllm" or not n:
        return None
    if method == "vllm-eagle3":
        return {"method": "eagle3", "model": str(head_dir), "num_speculative_tokens": int(n)}
    if method == "vllm-dflash":
        return {"method": "dflash", "model": str(head_dir), "num_speculative_tokens": int(n)}
    if method == "vllm-ngram":
        return {"method": "ngram", "num_speculative_tokens": int(n), "prompt_lookup_max": NGRAM_MATCH,
                "prompt_lookup_min": 1}
    raise ValueError(f"not a vLLM method: {method!r}")


def export_head(draft: str, fmt: str, out_dir: Path, speculative_tokens: int) -> Path:
    """``--draft`` as vLLM loads it, in ``fmt`` (eagle3: the EAGLE-3 layout; speculators: ``Eagle3Speculator``),
    written into ``out_dir`` (replaced every launch: the checkpoint's content is in the journal's fingerprint)."""
    from eaglehead.draftheads.checkpoint import export_eagle3, export_speculators, load_head

    head = load_head(draft)
    dst = out_dir / f"head-{fmt}"
    try:
        if fmt == "speculators":
            return Path(export_speculators(head, dst, overwrite=True, speculative_tokens=speculative_tokens))
        return Path(export_eagle3(head, dst, overwrite=True))
    except ValueError as err:
        raise ValueError(f"--draft {draft!r}: cannot export for vLLM as {fmt} ({err}); try --vllm-head-format "
                         f"{'eagle3' if fmt == 'speculators' else 'speculators'}") from None



def export_dflash_drafter(draft: str, out_dir: Path, draft_lengths: list[int]) -> Path:
    """``--dflash`` as vLLM's DFlash proposer loads it (z-lab's layout), written into ``out_dir`` (replaced every
    launch); every draft length must fit in its block (vLLM would otherwise query more slots than it was trained
    on)."""
    from eaglehead.draftheads.checkpoint import load_head
    from eaglehead.draftheads.dflash import DFlashHead
    from eaglehead.draftheads.dflash_export import export_dflash, vllm_speculative_config

    dst = out_dir / "dflash-zlab"
    try:
        head = load_head(draft)
        if not isinstance(head, DFlashHead):
            raise ValueError(f"a {type(head).__name__}, not a DFlash drafter")
        for n in draft_lengths:
            vllm_speculative_config(dst, head.config.block_size, n)
        return Path(export_dflash(head, dst, overwrite=True))
    except ValueError as err:
        raise ValueError(f"--dflash {draft!r}: cannot run as vllm-dflash ({err})") from None
