"""``regenerate.engine: vllm``: eaglehead serves the target with vLLM's CPU build itself, for this run only.

    regenerate:
      engine: vllm
      vllm: {model: null, max_model_len: 4096, enforce_eager: true}    # model null: the target's own, at dtype

The server is :class:`eaglehead.engines.VllmServer`: vLLM's OpenAI server in a child process of its own venv
(``make install`` builds ``.venv-vllm``; vLLM pins another transformers than eaglehead), on 127.0.0.1 at a free port,
waited for until ``/health`` answers, and stopped by :meth:`VllmEngine.close` on success, error and Ctrl-C (and by
the kernel with a killed eaglehead). Requests go through :class:`OpenAIEngine`'s client to ``/v1/completions`` on the
target's token ids with ``return_token_ids``: the ids it returns are the sampled ones (exact). The target is served
at the config's ``dtype`` (a built-in or GGUF target as the float directory eaglehead converts: the torch sampler's
weights exactly), so ``dtype`` stays shard-defining with this engine. The server's log is ``<out_dir>/vllm.log``.
"""

from __future__ import annotations

from pathlib import Path

from eaglehead.builtin.models import resolve_target
from eaglehead.engines import EngineError as ServerError
from eaglehead.engines import VllmServer

from .engine_http import EngineError, JsonClient
from .engine_openai import OpenAIEngine


def start_server(cfg) -> VllmServer:
    """vLLM on ``cfg``'s target (or ``regenerate.vllm.model``) at ``cfg.dtype``, healthy; its errors as
    :class:`EngineError` naming the setting."""
    vc = cfg.regenerate.vllm
    name = vc.model or cfg.target
    try:
        return VllmServer(resolve_target(name, cfg.dtype), dtype=cfg.dtype, max_model_len=vc.max_model_len,
                          enforce_eager=vc.enforce_eager, threads=vc.threads or cfg.threads, python=vc.python,
                          log=Path(cfg.out_dir) / "vllm.log", start_timeout_s=vc.start_timeout_s, name=name)
    except ServerError as err:
        raise EngineError(f"regenerate.engine vllm could not start on {name!r}: {err}") from None


class VllmEngine(OpenAIEngine):
    """vLLM's server on the target, started here; requests through :class:`OpenAIEngine`'s client."""

    name = "vllm"
    server: VllmServer  # vLLM's child process (set by start)
    max_model_len: int

    @classmethod
    def start(cls, cfg, tokenizer, turn_end: int) -> VllmEngine:
        rc = cfg.regenerate
        server = start_server(cfg)
        try:
            client = JsonClient(f"{server.url}/v1", timeout_s=rc.request_timeout_s, retries=rc.retries,
                                backoff_s=rc.retry_backoff_s)
            engine = cls(client, model=server.name, tokenizer=tokenizer, turn_end=turn_end,
                         concurrency=rc.concurrency(), where="regenerate.engine vllm at")
            engine.server, engine.max_model_len = server, rc.vllm.max_model_len
            engine.check_served()
            engine.version = engine.server_version()
            return engine
        except BaseException:  # Ctrl-C included
            server.close()
            raise

    def complete(self, prompts: list[list[int]], *, labels: list[str], max_new_tokens: int, **kw):
        self.check_context(prompts, labels, max_new_tokens, self.max_model_len, "regenerate.vllm.max_model_len")
        return super().complete(prompts, labels=labels, max_new_tokens=max_new_tokens, **kw)

    def close(self) -> None:
        super().close()
        self.server.close()
