"""``regenerate.engine: llama.cpp``: eaglehead serves the target's GGUF with llama.cpp itself, for this run only.

    regenerate:
      engine: llama.cpp
      llamacpp: {gguf: as-is, slots: 8}    # or gguf: float32 / float16: a float copy written from the file

The server (the ``xllamacpp`` wheel: ``pip install 'eaglehead[llamacpp]'``) runs in a child process
(:mod:`~eaglehead.engines.llamacpp_server`) listening on 127.0.0.1 at a port the system picks, with ``slots``
sequences decoded together; requests go over HTTP as for :mod:`~eaglehead.datagen.engine_openai`, but to llama.cpp's
own ``/completion``, which returns the sampled token ids themselves (exact). :meth:`LlamaCppEngine.close` (called on
success, error and Ctrl-C) kills the process; if eaglehead itself is killed, the child goes too (it watches its stdin
and, on Linux, the kernel kills it with its parent). A child rather than the server in this process: stopping an
in-process server while a request is in flight can hang (its teardown waits for the request), a killed process
cannot.

``eaglehead.engines.llamacpp`` serves one slot in process without a listener (single-request benchmarks); starting a
listening, multi-slot server is what this module adds (it uses that module's install hint).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eaglehead.engines.llamacpp import SERVER_SCRIPT, XLLAMACPP_VERSION, import_xllamacpp
from eaglehead.builtin.packages import SMOLLM2
from eaglehead.builtin.shipped import file_sha256
from eaglehead.decode import SamplingConfig

from .engine_http import EngineError, JsonClient
from .engine_openai import PLAIN_SAMPLING, OpenAIEngine

HEALTHY_WITHIN_S = 120.0  # model loading; llama.cpp answers /health with 503 until it is done
CHILD = SERVER_SCRIPT


def gguf_file(target: str, file: str | None, gguf: str) -> Path:
    """The GGUF to serve: ``file``, else the target's own; as shipped (``gguf: as-is``) or its cached float copy."""
    if file is None:
        if target == SMOLLM2:
            from eaglehead.builtin.packages import smollm2_gguf_path

            file = str(smollm2_gguf_path())
        elif str(target).endswith(".gguf"):
            file = target
        else:
            raise ValueError(f"regenerate.llamacpp.file: the target {target!r} is not a GGUF file, so name the GGUF "
                             "of the same model (e.g. written by llama.cpp's convert_hf_to_gguf.py)")
    path = Path(file).expanduser()
    if not path.is_file():
        raise ValueError(f"regenerate.llamacpp.file {str(path)!r}: no such file")
    if gguf == "as-is":
        return path
    from eaglehead.builtin.gguf_target import float_gguf_path

    return float_gguf_path(path, gguf)


