"""llama.cpp with N slots under the load generator (eval/load_drivers.py): the one engine-backed load test
(~8 s on 2 cores): two slots serve two requests at once, and greedy outputs do not depend on the slots or on
ngram drafting."""

from eaglehead.builtin.packages import smollm2_gguf_path
from eaglehead.eval.load import LoadSpec, Request, run_load, summarise
from eaglehead.eval.load_drivers import LlamaCppSlots

PROMPTS = [[1, 504, 3458, 314 + i, 28, 253, 216] for i in range(4)]


def _serve(slots, draft=None):
    drv = LlamaCppSlots(smollm2_gguf_path(), slots=slots, ctx_per_slot=512, threads=1, eos={2}, draft=draft)
    try:
        return run_load(drv, [Request(f"r{i}", p, 12) for i, p in enumerate(PROMPTS)], LoadSpec(concurrency=slots))
    finally:
        drv.close()


def test_slots_overlap_and_greedy_outputs_do_not_depend_on_them():
    one, two = _serve(1), _serve(2)
    ngram = _serve(2, {"kind": "ngram", "size_n": 3, "size_m": 3})
    by = {t.id: t for t in two.timings}
    # both slots busy at once: r1's first token comes before r0's last
    assert by["r1"].token_times[0] < by["r0"].token_times[-1]
    single = {t.id: t for t in one.timings}
    assert single["r1"].token_times[0] > single["r0"].token_times[-1]  # one slot: one after the other
    ref = {t.id: t.tokens for t in one.timings}
    assert {t.id: t.tokens for t in two.timings} == ref == {t.id: t.tokens for t in ngram.timings}
    for run in (one, two, ngram):
        s = summarise(run)
        assert s["committed_tokens"] == sum(len(t) for t in ref.values()) and s["tokens_per_s"] > 0
