"""The load sweep end to end on tiny local models (eval/load_sweep.py): the torch static-batch driver's greedy
outputs equal vanilla's, its timing fields are sane, per-state draft lengths are chosen and compared, a killed
run resumes from its journal, and bad options are named before any work."""

import argparse
import json

import pytest
import torch

from eaglehead.decode import DraftModelDrafter, SamplingConfig, vanilla_generate
from eaglehead.eval.journal import CALLS
from eaglehead.eval.load import LoadSpec, Request, run_load, summarise
from eaglehead.eval.load_drivers import TorchBatchDriver
from eaglehead.eval.load_report import COLUMNS, LOAD_FIGURES, load_table
from eaglehead.eval.load_sweep import kv_bytes_per_token, kv_in_flight_bytes
from eaglehead.eval.plan import add_eval_arguments, plan_from_args
from eaglehead.eval.report_html import check_html
from eaglehead.eval.runner import run_eval
from eaglehead.eval.schedule import Models
from tests.eval.test_runner import _tokenizer, workspace  # noqa: F401 - the module's fixture, reused
from tests.tiny_models import tiny_llama


def _plan(ws, out, *extra, factories=None):
    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    args = parser.parse_args(["--target", str(ws["root"] / "target"), "--prompts", str(ws["prompts"]),
                              "--out", str(out), "--device", "cpu", *extra])
    return plan_from_args(args, drafter_factories=factories)


def _factories(ws):
    return {"eagle3": lambda target: DraftModelDrafter(ws["second_lm"])}


