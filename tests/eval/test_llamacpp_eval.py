"""llama.cpp as an engine of ``eaglehead eval`` (methods ``llamacpp``, ``llamacpp-eagle3``, ``llamacpp-ngram``)
beside the torch methods, on the shipped SmolLM2-135M-Instruct GGUF and its EAGLE-3 head: one report with
an ``engine`` column, llama.cpp's tau from its own counters, the draft length tuned by the gamma rule, parity
with torch on the float32 GGUF, journal replay, and the plan-time errors."""

import json
import sys
from pathlib import Path

import pytest

from eaglehead.engines.llamacpp import INSTALL_HINT
from eaglehead.builtin.packages import SMOLLM2, smollm2_gguf_path
from eaglehead.demos.smollm2_assets import llamacpp_head
from eaglehead.eval.engine_result import EngineResult
from eaglehead.eval.journal import result_from_dict, result_to_dict
from eaglehead.eval.metrics import compute_metrics
from eaglehead.eval.plan import EvalPlan
from eaglehead.eval.report import check_report_consistency
from eaglehead.eval.runner import run_eval

from tests.eval.test_runner import _args, workspace  # noqa: F401  (the tiny HF target for the error paths)

HEAD = str(llamacpp_head(Path("builtin/assets")))  # the shipped EAGLE-3 head llama.cpp can run
DFLASH = "builtin/assets/smollm2_dflash"  # the shipped DFlash drafter
# MT-bench first turns (writing-free: roleplay, math, coding) on which the float32 GGUF's EAGLE-3 outputs
# equal plain llama.cpp's (measured): a near-tie that flips a greedy token changes the rest of the text and
# so the acceptance, which is not what the tau comparison below is about.
QUESTIONS = ("91", "111", "121")


def _first_turns(path, category=None):
    """QUESTIONS' first turns as a prompt file; ``category`` puts them in one (so that a tune split exists)."""
    from eaglehead.eval.prompts import load_prompt_set

    rows = [{"id": p.id, "category": category or p.category, "turns": p.turns[:1]}
            for p in load_prompt_set("mt-bench") if p.id in QUESTIONS]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def first_turns(tmp_path_factory):
    return _first_turns(tmp_path_factory.mktemp("prompts") / "mt_bench_first_turns.jsonl")


def _plan(prompts, out, **kw) -> EvalPlan:
    # One llama.cpp thread: its threads spin at barriers, so two of them beside a busy test process (2 cores)
    # stall (2 s instead of ~0.3 s a call, measured); outputs and counters do not depend on it.
    base = dict(target=str(smollm2_gguf_path()), prompts=str(prompts), drafts={"eagle3": HEAD}, gamma_mode="fixed",
                gammas=(3,), max_new_tokens=32, tune_fraction=0.0, out=str(out), device="cpu", threads=1)
    return EvalPlan(**{**base, **kw})


@pytest.fixture(scope="module")
def f32_report(first_turns, tmp_path_factory):
    out = tmp_path_factory.mktemp("llamacpp") / "f32"
    plan = _plan(first_turns, out, methods=["vanilla", "eagle3", "llamacpp", "llamacpp-eagle3"],
                 llamacpp_dtype="float32", llamacpp_head_dtype="float32")
    return run_eval(plan), out, plan


def _overall(report):
    return {r["method"]: r for r in report["runs"] if r["category"] == "all"}


def test_one_report_with_engine_columns(f32_report):
    report, out, _ = f32_report
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["consistency_violations"] == [] and check_report_consistency(on_disk) == []
    runs = _overall(report)
    assert set(runs) == {"vanilla", "eagle3", "llamacpp", "llamacpp-eagle3"}
    assert all(r["engine"] == ("llama.cpp" if m.startswith("llamacpp") else "torch") for m, r in runs.items())
    assert "| llamacpp-eagle3 | llama.cpp | 3 |" in (out / "report.md").read_text()
    cfg = report["config"]["llamacpp"]
    assert cfg["model_dtype"] == "float32" and cfg["model_gguf"].endswith("-float32.gguf") and cfg["threads"] == 1
    assert (out / "llamacpp" / "eagle3-head-float32.gguf").is_file()  # exported from --draft into --out
    for m in ("llamacpp", "llamacpp-eagle3"):
        r = runs[m]
        assert r["requests"] == 3 and r["output_tokens"] == 3 * 32 and r["survival"] == []
        assert r["engine_time_per_token_s"] < r["time_per_token_s"]  # the engine divides by one token more
        assert 0 < r["ttft_s"] < r["latency_s"] and r["itl_p50_s"] is not None and r["speedup_vs_engine"] > 0
        assert r["identity_reference"] == "llamacpp" and "engine totals" in r["round_detail"]
    assert runs["llamacpp"]["tau"] == 1.0 and runs["llamacpp"]["speedup_vs_engine"] == 1.0
    assert runs["eagle3"]["identity_reference"] == "vanilla" and report["identity"]["all_identical"] is True