class ServerProcess:
    """The child process of one llama.cpp server (:mod:`~eaglehead.engines.llamacpp_server`); :meth:`stop` kills it."""

    def __init__(self, spec: dict, within_s: float):
        import_xllamacpp()  # the install hint, here rather than in the child's error
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, str(CHILD), json.dumps({**spec, "parent": os.getpid()})],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     start_new_session=True)  # Ctrl-C reaches eaglehead only; it stops the child
        try:
            line = self._first_line(within_s)
            reply = json.loads(line) if line.strip() else {"error": f"it exited ({self._stderr_tail()})"}
        except BaseException:
            self.stop()
            raise
        if "url" not in reply:
            self.stop()
            raise EngineError(f"llama.cpp could not start on regenerate.llamacpp.file {spec['model']}: "
                              f"{reply['error']}")
        self.url = reply["url"]

    def _first_line(self, within_s: float) -> bytes:
        ready, _, _ = select.select([self.proc.stdout], [], [], within_s)
        if not ready:
            raise EngineError(f"llama.cpp did not start within {within_s:.0f} s ({self._stderr_tail()})")
        return self.proc.stdout.readline()

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode("utf-8", "replace").strip()
        return text[-500:] or "no message"

    def stop(self) -> None:
        """Kill the server now (it holds nothing to save); requests in flight fail."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.stderr):
            pipe.close()


def start_server(path: Path, *, slots: int, ctx_per_slot: int, threads: int, http_threads: int,
                 api_key: str | None = None, alias: str | None = None,
                 within_s: float = HEALTHY_WITHIN_S) -> ServerProcess:
    """llama.cpp's server on ``path`` in a child process, listening on 127.0.0.1 (``.url``). ``api_key``: requests
    must carry it; ``alias``: the model's name in ``/v1/models`` (else the file's path)."""
    return ServerProcess({"model": str(path), "slots": slots, "n_ctx": slots * ctx_per_slot, "threads": threads,
                          "http_threads": http_threads, "api_key": api_key, "alias": alias}, within_s)


class LlamaCppEngine(OpenAIEngine):
    """llama.cpp's server on the target's GGUF, started here; requests through :class:`OpenAIEngine`'s client."""

    name = "llama.cpp"
    process: ServerProcess  # llama.cpp's child process (set by start)
    ctx_per_slot: int  # prompt + max_new_tokens must fit

    @classmethod
    def start(cls, cfg, tokenizer, turn_end: int) -> "LlamaCppEngine":
        rc, lc = cfg.regenerate, cfg.regenerate.llamacpp
        path = gguf_file(cfg.target, lc.file, lc.gguf)
        sha256 = file_sha256(path)
        server = start_server(path, slots=lc.slots, ctx_per_slot=lc.ctx_per_slot,
                              threads=lc.threads or cfg.threads or os.cpu_count() or 1,
                              http_threads=rc.concurrency() + 2)
        try:
            client = JsonClient(server.url, timeout_s=rc.request_timeout_s, retries=rc.retries,
                                backoff_s=rc.retry_backoff_s)
            engine = cls(client, model=path.name, tokenizer=tokenizer, turn_end=turn_end,
                         concurrency=rc.concurrency(), where="regenerate.engine llama.cpp at")
            engine.process, engine.ctx_per_slot, engine.model_sha256 = server, lc.ctx_per_slot, sha256
            engine.wait_healthy()
            props = client.request("GET", "/props", timeout_s=10)
            engine.version = f"llama.cpp {props.get('build_info', 'unknown')} (xllamacpp {XLLAMACPP_VERSION})"
            return engine
        except BaseException:  # Ctrl-C included
            server.stop()
            raise

    def wait_healthy(self, within_s: float = HEALTHY_WITHIN_S) -> None:
        deadline = time.monotonic() + within_s
        while True:
            try:
                if self.client.request("GET", "/health", timeout_s=5, retries=0).get("status") == "ok":
                    return
            except EngineError as err:
                if time.monotonic() > deadline:
                    raise EngineError(f"llama.cpp at {self.client.base_url}: not healthy after {within_s:.0f} s "
                                      f"({err})") from None
            time.sleep(0.2)

    def complete(self, prompts: list[list[int]], *, labels: list[str], max_new_tokens: int, **kw):
        self.check_context(prompts, labels, max_new_tokens, self.ctx_per_slot, "regenerate.llamacpp.ctx_per_slot")
        return super().complete(prompts, labels=labels, max_new_tokens=max_new_tokens, **kw)

    def completions_path(self) -> str:
        return "/completion"  # llama.cpp's own route: it returns the sampled ids

    def request_body(self, prompt: list[int], sampling: SamplingConfig, max_new_tokens: int, seed: int,
                     eos_ids: set[int]) -> dict:
        return {"prompt": prompt, "n_predict": max_new_tokens, "seed": seed, "temperature": sampling.temperature,
                "top_p": sampling.top_p or 1.0, **PLAIN_SAMPLING, "return_tokens": True}

    def parse(self, reply: dict, label: str):
        if "tokens" not in reply:
            raise EngineError(f"prompt {label}: {self.client.base_url}/completion: expected llama.cpp's 'tokens', "
                              f"got {str(reply)[:300]}")
        self.ids_from.add("server")
        # stop_type "eos": an end-of-generation token of the vocabulary; "limit": n_predict reached
        return list(reply["tokens"]), reply.get("stop_type") in ("eos", "word"), reply.get("timings"), \
            reply.get("content", "")

    def stop_server(self) -> None:
        """Kill llama.cpp's process now; requests still in flight fail."""
        self.process.stop()

    def close(self) -> None:
        super().close()
        self.stop_server()