def test_torch_batch_driver_is_vanilla_greedy_and_timed():
    tok = _tokenizer()
    target = tiny_llama(seed=0, vocab=len(tok), hidden=32, layers=2, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id).eval()
    models = Models(target=target, draft_lm=None, drafters={"draft-lm": DraftModelDrafter(
        tiny_llama(seed=3, vocab=len(tok), hidden=32, layers=1).eval())}, eos=set(), pad_id=tok.pad_token_id,
        device=torch.device("cpu"), max_new=6, seed=0)
    prompts = [[2, 5, 6, 7], [2, 8, 9], [2, 10, 11, 12, 5], [2, 6]]
    reqs = [Request(f"r{i}", p, 6) for i, p in enumerate(prompts)]
    drv = TorchBatchDriver(models, "draft-lm", 2, temperature=0.0, batch_size=2)
    run = run_load(drv, reqs, LoadSpec(concurrency=2))
    by = {t.id: t for t in run.timings}
    for i, p in enumerate(prompts):  # the batch's greedy tokens are each prompt's own vanilla decoding
        ref = vanilla_generate(target, torch.tensor([p]), sampling=SamplingConfig(temperature=0.0), max_new_tokens=6)
        served = drv.results[i // 2].tokens[i % 2]
        assert served == ref.tokens[0]
        t = by[f"r{i}"]
        assert t.n_tokens == 6 and t.admitted >= t.arrival and t.token_times == sorted(t.token_times)
        assert t.ttft_s > 0 and t.e2e_s >= t.ttft_s
    s = summarise(run)
    assert s["committed_tokens"] == 24 and s["tokens_per_s"] > 0 and s["itl_p95_s"] >= s["itl_p50_s"] >= 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kv_figure_is_the_cache_a_forward_fills(dtype):
    model = tiny_llama(layers=3).to(dtype)
    with torch.inference_mode():
        cache = model(torch.arange(7)[None], use_cache=True).past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert held == 7 * kv_bytes_per_token(model.config, dtype)
    reqs = [Request(f"r{k}", [1] * (5 + k), 4) for k in range(3)]
    assert kv_in_flight_bytes(100, LoadSpec(concurrency=2), reqs) == 2 * (7 + 4) * 100  # 2 in flight, longest


@pytest.fixture(scope="module")
def auto_sweep(workspace, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("load") / "report"
    plan = _plan(workspace, out, "--methods", "vanilla,eagle3", "--gamma", "auto:1..3", "--concurrency", "1,2",
                 "--max-new-tokens", "4,6", "--tune-fraction", "0.5", factories=_factories(workspace))
    return run_eval(plan), out, plan


def test_sweep_states_speedups_and_report_files(auto_sweep):
    report, out, plan = auto_sweep
    test = report["load"]
    states = {(r["method"], r["concurrency"], r["budget"]) for r in test}
    assert {(m, c, b) for m in ("vanilla", "eagle3") for c in (1, 2) for b in (4, 6)} <= states
    for r in test:
        assert r["split"] == "test" and not r["saturated"]
        assert r["committed_tokens"] <= r["budget_tokens"] and r["tokens_per_s"] > 0
        assert r["kv_bytes"] > 0 and r["peak_bytes"] > 0
        if r["method"] == "vanilla":
            assert r["speedup"] == pytest.approx(1.0, abs=1e-12)
        else:
            assert r["speedup"] > 0 and r["tau"] >= 1.0
    header, *rows = load_table(report).splitlines()
    assert header.split()[-4:] == ["KV", "MiB", "peak", "MiB"]  # every column printed, the last ones included
    assert all(c in header for c in COLUMNS)
    for name in ("report.json", "report.md", "report.html", *LOAD_FIGURES):
        assert (out / name).is_file(), name
    assert check_html((out / "report.html").read_text(), figures=len(LOAD_FIGURES)) == []


def test_per_state_gamma_is_chosen_and_compared(auto_sweep):
    report, _, plan = auto_sweep
    chosen = report["load_gamma"]
    assert {(c["concurrency"], c["bucket"]) for c in chosen} == {(1, "short"), (2, "short")}
    assert all(c["chosen"] in (1, 2, 3) and "dC/dK" in c["how"] for c in chosen)
    tune = [r for r in report["load_tune"] if r["method"] == "eagle3"]
    assert {r["gamma"] for r in tune} == {1, 2, 3} and all(r["round_samples"] for r in tune)
    for v in report["load_gamma_verdicts"]:
        assert v["per_state_gamma"] in (1, 2, 3) and v["fixed_gamma"] in (1, 2, 3)
        assert v["wins_tpot_mean"] == (v["tpot_mean_s"][0] <= v["tpot_mean_s"][1])
    roles = [r for r in report["load"] if r["method"] == "eagle3"]
    assert all(r["gamma_role"] for r in roles)  # only per-state and fixed draft lengths run on the test requests


def test_killed_sweep_resumes_without_measuring_again(auto_sweep, workspace, tmp_path):  # noqa: F811
    report, out, _ = auto_sweep
    lines = (out / CALLS).read_text().splitlines()
    cut = tmp_path / "cut"
    cut.mkdir()
    for name in ("plan.json",):
        (cut / name).write_text((out / name).read_text())
    keep = len(lines) // 2
    (cut / CALLS).write_text("\n".join(lines[:keep]) + "\n" + lines[keep][: len(lines[keep]) // 2])  # a torn write
    plan = _plan(workspace, cut, "--methods", "vanilla,eagle3", "--gamma", "auto:1..3", "--concurrency", "1,2",
                 "--max-new-tokens", "4,6", "--tune-fraction", "0.5", "--resume", factories=_factories(workspace))
    resumed = run_eval(plan)
    launch = resumed["config"]["launches"][-1]
    assert launch["calls_replayed"] == keep and launch["calls_measured"] == len(lines) - keep
    before = {json.dumps([r["method"], r["gamma"], r["concurrency"], r["budget"]]): r["tokens_per_s"]
              for r in report["load"]}
    replayed = json.loads(lines[0])["record"]  # the first journaled state comes back exactly
    again = [r for r in resumed["load_tune"] + resumed["load"]
             if (r["method"], r["gamma"], r["concurrency"], r["budget"], r["split"]) ==
             (replayed["method"], replayed["gamma"], replayed["concurrency"], replayed["budget"], replayed["split"])]
    assert again and again[0]["tokens_per_s"] == replayed["tokens_per_s"]
    assert before  # the first run's states all had a throughput


def test_bad_load_options_are_named(workspace, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="--concurrency"):
        _plan(workspace, tmp_path / "a", "--concurrency", "0,2")
    with pytest.raises(ValueError, match="--arrival-rate"):
        _plan(workspace, tmp_path / "b", "--arrival-rate", "fast")
    with pytest.raises(ValueError, match="--arrival-rate"):
        _plan(workspace, tmp_path / "c", "--arrival-rate", "-1")
    with pytest.raises(ValueError, match="several budgets run in a load sweep"):
        _plan(workspace, tmp_path / "d", "--max-new-tokens", "4,8")
    with pytest.raises(ValueError, match="--methods hf-generate"):
        _plan(workspace, tmp_path / "e", "--concurrency", "1", "--methods", "vanilla,hf-generate")
    with pytest.raises(ValueError, match="--max-new-tokens"):
        _plan(workspace, tmp_path / "f", "--max-new-tokens", "0")
    plan = _plan(workspace, tmp_path / "g", "--max-new-tokens", "16")
    assert plan.max_new_tokens == 16 and plan.budgets == (16,) and not plan.load  # one integer: as before


def test_a_rate_the_loop_cannot_sustain_is_reported_as_saturated(workspace, tmp_path):  # noqa: F811
    # 1000 requests/s against a loop that takes milliseconds a request: admissions fall far behind arrivals
    plan = _plan(workspace, tmp_path / "sat", "--methods", "vanilla", "--arrival-rate", "1000", "--concurrency",
                 "1", "--max-new-tokens", "6", "--load-requests", "6")
    report = run_eval(plan)
    open_loop = [r for r in report["load"] if r["load"] == "poisson"]
    assert open_loop and all(r["saturated"] and r["tpot_mean_s"] is None and r["speedup"] is None
                             for r in open_loop)
    closed = [r for r in report["load"] if r["load"] == "closed"]
    assert closed and not any(r["saturated"] for r in closed)
    from eaglehead.eval.tables import compact_table

    assert "saturated: admitted" in compact_table(report)