def test_float32_gguf_greedy_parity_with_torch(f32_report):
    report, _, _ = f32_report
    plain = _overall(report)["llamacpp"]
    assert plain["identical_to_reference"] is True  # itself
    assert plain["identical_to_vanilla"] is True and plain["mismatched_vanilla_prompts"] == 0  # the same model
    assert any(n.startswith("llamacpp (") and "torch vanilla on 3/3" in n for n in report["notes"])
    assert report["identity"]["engines"]["llama.cpp"]["greedy_runs_checked"] == 2


def test_llamacpp_eagle3_tau_matches_ours(f32_report):
    """Same model (F32), same head (float32 GGUF), same draft length 3. llama.cpp's tau is 1 + accepted / rounds
    that carried a draft; ours over the same kind of rounds is ``tau_drafting``. They still differ by how the
    first token is made: llama.cpp samples it from the prompt's logits (no draft), our loop drafts already in
    the round that makes it, so round boundaries are offset; measured 0.02 apart on these prompts."""
    runs = _overall(f32_report[0])
    ours, theirs = runs["eagle3"], runs["llamacpp-eagle3"]
    assert ours["tau"] > 1.3 and theirs["tau"] > 1.3  # a working head and export, not two failures alike
    assert abs(theirs["tau"] - ours["tau_drafting"]) <= 0.05
    assert theirs["tau_drafting"] == theirs["tau"] and theirs["verified_mean"] <= 3


def test_llamacpp_runs_replay_from_the_journal(f32_report, first_turns, monkeypatch):
    import eaglehead.eval.schedule as schedule

    report, out, plan = f32_report
    calls = []
    monkeypatch.setattr(schedule, "run_call", lambda *a, **k: calls.append(a[1]))
    again = run_eval(_plan(first_turns, out, methods=plan.methods, llamacpp_dtype="float32",
                           llamacpp_head_dtype="float32", resume=True))
    assert calls == [] and again["runs"] == report["runs"]
    group = json.loads((out / "calls.jsonl").read_text().splitlines()[0])
    stored = next(c for m, _, c in group["calls"] if m == "llamacpp-eagle3")["result"]
    assert isinstance(result_from_dict(stored), EngineResult) and stored["engine_stats"]["n_max"] == 3


def test_ngram_draft_length_tuned_by_the_gamma_rule_with_zero_as_a_candidate(tmp_path):
    """The shipped Q4_1 file as-is; draft length 0 (no speculation) is one of the candidates; batch 2 skips
    llama.cpp with a note."""
    prompts = _first_turns(tmp_path / "one_category.jsonl", category="mt-bench")  # 1 tune prompt, 2 test
    plan = _plan(prompts, tmp_path / "q4", methods=["vanilla", "llamacpp-ngram"], gamma_mode="auto",
                 gammas=(1, 2), tune_fraction=0.34, max_new_tokens=16, batch_sizes=(1, 2))
    report = run_eval(plan)
    assert report["consistency_violations"] == []
    sel = {s["method"]: s for s in report["gamma_selection"]}
    assert [row["gamma"] for row in sel["llamacpp-ngram"]["table"]] == [0, 1, 2]
    runs = [r for r in report["runs"] if r["category"] == "all"]
    assert {(r["method"], r["batch_size"]) for r in runs} == {("vanilla", 1), ("llamacpp", 1), ("llamacpp-ngram", 1),
                                                              ("vanilla", 2)}
    ngram = next(r for r in runs if r["method"] == "llamacpp-ngram")
    assert ngram["gamma"] == sel["llamacpp-ngram"]["chosen"] and ngram["identical_to_reference"] is True
    assert any("batch_size 1 only" in n and "llamacpp-ngram" in n for n in report["notes"])
    assert report["config"]["llamacpp"]["model_dtype"] == "as-is"


