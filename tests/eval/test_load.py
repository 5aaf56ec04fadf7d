"""The load generator's arithmetic (eval/load.py) against hand-computed values, on fake drivers whose timings
are known: a virtual clock for the static-batch scheduler, real (short) sleeps for the threaded stream driver."""

import math
import sys
import threading
import time

import pytest

from eaglehead.eval.load import (LoadError, LoadRun, LoadSpec, Request, RequestTiming, Served, poisson_offsets,
                                 run_load, summarise)


class VirtualClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def sleep(self, d):
        self.t += d


class FakeBatch:
    """A batch costs ``prefill`` then ``step`` per token; every row's token i arrives at prefill + (i+1)*step."""

    def __init__(self, clock, batch_size, prefill=1.0, step=0.5, eos_after=None):
        self.clock, self.batch_size, self.prefill, self.step = clock, batch_size, prefill, step
        self.eos_after = eos_after or {}
        self.batches = []

    def serve_batch(self, reqs):
        start = self.clock()
        self.batches.append(([r.id for r in reqs], start))
        out, longest = [], 0
        for r in reqs:
            n = self.eos_after.get(r.id, r.max_new)
            out.append(Served(list(range(n)), [start + self.prefill + i * self.step for i in range(n)],
                              eos=r.id in self.eos_after))
            longest = max(longest, n)
        self.clock.t = start + self.prefill + (longest - 1) * self.step
        return out


def reqs(n, budget=4):
    return [Request(f"r{i}", [1, 2, 3], budget) for i in range(n)]


def test_summary_arithmetic_by_hand():
    # two requests; times chosen so every figure is a short sum
    a = RequestTiming("a", "", 4, arrival=0.0, admitted=1.0, token_times=[2.0, 2.0, 3.0, 5.0], eos=False)
    b = RequestTiming("b", "", 4, arrival=1.0, admitted=1.0, token_times=[1.5, 2.5], eos=True)  # EOS after 2 of 4
    s = summarise(LoadRun(LoadSpec(concurrency=2), [a, b], t0=0.0, offered=2))
    assert s["queue_mean_s"] == pytest.approx(0.5, abs=1e-12)
    assert s["ttft_mean_s"] == pytest.approx((2.0 + 0.5) / 2, abs=1e-12)
    assert s["e2e_mean_s"] == pytest.approx((5.0 + 1.5) / 2, abs=1e-12)
    assert s["tpot_mean_s"] == pytest.approx((3.0 / 3 + 1.0 / 1) / 2, abs=1e-12)
    # gaps: a -> 0, 1, 2; b -> 1; numpy's linear percentile of [0, 1, 1, 2]
    assert s["itl_p50_s"] == pytest.approx(1.0, abs=1e-12)
    assert s["itl_p95_s"] == pytest.approx(1.0 + 0.85 * 1.0, abs=1e-12)  # rank 0.95*3 = 2.85
    assert s["itl_event_p50_s"] == pytest.approx(1.0, abs=1e-12)  # a's distinct gaps 1, 2; b's 1 -> [1, 1, 2]
    assert s["committed_tokens"] == 6 and s["budget_tokens"] == 8
    assert s["window_s"] == pytest.approx(5.0, abs=1e-12)
    assert s["tokens_per_s"] == pytest.approx(6 / 5.0, abs=1e-12)  # only what arrived, not the budget
    assert s["eos_shortened"] == 1 and s["eos_shortened_tokens_missing"] == 2
    assert s["saturated"] is False


def test_closed_loop_static_batches_on_a_virtual_clock():
    clock = VirtualClock()
    drv = FakeBatch(clock, batch_size=2)
    run = run_load(drv, reqs(4), LoadSpec(concurrency=2), clock=clock, sleep=clock.sleep)
    # batch 1: r0, r1 admitted at 100, tokens at 101, 101.5, 102, 102.5; both answered at 102.5, so r2 and r3
    # arrive at 102.5 and form batch 2 at once
    assert [b for b, _ in drv.batches] == [["r0", "r1"], ["r2", "r3"]]
    by = {t.id: t for t in run.timings}
    assert by["r2"].arrival == pytest.approx(102.5) and by["r2"].queue_s == pytest.approx(0.0)
    s = summarise(run)
    assert s["ttft_mean_s"] == pytest.approx(1.0)
    assert s["tpot_mean_s"] == pytest.approx(0.5)
    assert s["window_s"] == pytest.approx(5.0) and s["tokens_per_s"] == pytest.approx(16 / 5.0)


