"""llama.cpp in process, through the ``xllamacpp`` wheel: a target GGUF, alone or with an EAGLE-3 draft
head GGUF or n-gram lookup, answering token-id prompts with the engine's own timings.

Usage::

    with LlamaCppServer(target_gguf, threads=2, eagle3=Eagle3Draft("head.gguf", n_max=3)) as server:
    # or dflash=DFlashDraft("dflash.gguf", n_max=15): llama.cpp's draft-dflash (one block a round)
        out = server.complete(prompt_ids, n_predict=64)          # greedy (temperature 0)
        out.tokens, out.text, out.timings["draft_n_accepted"], out.ttft_s, out.tokens_per_round

Prompts are token ids (chat-templated by the caller's tokenizer), so llama.cpp and a torch loop read
identical input. Generated ids come from the engine itself: the request sets ``return_tokens`` and
``verbose``, and every reply (or streamed chunk) then carries the raw ids in ``__verbose.tokens``, drafted
tokens included (the OpenAI-style ``logprobs`` route loses the ids of tokens that end inside a UTF-8
character). ``timings`` is llama.cpp's own dict (``prompt_n, prompt_ms, predicted_n, predicted_ms, draft_n,
draft_n_accepted``, ...). Draft rounds (verification steps that carried a draft) come from the engine's
Prometheus counter ``spec_decode_num_drafts_total``, read before and after the request.

TTFT: by default (no streaming) it is the engine's ``prompt_ms`` (the first token is sampled from the
prompt's logits); with ``stream=True`` it is the measured wall time from the call to the first chunk. A
streamed token that ends inside a UTF-8 character is held back and sent without its id, so a streamed
completion has ``tokens = None`` when the ids do not add up to ``predicted_n``.

Beside torch: :class:`LlamaCppProcess` runs the same server in a child process. In one process the two
share ``libgomp`` (llama.cpp's CPU backend is built with OpenMP and binds to the copy torch loaded), and
once llama.cpp's thread team exists the runtime counts more threads than CPUs and makes every worker sleep
instead of spin between parallel regions: a SmolLM2 float32 forward in torch went from 47.5 to 82-137 ms
with an idle server loaded (2 cores; back to 50 ms when it closed). The evaluation times torch and
llama.cpp methods side by side, so its servers run in children.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

XLLAMACPP_VERSION = "2026.10.11549"
SERVER_SCRIPT = Path(__file__).with_name("llamacpp_server.py")  # the HTTP server child (datagen's engine)
INSTALL_HINT = f"pip install 'eaglehead[llamacpp]'  (or: pip install xllamacpp=={XLLAMACPP_VERSION})"
_ROUNDS_METRIC = re.compile(r"^llamacpp:spec_decode_num_drafts_total\s+([0-9.eE+]+)\s*$", re.MULTILINE)


class LlamaCppMissing(ImportError):
    """The ``xllamacpp`` wheel is not installed; the message carries the install command."""


class LlamaCppError(RuntimeError):
    """llama.cpp refused to start or answered a request with an error."""


def import_xllamacpp():
    """The ``xllamacpp`` module, or :class:`LlamaCppMissing` with the command that installs it."""
    try:
        import xllamacpp
    except ImportError as err:
        raise LlamaCppMissing(f"llama.cpp runs through the xllamacpp wheel, which is not installed ({err}); "
                              f"install it with: {INSTALL_HINT}") from None
    return xllamacpp


@dataclass(frozen=True)
class Eagle3Draft:
    """An EAGLE-3 head GGUF drafting exactly ``n_max`` tokens a round (``n_min 0, p_min 0``: never
    shortened by confidence, so every round drafts the same number as a fixed-gamma torch loop)."""

    path: str | Path
    n_max: int = 3


@dataclass(frozen=True)
class DFlashDraft:
    """A DFlash block drafter GGUF (``--spec-type draft-dflash``) drafting exactly ``n_max`` tokens a round
    (``n_min 0, p_min 0``). llama.cpp decodes ``[last, MASK x n_max]`` and would clamp ``n_max`` to the file's
    ``dflash.block_size - 1``; a larger ``n_max`` is refused here instead."""

    path: str | Path
    n_max: int = 15


@dataclass(frozen=True)
class NgramDraft:
    """llama.cpp's ``ngram-simple`` lookup: match the last ``size_n`` tokens, draft the ``size_m`` after."""

    size_n: int = 3
    size_m: int = 3