def test_engine_result_metrics_use_the_engine_counters():
    stats = {"engine": "llama.cpp", "n_max": 3, "draft_rounds": 8, "drafted": 24, "accepted": 10, "predicted_n": 21,
             "predicted_ms": 400.0, "prompt_n": 30, "prompt_ms": 50.0, "wall_s": 0.5}
    res = EngineResult(tokens=[list(range(21))], rounds=[], token_times=[[0.05 + 0.02 * i for i in range(21)]],
                       t_start=0.0, t_end=0.5, prompt_lengths=[30], t_prefill=0.05, finished_by_eos=[False],
                       prefill_tokens=1, engine_stats=stats)
    assert result_from_dict(json.loads(json.dumps(result_to_dict(res)))) == res
    m = compute_metrics(res)
    # 20 tokens after the first: 8 draft rounds commit 10 + 8, so 2 rounds carried no draft.
    assert (m.rounds, m.committed_tokens, m.tau, m.tau_committed) == (10, 20, 1 + 10 / 8, 20 / 10)
    assert m.acceptance_rate == 10 / 24 and m.verified_mean == 3 and m.survival == []
    assert m.time_per_token_s == pytest.approx(0.4 / 20) and m.engine_time_per_token_s == pytest.approx(0.4 / 21)
    assert m.ttft_s == pytest.approx(0.05) and m.t_verify_mean_s == pytest.approx(0.04) and m.t_draft_mean_s == 0
    with pytest.raises(ValueError, match="mix engine totals"):
        compute_metrics([res, EngineResult(**{**vars(res), "engine_stats": {}})])


def test_a_held_back_token_is_timed_at_the_next_chunk():
    from eaglehead.eval.llamacpp_engine import held_back_times
    from tests.tiny_models import tiny_tokenizer

    tok = tiny_tokenizer()
    ids = tok("a \U0001F642 b")["input_ids"]  # the emoji is four byte tokens: three end inside a character
    held = [tok.decode(ids[: i + 1]).endswith("\ufffd") for i in range(len(ids))]
    assert sum(held) == 3
    chunks = [float(k) for k in range(len(ids) - 3)]
    times = held_back_times(ids, chunks, tok, "llamacpp")
    first = held.index(True)
    assert times[first: first + 4] == [chunks[first]] * 4 and times[-1] == chunks[-1]


