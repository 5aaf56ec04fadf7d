"""The engines behind the load generator (``eval/load.py``): the torch loop, llama.cpp with N slots, vLLM.

    drv = TorchBatchDriver(models, "eagle3", 3, temperature=0.0, batch_size=4)   # a static batch per admission
    drv = LlamaCppSlots(gguf, slots=4, ctx_per_slot=2304, threads=2, draft={"kind": "eagle3", ...}, eos=eos)
    drv = VllmStream(engines.server("vllm-eagle3", 3), slots=4, eos=eos)           # eval/vllm_methods.py's server
    run = run_load(drv, requests, LoadSpec(concurrency=4))

* **torch**: ``serve_batch`` left-pads the admitted requests into one batch and runs ``schedule.run_call`` (the
  same call the batch evaluation times); a round's committed tokens carry the round's end time (the loop's
  ``token_times``). The results are kept (``results``) for the draft-length rule, which reads their rounds.
* **llama.cpp**: its HTTP server in a child process (``engines/llamacpp_server.py`` under ``ServerProcess``) with
  ``n_parallel = slots``, so it batches the requests in flight continuously; each request streams llama.cpp's own
  ``/completion`` route on token ids, with ``return_tokens`` (every chunk carries its ids, timed at arrival). The
  engine splits ``n_ctx`` evenly between the slots: ``ctx_per_slot`` must hold prompt + budget + one round.
* **vLLM**: the server ``VllmEngines`` started for the plan; each request is a streamed ``/v1/completions``
  (``VllmServer.complete``), one thread per request in flight. vLLM's own ``--max-num-seqs`` (256) is above any
  concurrency here, and the generator never has more than N requests in flight, so the engine batches at most N.

Every driver stops at the target's EOS ids (an EOS-shortened answer is disclosed by the generator) and is
greedy at temperature 0 (the plan's temperatures otherwise: plain softmax at T, the engines' truncation off).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from eaglehead.builtin.text import left_pad
from eaglehead.decode import SamplingConfig
from eaglehead.engines.llamacpp import SERVER_SCRIPT, LlamaCppError, import_xllamacpp
from eaglehead.engines.process import EngineError, ServerProcess, free_port

from . import schedule
from .load import Request, Served

START_WITHIN_S = 300.0


class TorchBatchDriver:
    """Our loop as a static-batch server: one ``run_call`` per admitted batch (module docstring)."""

    def __init__(self, models: schedule.Models, method: str, gamma: int | None, *, temperature: float,
                 batch_size: int):
        self.models, self.method, self.gamma, self.batch_size = models, method, gamma, int(batch_size)
        self.sampling = SamplingConfig(temperature=temperature)
        self.results: list = []
        self.peak = 0
        self._calls = 0

    def serve_batch(self, requests: list[Request]) -> list[Served]:
        m = self.models
        ids, mask = left_pad([r.prompt for r in requests], m.pad_id, m.device)
        budget = max(r.max_new for r in requests)
        schedule.peak_reset(m.device)
        res = schedule.run_call(m, self.method, self.gamma, ids, mask, self.sampling, budget, m.seed + self._calls)
        self.peak = max(self.peak, schedule.peak_read(m.device))
        self._calls += 1
        self.results.append(res)
        out = []
        for r, toks, times, eos in zip(requests, res.tokens, res.token_times, res.finished_by_eos):
            n = min(len(toks), r.max_new)
            out.append(Served(list(toks[:n]), list(times[:n]), eos=bool(eos) and n == len(toks)))
        return out


class LlamaCppSlots:
    """llama.cpp's server with ``slots`` parallel slots in a child process; ``serve`` streams one request."""

    def __init__(self, model_path: str | Path, *, slots: int, ctx_per_slot: int, threads: int, eos: set[int],
                 draft: dict | None = None, temperature: float = 0.0, seed: int = 0):
        import_xllamacpp()  # the install hint here rather than in the child
        self.slots, self.eos, self.temperature, self.seed = int(slots), set(eos), float(temperature), int(seed)
        port = free_port()
        spec = {"model": str(model_path), "slots": self.slots, "n_ctx": self.slots * int(ctx_per_slot),
                "threads": int(threads), "http_threads": self.slots + 2, "api_key": None, "alias": None,
                "parent": os.getpid(), "draft": draft, "metrics": True, "port": port, "until_killed": True}
        self.url, self.what = f"http://127.0.0.1:{port}", f"llama.cpp ({self.slots} slots, draft {draft})"
        log = Path(tempfile.gettempdir()) / f"eaglehead-llamacpp-{port}.log"
        self.process = ServerProcess([sys.executable, str(SERVER_SCRIPT), json.dumps(spec)],
                                     health_url=f"{self.url}/health", log=log, name=self.what)
        try:
            self.process.wait_healthy(START_WITHIN_S)
        except EngineError as err:
            raise LlamaCppError(f"{self.what} could not start on {model_path}: {err}") from err

    def serve(self, request: Request) -> Served:
        body = {"prompt": list(request.prompt), "n_predict": int(request.max_new), "temperature": self.temperature,
                "seed": self.seed, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "stream": True, "cache_prompt": False,
                "return_tokens": True}
        req = urllib.request.Request(f"{self.url}/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        tokens, times, stop_type = [], [], None
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                for raw in resp:
                    line = raw.decode().strip()
                    if not line.startswith("data: "):
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        raise LlamaCppError(f"{self.what} refused request {request.id!r}: {chunk['error']}")
                    now = time.perf_counter()
                    ids = [int(t) for t in chunk.get("tokens") or []]
                    tokens += ids
                    times += [now] * len(ids)
                    stop_type = chunk.get("stop_type") or stop_type
        except OSError as err:
            self.process.check_alive()  # a dead server is named as such, with its log tail
            raise self.process.error(f"request {request.id!r} failed: {err}") from err
        return Served(tokens, times, eos=stop_type == "eos" or bool(tokens and tokens[-1] in self.eos))

    def peak_bytes(self) -> int | None:
        """The server's resident high-water mark (``ServerProcess.group_hwm_bytes``): weights, KV cache, buffers."""
        return self.process.group_hwm_bytes()

    def close(self) -> None:
        self.process.stop()


class VllmStream:
    """A running ``VllmServer`` as a stream driver: one streamed request per call."""

    def __init__(self, server, *, slots: int, eos: set[int], temperature: float = 0.0, seed: int = 0):
        self.server, self.slots, self.eos = server, int(slots), sorted(eos)
        self.temperature, self.seed = float(temperature), int(seed)

    def serve(self, request: Request) -> Served:
        out = self.server.complete(request.prompt, request.max_new, temperature=self.temperature, seed=self.seed,
                                   ignore_eos=False, stop_token_ids=self.eos)
        return Served(list(out.tokens), [out.started_s + a for a in out.arrivals_s],
                      eos=out.finish_reason == "stop")

    def peak_bytes(self) -> int | None:
        """The server's processes' resident high-water marks summed (API server, engine core, worker: weights and
        vLLM's preallocated KV cache), since the server started: it serves every state of its method."""
        return self.server.process.group_hwm_bytes()