@dataclass
class Completion:
    tokens: list[int] | None  # generated ids (EOS included when it ended it); None: see module doc
    text: str
    timings: dict[str, Any]  # the engine's own
    wall_s: float  # the whole call, prompt processing included
    ttft_s: float | None  # measured to the first streamed chunk, or the engine's prompt_ms
    draft_rounds: int  # verification rounds that carried a draft
    finish_reason: str | None = None
    chunk_times_s: list[float] = field(default_factory=list)  # streamed chunks' arrival, since the call

    @property
    def tokens_per_round(self) -> float | None:
        """Committed tokens per draft-carrying verification round, including the bonus/correction token:
        ``1 + draft_n_accepted / draft_rounds`` (llama.cpp's "mean len"; the first token, sampled from the
        prompt's logits without a draft, is not a round). ``None`` when no round drafted."""
        if self.draft_rounds == 0:
            return None
        return 1.0 + self.timings.get("draft_n_accepted", 0) / self.draft_rounds


class LlamaCppServer:
    """One llama.cpp server (one slot) in this process; :meth:`close` (or ``with``) frees it."""

    def __init__(self, model_path: str | Path, *, threads: int, n_ctx: int = 4096,
                 eagle3: Eagle3Draft | None = None, ngram: NgramDraft | None = None,
                 dflash: DFlashDraft | None = None, warmup: bool = True, verbosity: int = -1):
        if sum(d is not None for d in (eagle3, ngram, dflash)) > 1:
            raise ValueError("pass at most one of eagle3 and ngram and dflash: a server runs one kind of draft")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        xl = import_xllamacpp()
        model_path = Path(model_path)
        for name, path in (("model_path", model_path), ("eagle3.path", eagle3 and Path(eagle3.path)),
                           ("dflash.path", dflash and Path(dflash.path))):
            if path is not None and not path.is_file():
                raise ValueError(f"{name} {path}: no such file")
        params = xl.CommonParams()
        params.model.path = str(model_path)
        params.n_ctx = n_ctx
        params.n_parallel = 1
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
        params.verbosity = verbosity
        params.warmup = warmup  # an empty decode at start, so the first request's timings are steady
        params.fit_params = False  # fitting sizes GPU offload; on this CPU build it only loads the model twice
        params.endpoint_metrics = True  # the draft-round counter is only kept with metrics on
        set_draft(params.speculative, xl.common_speculative_type, threads, eagle3, ngram, dflash)
        self.model_path, self.eagle3, self.ngram, self.dflash = model_path, eagle3, ngram, dflash
        try:
            self._server = xl.Server(params)
        except RuntimeError as err:
            with_draft = (f" with eagle3 draft {eagle3.path}" if eagle3 is not None else
                          f" with dflash draft {dflash.path}" if dflash is not None else "")
            raise LlamaCppError(f"llama.cpp could not start on model_path {model_path}{with_draft}: {err}") from err

    def complete(self, token_ids: list[int], n_predict: int, *, temperature: float = 0.0, seed: int = 0,
                 top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, stream: bool = False,
                 ignore_eos: bool = False) -> Completion:
        """Generate up to ``n_predict`` tokens after ``token_ids`` (no prompt cache reuse between calls).

        Sampling is plain ``softmax(logits / temperature)`` unless ``top_k``/``top_p``/``min_p`` say otherwise
        (llama.cpp's own defaults, 40/0.95/0.05, would truncate it); temperature 0 is greedy. ``ignore_eos``
        keeps going past end-of-generation tokens (fixed-length runs for timing)."""
        if self._server is None:
            raise LlamaCppError("complete: the server is closed")
        if not token_ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in token_ids):
            raise ValueError("token_ids must be a non-empty list of ints")
        request = {"prompt": list(token_ids), "n_predict": int(n_predict), "temperature": float(temperature),
                   "seed": int(seed), "top_k": int(top_k), "top_p": float(top_p), "min_p": float(min_p),
                   "stream": bool(stream), "cache_prompt": False,
                   "ignore_eos": bool(ignore_eos), "return_tokens": True, "verbose": True}
        chunks: list[tuple[float, Any]] = []
        rounds_before = self._draft_rounds()
        start = time.perf_counter()
        if stream:
            reply = self._server.handle_completions(request, lambda c: chunks.append((time.perf_counter(), c)))
        else:
            reply = self._server.handle_completions(request)
        wall = time.perf_counter() - start
        if isinstance(reply, dict):
            chunks.append((start + wall, reply))
        errors = [c["error"] for _, c in chunks if "error" in c]
        if errors:
            raise LlamaCppError(f"llama.cpp refused the request: {errors[0]}")
        out = _collect(chunks, start)
        out.wall_s, out.draft_rounds = wall, self._draft_rounds() - rounds_before
        if len(out.tokens) != out.timings.get("predicted_n"):
            if stream:  # held-back UTF-8 pieces (module doc)
                out.tokens = None
                return out
            raise LlamaCppError(f"llama.cpp returned {len(out.tokens)} token ids for "
                                f"{out.timings.get('predicted_n')} generated tokens")
        if not stream:
            out.ttft_s = out.timings.get("prompt_ms", 0.0) / 1000.0
        return out

    def _draft_rounds(self) -> int:
        match = _ROUNDS_METRIC.search(self._server.handle_metrics() or "")
        return int(float(match.group(1))) if match else 0

    def close(self) -> None:
        """Stop the server's threads and free the models (the engine does it when its object dies).

        The engine's destructor can wait forever when its main loop has not started yet (seen with a
        server closed right after a start without warmup), so a request the loop must answer (metrics)
        goes first."""
        if self._server is not None:
            self._server.handle_metrics()
            self._server = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def set_draft(spec, kind, threads: int, eagle3: Eagle3Draft | None, ngram: NgramDraft | None,
               dflash: DFlashDraft | None) -> None:
    """The speculative params of one draft kind (none: plain decoding)."""
    draft = eagle3 or dflash
    if draft is not None:
        what = "eagle3" if eagle3 is not None else "dflash"
        if isinstance(draft.n_max, bool) or not isinstance(draft.n_max, int) or draft.n_max < 1:
            raise ValueError(f"{what}.n_max must be a positive int, got {draft.n_max!r}")
        if dflash is not None:
            _check_dflash_n_max(dflash)
        spec.types = [kind.COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3 if eagle3 is not None
                      else kind.COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH]
        spec.draft.mparams.path = str(draft.path)
        spec.draft.n_max, spec.draft.n_min, spec.draft.p_min = draft.n_max, 0, 0.0
        spec.draft.cpuparams.n_threads = spec.draft.cpuparams_batch.n_threads = threads
    elif ngram is not None:
        spec.types = [kind.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        spec.ngram_simple.size_n, spec.ngram_simple.size_m = ngram.size_n, ngram.size_m


def _check_dflash_n_max(dflash: DFlashDraft) -> None:
    """``ValueError`` unless ``dflash.path`` is a DFlash GGUF whose block holds ``n_max`` drafts."""
    from eaglehead.builtin.gguf import GGUFError
    from eaglehead.builtin.gguf_target import field_value, open_gguf

    try:
        reader = open_gguf(dflash.path, "dflash.path")
        arch = field_value(reader, "general.architecture", dflash.path, "dflash.path")
        block = int(field_value(reader, f"{arch}.block_size", dflash.path, "dflash.path")) if arch == "dflash" else 0
    except GGUFError as err:
        raise ValueError(str(err)) from None
    if arch != "dflash":
        raise ValueError(f"dflash.path {dflash.path}: general.architecture is {arch!r}, not 'dflash'")
    if dflash.n_max > block - 1:
        raise ValueError(f"dflash.n_max {dflash.n_max}: a DFlash drafter of block_size {block} drafts at most "
                         f"{block - 1} tokens a round (llama.cpp would clamp it)")


def _collect(chunks: list[tuple[float, dict]], start: float) -> Completion:
    """One completion from the reply (or the streamed chunks, in order): ids, text, per-chunk times."""
    tokens, text, times, timings, finish = [], [], [], {}, None
    for t, chunk in chunks:
        choice = chunk["choices"][0]
        ids = (chunk.get("__verbose") or {}).get("tokens") or []
        tokens.extend(int(i) for i in ids)
        text.append(choice.get("text") or "")
        if ids or choice.get("text"):
            times.append(t - start)
        finish = choice.get("finish_reason") or finish
        timings = chunk.get("timings") or timings
    return Completion(tokens=tokens, text="".join(text), timings=timings, wall_s=0.0,
                      ttft_s=times[0] if times else None, draft_rounds=0, finish_reason=finish,
                      chunk_times_s=times)


class LlamaCppProcess:
    """:class:`LlamaCppServer` in a child process (module docstring: why), same ``complete`` and ``close``.

    The child is a fresh interpreter (``python -c``, this one's ``sys.path``; nothing of this process is
    copied or re-imported) answering one request at a time over a private pipe; errors come back with
    their type (``ValueError``, :class:`LlamaCppError`, :class:`LlamaCppMissing`) and message. It exits on
    ``close``, or when the pipe breaks (this process ended)."""

    def __init__(self, model_path: str | Path, **kwargs):
        self._conn, child = Pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from eaglehead.engines.llamacpp import _child_main; _child_main()",
             str(child.fileno()), str(os.getpid())], pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, env=env)
        child.close()
        try:
            self._conn.send((str(model_path), kwargs))
            self._answer()
        except BaseException:
            self._stop()
            raise

    def complete(self, token_ids: list[int], n_predict: int, **kwargs) -> Completion:
        """:meth:`LlamaCppServer.complete` in the child."""
        if self._conn is None:
            raise LlamaCppError("complete: the server is closed")
        self._conn.send(("complete", (list(token_ids), n_predict), kwargs))
        return self._answer()

    def _answer(self):
        try:
            status, payload = self._conn.recv()
        except (EOFError, OSError):
            try:
                code = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = "none yet"
            raise LlamaCppError(f"the llama.cpp child process ended without an answer (exit code {code})") from None
        if status == "ok":
            return payload
        kind, message = payload
        raise {"ValueError": ValueError, "LlamaCppMissing": LlamaCppMissing}.get(kind, LlamaCppError)(message)

    def close(self) -> None:
        """Close the server and wait for the child (killed if it does not end within 30 s)."""
        if self._conn is not None:
            try:
                self._conn.send(("close", (), {}))
                self._conn.recv()
            except (EOFError, OSError):
                pass
        self._stop()

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def die_with_parent(parent: int) -> bool:
    """Have the kernel SIGKILL this process when its parent dies (Linux: ``PR_SET_PDEATHSIG``); ``False`` when
    the parent ``parent`` (a pid) is already gone, before that took effect. For llama.cpp server children."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    return os.getppid() == parent


def _child_main() -> None:
    """The child of :class:`LlamaCppProcess`: start the server, then answer requests until ``close``. On
    Linux the kernel kills it when its parent dies, even in the middle of a request."""
    conn = Connection(int(sys.argv[1]))
    if not die_with_parent(int(sys.argv[2])):
        return

    def failure(err: BaseException):
        return "error", (type(err).__name__, str(err))

    def reply(message) -> bool:
        """Send ``message``; False when the parent's end is gone (it died or closed the pipe)."""
        try:
            conn.send(message)
            return True
        except (EOFError, OSError):
            return False

    try:
        model_path, kwargs = conn.recv()
    except (EOFError, OSError):  # the parent is gone before asking anything
        return
    try:
        server = LlamaCppServer(model_path, **kwargs)
    except Exception as err:  # noqa: BLE001 - sent back to the parent, raised there
        reply(failure(err))
        return
    with server:
        if not reply(("ok", None)):
            return
        while True:
            try:
                op, args, kw = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            if op == "close":
                server.close()
                reply(("ok", None))
                return
            try:
                result = ("ok", server.complete(*args, **kw))
            except Exception as err:  # noqa: BLE001
                result = failure(err)
            if not reply(result):
                return
