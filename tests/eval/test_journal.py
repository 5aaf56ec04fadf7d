"""A killed ``eaglehead eval`` resumes with ``--resume``: finished batch groups are replayed exactly,
the rest measured, and a changed plan or checkpoint is refused by name."""

import json
import shutil

import pytest

import eaglehead.eval.schedule as schedule
from eaglehead.eval.journal import result_from_dict, result_to_dict
from eaglehead.eval.runner import run_eval
from tests.eval.test_runner import _args, workspace  # noqa: F401  (the shared tiny target, draft LM, prompts)

COUNTS = ("acceptance_rate", "accepted_mean", "committed_tokens", "conditional", "eos_rows", "gamma",
          "identical_to_vanilla", "mismatched_prompts", "output_len_mean", "output_tokens", "requests", "rounds",
          "row_rounds", "survival", "tau", "tau_committed", "truncated_row_rounds", "method", "category", "turn",
          "temperature", "batch_size")


class Killed(Exception):
    pass


def _counting(monkeypatch, kill_after=None):
    """Count run_call's calls; raise ``Killed`` on call number ``kill_after`` + 1 (a kill mid-run)."""
    calls, real = [], schedule.run_call

    def call(*a, **k):
        if kill_after is not None and len(calls) >= kill_after:
            raise Killed
        calls.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(schedule, "run_call", call)
    return calls


def _counts(report):
    return [{k: r[k] for k in COUNTS} for r in report["runs"]]


def _plan(ws, out, *extra):
    return _args(ws, out, "--methods", "vanilla,draft-lm,prompt-lookup", "--draft-lm", str(ws["root"] / "draft"),
                 "--gamma", "3", "--temperature", "0", "1", "--batch-sizes", "1,2", *extra)


def test_a_killed_run_resumes_where_it_stopped_with_the_same_outputs(workspace, tmp_path, monkeypatch):  # noqa: F811
    straight = run_eval(_plan(workspace, tmp_path / "straight"))
    killed = tmp_path / "killed"
    first = _counting(monkeypatch, kill_after=25)
    with pytest.raises(Killed):
        run_eval(_plan(workspace, killed))
    journaled = [json.loads(line) for line in (killed / "calls.jsonl").read_text().splitlines()]
    assert journaled and all(len(g["calls"]) == 3 for g in journaled)  # whole groups only
    with pytest.raises(ValueError, match="--overwrite.*--resume"):
        _plan(workspace, killed)  # the hint names --resume when a journal is there
    monkeypatch.undo()
    second = _counting(monkeypatch)
    resumed = run_eval(_plan(workspace, killed, "--resume"))
    # The resumed launch measures only what the journal lacks (plus one warm-up per method and state).
    launches, total = resumed["config"]["launches"], straight["config"]["launches"][0]["calls_measured"]
    assert len(launches) == 2 and launches[0]["calls_replayed"] == 0
    assert launches[1]["calls_replayed"] == launches[0]["calls_measured"] == 3 * len(journaled)
    assert launches[0]["calls_measured"] + launches[1]["calls_measured"] == total
    warmups = len(second) - launches[1]["calls_measured"]
    assert warmups % 3 == 0 and 3 <= warmups <= 3 * 4 and len(first) == 25
    assert _counts(resumed) == _counts(straight)  # same tokens, rounds and acceptance as an uninterrupted run
    assert resumed["identity"]["all_identical"] is True and resumed["consistency_violations"] == []
    assert any("resumed" in n for n in resumed["notes"])


def test_resuming_a_finished_run_replays_it_exactly_without_a_single_call(workspace, tmp_path, monkeypatch):  # noqa: F811
    out = tmp_path / "done"
    plan = ("--methods", "vanilla,prompt-lookup", "--gamma", "auto:1..3", "--max-new-tokens", "6", "--repeats", "2")
    report = run_eval(_args(workspace, out, *plan))
    calls = _counting(monkeypatch)
    again = run_eval(_args(workspace, out, *plan, "--resume"))
    assert calls == []  # no warm-up either: nothing left to measure
    for key in ("runs", "sweeps", "gamma_selection", "itl_samples", "identity"):
        assert again[key] == report[key], key  # timings included: the journal round-trips exactly
    assert again["config"]["launches"][1] == {**again["config"]["launches"][1], "calls_measured": 0}
    assert not any("resumed" in n for n in again["notes"])  # a replay measured nothing: one launch measured all


def test_a_cut_last_line_is_measured_again(workspace, tmp_path, monkeypatch):  # noqa: F811
    out = tmp_path / "cut"
    run_eval(_args(workspace, out, "--methods", "vanilla,prompt-lookup", "--gamma", "2"))
    lines = (out / "calls.jsonl").read_text().splitlines()
    (out / "calls.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    calls = _counting(monkeypatch)
    again = run_eval(_args(workspace, out, "--methods", "vanilla,prompt-lookup", "--gamma", "2", "--resume"))
    assert len(calls) == 2 + 2  # two warm-ups, then the cut group's two calls
    assert again["config"]["launches"][1]["calls_measured"] == 2
    damaged = out / "calls.jsonl"
    damaged.write_text("not json\n" + damaged.read_text())
    with pytest.raises(ValueError, match="calls.jsonl line 1 is not JSON"):
        run_eval(_args(workspace, out, "--methods", "vanilla,prompt-lookup", "--gamma", "2", "--resume"))


def test_resume_refuses_a_different_plan_or_checkpoint(workspace, tmp_path):  # noqa: F811
    draft = tmp_path / "draft"
    shutil.copytree(workspace["root"] / "draft", draft)
    base = ("--methods", "vanilla,draft-lm", "--draft-lm", str(draft), "--gamma", "2")
    out = tmp_path / "r"
    run_eval(_args(workspace, out, *base))
    with pytest.raises(ValueError, match="--resume: .*different plan.*max_new_tokens: 8 then, 4 now"):
        run_eval(_args(workspace, out, *base, "--resume", "--max-new-tokens", "4"))
    (draft / "config.json").write_text((draft / "config.json").read_text() + "\n")
    with pytest.raises(ValueError, match="--resume: .*different plan.*drafts.draft-lm"):
        run_eval(_args(workspace, out, *base, "--resume"))
    with pytest.raises(ValueError, match="--resume: .*holds no journal"):
        run_eval(_args(workspace, tmp_path / "empty", *base, "--resume"))
    with pytest.raises(ValueError, match="--resume and --overwrite"):
        run_eval(_args(workspace, out, *base, "--resume", "--overwrite"))


def test_results_round_trip_exactly():
    from eaglehead.decode.generate import GenerationResult, RoundRecord

    res = GenerationResult(tokens=[[1, 2], [3]], rounds=[RoundRecord(2, [1, 0], [2, 1], [True, True], 0.1 / 3, 1e-9,
                                                                     2.5)],
                           token_times=[[0.1 + 0.2, 1 / 7], [3.0]], t_start=0.0, t_end=12345.678901234567,
                           prompt_lengths=[4, 4], t_prefill=0.3, finished_by_eos=[True, False], prefill_tokens=1)
    assert result_from_dict(json.loads(json.dumps(result_to_dict(res)))) == res