def test_closed_loop_waits_for_the_batch_when_a_row_ends_early():
    clock = VirtualClock()
    drv = FakeBatch(clock, batch_size=2, eos_after={"r0": 1})
    run = run_load(drv, reqs(3), LoadSpec(concurrency=2), clock=clock, sleep=clock.sleep)
    by = {t.id: t for t in run.timings}
    # r0 is answered at 101 (EOS), its client sends r2 then; the batch runs to 102.5: r2 queues 1.5 s
    assert by["r2"].arrival == pytest.approx(101.0) and by["r2"].queue_s == pytest.approx(1.5)
    s = summarise(run)
    assert s["eos_shortened"] == 1 and s["committed_tokens"] == 1 + 4 + 4


def test_open_loop_queueing_against_the_seeded_arrivals():
    clock = VirtualClock()
    drv = FakeBatch(clock, batch_size=1, prefill=0.1, step=0.1)  # a request of 4 tokens takes 0.4 s
    spec = LoadSpec(rate=1.0, capacity=1, seed=3)
    run = run_load(drv, reqs(6), spec, clock=clock, sleep=clock.sleep)
    arrivals = [100.0 + o for o in poisson_offsets(6, 1.0, 3)]
    free, expect = 100.0, []
    for a in arrivals:  # one server, FCFS: admitted at max(arrival, when the previous finished)
        start = max(a, free)
        expect.append(start - a)
        free = start + 0.4
    got = [t.queue_s for t in sorted(run.timings, key=lambda t: t.arrival)]
    assert got == pytest.approx(expect, abs=1e-9)
    assert summarise(run)["saturated"] is False


def test_poisson_rate_within_bounds_of_its_sample():
    n, rate = 4000, 2.5
    offs = poisson_offsets(n, rate, seed=11)
    gaps = [b - a for a, b in zip(offs, offs[1:])]
    mean = sum(gaps) / len(gaps)
    # exponential gaps: sd of the mean = (1/rate) / sqrt(n); 5 sd leaves a false failure below 1e-6
    assert abs(mean - 1 / rate) < 5 * (1 / rate) / math.sqrt(len(gaps))
    assert poisson_offsets(50, rate, seed=11) == offs[:50] and poisson_offsets(50, rate, seed=12) != offs[:50]


def test_saturation_on_a_slow_batch_driver_gives_no_latency():
    clock = VirtualClock()
    drv = FakeBatch(clock, batch_size=1, prefill=1.0, step=1.0)  # 4 s a request against 10 arriving per s
    run = run_load(drv, reqs(60), LoadSpec(rate=10.0, capacity=1), clock=clock, sleep=clock.sleep)
    s = summarise(run)
    assert s["saturated"] is True and "limit" in s["saturation"]
    assert s["ttft_p95_s"] is None and s["tokens_per_s"] is None
    assert s["requests"] < 60 and s["dropped"] > 0


class FakeStream:
    """Sleeps ``step`` per token; tracks how many requests are in flight at once."""

    def __init__(self, slots, step=0.004):
        self.slots, self.step = slots, step
        self.lock, self.inflight, self.peak = threading.Lock(), 0, 0

    def serve(self, req):
        with self.lock:
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
        times = []
        for _ in range(req.max_new):
            time.sleep(self.step)
            times.append(time.perf_counter())
        with self.lock:
            self.inflight -= 1
        return Served(list(range(req.max_new)), times)


def test_closed_loop_threads_keep_n_in_flight():
    drv = FakeStream(slots=3)
    run = run_load(drv, reqs(9), LoadSpec(concurrency=3), warmup=Request("w", [1], 2))
    assert drv.peak == 3 and len(run.timings) == 9
    s = summarise(run)
    # a closed loop admits on arrival; what is left is a thread waiting for the GIL, at most about one switch
    # interval per hand-over (two: the sending and the starting thread)
    assert 0.0 <= s["queue_mean_s"] <= 2 * sys.getswitchinterval()
    # TPOT >= the sleep per token; a loaded 2-core machine may add scheduling delay, never remove it
    assert 0.004 <= s["tpot_mean_s"] < 0.05
    assert s["committed_tokens"] == 36


def test_open_loop_saturation_on_a_slow_stream_driver():
    drv = FakeStream(slots=1, step=0.05)  # 0.2 s a request, 200 arrive per s
    run = run_load(drv, reqs(40), LoadSpec(rate=200.0, capacity=1, queue_limit=3))
    s = summarise(run)
    assert s["saturated"] is True and s["itl_p95_s"] is None and s["dropped"] > 0


def test_bad_specs_name_the_parameter():
    with pytest.raises(LoadError, match="--concurrency"):
        LoadSpec(concurrency=0)
    with pytest.raises(LoadError, match="--arrival-rate"):
        LoadSpec(rate=-1.0, capacity=1)
    with pytest.raises(LoadError, match="exactly one"):
        LoadSpec()
