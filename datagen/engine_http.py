"""The HTTP side of the serving engines: JSON requests with bounded retries, and a bounded pool of them in flight.

    client = JsonClient("http://127.0.0.1:8000", headers={}, timeout_s=600, retries=4, backoff_s=1.0)
    models = client.request("GET", "/v1/models")
    replies = client.post_many("/v1/completions", bodies, labels, max_concurrency=32)  # [(reply, seconds)]

Standard library only. Each worker thread keeps one keep-alive connection, so a request costs no TCP set-up; a
connection error, a timeout, HTTP 408/429 or any 5xx is retried after ``backoff_s * 2**attempt`` seconds (at most
``retries`` times); any other status fails at once. When one request of a batch fails for good, or the caller is
interrupted (Ctrl-C), every connection of the client is shut down so the requests still in flight end now rather
than at their timeout.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from urllib.parse import urlsplit

RETRY_STATUS = {408, 429}  # and every 5xx: the server is busy, restarting or broken for now
MAX_BACKOFF_S = 60.0


class EngineError(ValueError):
    """A server that cannot be reached or used; the message names the URL (and the prompt) and what was expected.
    A ValueError, as every other unusable setting is, so ``eaglehead prepare`` reports it as one line (exit 2)."""


class HTTPStatusError(EngineError):
    """An answer with a status that retrying does not fix (a 4xx other than 408 and 429)."""

    def __init__(self, message: str, status: int, body: str):
        super().__init__(message)
        self.status, self.body = status, body


class JsonClient:
    """JSON over HTTP to one server (``base_url``'s scheme, host and port; request paths start at its root)."""

    def __init__(self, base_url: str, *, headers: dict[str, str] | None = None, timeout_s: float = 600.0,
                 retries: int = 4, backoff_s: float = 1.0):
        parts = urlsplit(base_url)
        self.base_url = base_url.rstrip("/")
        self.root = f"{parts.scheme}://{parts.netloc}"
        self.prefix = parts.path.rstrip("/")  # e.g. "/v1": where the OpenAI routes are
        self._connect = lambda timeout: (http.client.HTTPSConnection if parts.scheme == "https" else
                                         http.client.HTTPConnection)(parts.hostname, parts.port, timeout=timeout)
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._local = threading.local()
        self._open: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()
        self._abort = threading.Event()

    # ------------------------------------------------------------------------------------------ one request
    def request(self, method: str, path: str, body: dict | None = None, *, timeout_s: float | None = None,
                retries: int | None = None) -> dict:
        """The JSON answer of ``method path``; :class:`EngineError` naming the URL once the retries are spent."""
        url, retries = self.root + path, self.retries if retries is None else retries
        last, attempt, fresh_retry = "", 0, True
        while True:
            if self._abort.is_set():
                raise EngineError(f"{method} {url}: abandoned (another request failed, or interrupted)")
            reused = getattr(self._local, "conn", None) is not None and self._local.conn.sock is not None
            try:
                status, data = self._once(method, path, body, timeout_s or self.timeout_s)
            except (OSError, http.client.HTTPException) as err:  # refused, reset, timed out, cut short
                self._drop_connection()
                if reused and fresh_retry and isinstance(err, (http.client.RemoteDisconnected, ConnectionResetError,
                                                               BrokenPipeError)):
                    # A kept-alive connection the server had closed while idle: retry at once on a new one, not
                    # counted (a server that died fails again there, with "connection refused").
                    fresh_retry = False
                    continue
                last = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            else:
                if status < 300:
                    try:
                        return json.loads(data)
                    except ValueError:
                        raise EngineError(f"{method} {url}: the answer is not JSON: {data[:200]!r}") from None
                text = data.decode("utf-8", "replace")[:500]
                if status not in RETRY_STATUS and status < 500:
                    raise HTTPStatusError(f"{method} {url}: HTTP {status}: {text}", status, text)
                last = f"HTTP {status}: {text}"
            if attempt >= retries:
                raise EngineError(f"{method} {url}: failed after {retries + 1} attempt(s); last error: {last}")
            self._abort.wait(min(self.backoff_s * 2 ** attempt, MAX_BACKOFF_S))
            attempt += 1

    def _once(self, method: str, path: str, body: dict | None, timeout_s: float) -> tuple[int, bytes]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect(timeout_s)
        with self._lock:  # (again after _close_all: a closed connection reopens on its next request)
            self._open.add(conn)
        conn.timeout = timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        payload = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=payload, headers=self.headers)
        resp = conn.getresponse()
        return resp.status, resp.read()

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            with self._lock:
                self._open.discard(conn)
            self._local.conn = None

    # ------------------------------------------------------------------------------------- many in flight
    def post_many(self, path: str, bodies: list[dict], labels: list[str],
                  max_concurrency: int) -> list[tuple[dict, float]]:
        """``(answer, seconds)`` for each body, at most ``max_concurrency`` in flight, in the order given.

        The first request that fails for good ends the batch: the others are abandoned and :class:`EngineError`
        names its label (``prompt <label>: ...``)."""
        self._abort.clear()
        results: list[tuple[dict, float] | None] = [None] * len(bodies)

        def one(i: int) -> None:
            t0 = time.perf_counter()
            try:
                reply = self.request("POST", path, bodies[i])
            except EngineError as err:
                raise EngineError(f"prompt {labels[i]}: {err}") from None
            results[i] = (reply, time.perf_counter() - t0)

        pool = ThreadPoolExecutor(max_workers=max(1, min(max_concurrency, len(bodies))), thread_name_prefix="engine")
        ok = False
        try:
            futures = [pool.submit(one, i) for i in range(len(bodies))]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f in done and f.exception() is not None]
            if failed:
                raise failed[0].exception()
            ok = True
        finally:
            if not ok:  # a failure or Ctrl-C: end the requests in flight now, not at their timeout
                self.abort()
            pool.shutdown(wait=True, cancel_futures=True)
            self._close_all()
        return results  # type: ignore[return-value]

    def abort(self) -> None:
        """Stop every request of this client: retries give up and open sockets are shut down."""
        self._abort.set()
        with self._lock:
            for conn in self._open:
                if conn.sock is not None:
                    try:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def _close_all(self) -> None:
        with self._lock:
            for conn in self._open:
                conn.close()
            self._open.clear()

    def close(self) -> None:
        self._close_all()