@pytest.mark.parametrize("kw, match", [
    (dict(llamacpp_dtype="q8"), "--llamacpp-dtype"),
    (dict(llamacpp_head_dtype="int4"), "--llamacpp-head-dtype"),
    (dict(threads=0), "--threads"),
    (dict(methods=["vanilla", "llamacpp-eagle3"], drafts={}), "--methods llamacpp-eagle3 needs --draft"),
    (dict(target=str(SMOLLM2) + "-x"), "--target"),
])
def test_bad_llamacpp_options_are_named(first_turns, tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        _plan(first_turns, tmp_path / "o", **{"methods": ["vanilla", "llamacpp"], **kw})


def test_a_non_gguf_target_is_refused_by_name(workspace, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="--target .*llama.cpp methods need a GGUF target"):
        run_eval(_args(workspace, tmp_path / "o", "--methods", "vanilla,llamacpp"))


def test_without_xllamacpp_the_plan_gives_the_pip_command(first_turns, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # import xllamacpp now raises ImportError
    with pytest.raises(ValueError, match="--methods.*xllamacpp") as err:
        _plan(first_turns, tmp_path / "o", methods=["vanilla", "llamacpp"])
    assert INSTALL_HINT in str(err.value)


def test_an_eagle31_draft_needs_a_plain_head_for_llamacpp_and_llamacpp_draft_gives_it(first_turns, tmp_path):
    """llama.cpp cannot run an EAGLE 3.1 head: with one as --draft, llamacpp-eagle3 stops naming --llamacpp-draft;
    given a plain EAGLE-3 head there, llama.cpp exports and runs that one while the torch methods keep --draft."""
    import argparse
    import dataclasses

    from eaglehead.draftheads.checkpoint import load_head, save_pretrained
    from eaglehead.draftheads.eagle3 import Eagle3Head
    from eaglehead.eval.llamacpp_engine import LlamaCppEngines
    from eaglehead.eval.plan import add_eval_arguments, plan_from_args

    plain = load_head(HEAD)
    head31 = Eagle3Head(dataclasses.replace(plain.config, fc_norm=True, norm_output=True))
    head31.load_state_dict(plain.state_dict(), strict=False)  # the fc_norm weights stay at their ones
    save_pretrained(head31, tmp_path / "eagle31")
    methods = ["vanilla", "eagle3", "llamacpp", "llamacpp-eagle3"]
    plan = _plan(first_turns, tmp_path / "a", methods=methods, drafts={"eagle3": str(tmp_path / "eagle31")})
    with pytest.raises(ValueError, match=r"--draft .*eagle31': cannot run in llama.cpp \(fc_norm: .*give "
                                         r"llamacpp-eagle3 a plain EAGLE-3 head of this target with --llamacpp-draft"):
        LlamaCppEngines.for_plan(plan, None, set(), n_ctx=64)
    plan = _plan(first_turns, tmp_path / "b", methods=methods,
                 drafts={"eagle3": str(tmp_path / "eagle31"), "llamacpp-eagle3": HEAD})
    engines = LlamaCppEngines.for_plan(plan, None, set(), n_ctx=64)
    assert engines.description["head_checkpoint"] == HEAD and engines.head_path.is_file()
    assert plan.drafts["eagle3"] == str(tmp_path / "eagle31")
    # the option reaches the plan from the command line
    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    args = parser.parse_args(["--target", plan.target, "--prompts", str(first_turns), "--draft", HEAD,
                              "--llamacpp-draft", HEAD, "--methods", "vanilla,llamacpp-eagle3", "--out",
                              str(tmp_path / "c"), "--device", "cpu", "--tune-fraction", "0"])
    assert plan_from_args(args).drafts == {"eagle3": HEAD, "llamacpp-eagle3": HEAD}


def test_llamacpp_dflash_exports_the_dflash_drafter_and_drafts_with_it(first_turns, tmp_path):
    """``llamacpp-dflash``: ``--dflash`` exported into OUT/llamacpp and run by llama.cpp's draft-dflash (exact
    greedy output, rounds that drafted); a draft length past the block and a drafter that is not DFlash are
    refused by option name. The parity with our loop is tests/builtin/test_llamacpp_dflash.py's."""
    import torch

    from eaglehead.decode import SamplingConfig
    from eaglehead.eval.llamacpp_engine import LlamaCppEngines
    from tests.builtin.llamacpp_support import smollm2_prompts

    methods = ["vanilla", "llamacpp", "llamacpp-dflash"]
    plan = _plan(first_turns, tmp_path / "a", methods=methods, drafts={"dflash": DFLASH}, gammas=(15,),
                 llamacpp_dtype="float32", llamacpp_head_dtype="float32")
    engines = LlamaCppEngines.for_plan(plan, None, set(), n_ctx=256)
    try:
        assert engines.dflash_path == tmp_path / "a" / "llamacpp" / "dflash-float32.gguf"
        assert engines.dflash_path.is_file() and engines.head_path is None
        assert engines.description["dflash_checkpoint"] == DFLASH and engines.description["dflash_dtype"] == "float32"
        ids = torch.tensor([smollm2_prompts()[0]])
        greedy = dict(sampling=SamplingConfig(temperature=0), max_new=16, seed=0)
        plain = engines.generate("llamacpp", 0, ids, torch.ones_like(ids), **greedy)
        dflash = engines.generate("llamacpp-dflash", 15, ids, torch.ones_like(ids), **greedy)
        assert dflash.tokens == plain.tokens and dflash.engine_stats["n_max"] == 15
        assert dflash.engine_stats["draft_rounds"] > 0 and dflash.engine_stats["drafted"] > 0
    finally:
        engines.close()
    too_long = _plan(first_turns, tmp_path / "b", methods=methods, drafts={"dflash": DFLASH}, gammas=(16,))
    with pytest.raises(ValueError, match=r"--gamma \[16\]: the --dflash drafter \(block size 16\) drafts at most 15"):
        LlamaCppEngines.for_plan(too_long, None, set(), n_ctx=64)
    eagle = _plan(first_turns, tmp_path / "c", methods=methods, drafts={"dflash": HEAD}, gammas=(3,))
    with pytest.raises(ValueError, match=r"--dflash .*: a Eagle3Head, not a DFlash drafter"):
        LlamaCppEngines.for_plan(eagle, None, set(), n_ctx=64)
