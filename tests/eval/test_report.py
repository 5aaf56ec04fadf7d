"""Report files, plots and the consistency checker (one good report, then one corruption per rule)."""

import copy
import json

import pytest

from tests.eval.records import GenerationResult, RoundRecord

from eaglehead.eval.report_html import check_html
from eaglehead.eval.tables import compact_table
from eaglehead.eval.metrics import compute_metrics, itl_samples
from eaglehead.eval.report import (
    RUN_KEYS,
    check_report_consistency,
    collect_versions,
    fill_speedups,
    repeat_fields,
    run_record,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _result(gamma, accepted, t_round):
    """Batch-1 result: one round per entry of ``accepted``, each ``t_round`` s, tokens streamed at
    the round ends."""
    rounds, times, now = [], [], 0.0
    for a in accepted:
        rounds.append(RoundRecord(gamma, [a], [a + 1], [True], 0.2 * t_round, 0.7 * t_round,
                                  0.1 * t_round))
        now += t_round
        times += [now] * (a + 1)
    return GenerationResult([[5] * len(times)], rounds, [times], 0.0, now, [4])


def _report():
    state = dict(prompt_set="mt_bench", split="test", category="all", temperature=0.0,
                 batch_size=1)
    vanilla = _result(0, [0] * 12, 0.010)
    spec = _result(3, [3, 0, 2, 1, 3, 3], 0.014)
    runs = [
        run_record("vanilla", compute_metrics(vanilla), gamma=0, peak_mem_bytes=2**30, **state),
        run_record("eagle3", compute_metrics(spec), gamma=3, peak_mem_bytes=2**30 + 2**26,
                   checkpoint="heads/tiny", **state),
        run_record("eagle3", compute_metrics(spec), gamma=3, **dict(state, category="code")),
    ]
    fill_speedups(runs)
    sweeps = [{"method": "eagle3", "gamma": g, "tau": 1 + 0.5 * g, "time_per_token_s": 0.01 / g}
              for g in (1, 2, 3)]
    return {"config": {"gamma": 3}, "versions": collect_versions(), "hardware": {"cpu": "test"},
            "runs": runs, "sweeps": sweeps,
            "itl_samples": {"vanilla": itl_samples(vanilla), "eagle3": itl_samples(spec)}}


def test_run_record_fields_and_speedups():
    report = _report()
    van, spec, code = report["runs"]
    assert all(k in spec for k in RUN_KEYS) and spec["checkpoint"] == "heads/tiny"
    # Vanilla: 12 rounds x 10 ms for 12 tokens. Spec: 6 rounds x 14 ms for 4+1+3+2+4+4 = 18 tokens.
    assert van["time_per_token_s"] == pytest.approx(0.010)
    assert spec["time_per_token_s"] == pytest.approx(6 * 0.014 / 18)
    assert spec["speedup_vs_vanilla"] == pytest.approx(0.010 / (6 * 0.014 / 18))
    assert van["speedup_vs_vanilla"] == pytest.approx(1.0)
    assert code["speedup_vs_vanilla"] is None  # no vanilla run in the "code" serving state
    assert spec["tau"] == pytest.approx(1 + 12 / 6)
    with pytest.raises(ValueError, match="overwrite"):
        run_record("x", compute_metrics(_result(1, [1], 0.01)), prompt_set="p", split="s",
                   category="c", temperature=0.0, batch_size=1, gamma=1, tau=3.0)


def test_write_report_files(tmp_path):
    report = _report()
    files = write_report(tmp_path / "out", report)
    expected = {"report.json", "report.md", "report.html", "headline.png", "survival.png", "round_time.png",
                "gamma_sweep.png", "itl_cdf.png"}
    assert set(files) == expected
    for name in expected:
        assert (tmp_path / "out" / name).stat().st_size > 0
        if name.endswith(".png"):
            assert (tmp_path / "out" / name).read_bytes()[:8] == PNG_MAGIC
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {"config", "versions", "hardware", "runs", "sweeps", "itl_samples"} <= set(data)
    assert data["consistency_violations"] == []
    assert data["runs"][1]["survival"] == pytest.approx(report["runs"][1]["survival"])
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Figures: headline.png, survival.png, round_time.png, gamma_sweep.png, itl_cdf.png;" in md
    # The "code" state is the only category: its table would repeat category=all, so it is left out.
    assert md.count("| method | engine | gamma | tree | tau |") == 1
    assert "category=code" not in md and "| eagle3 | torch | 3 | - | 3.000 |" in md
    assert "All checks passed." in md
    assert check_html((tmp_path / "out" / "report.html").read_text(), figures=5) == []


def test_report_lists_only_the_figures_it_wrote(tmp_path):
    # A fixed-gamma run has no sweep: report.md must not point at a gamma_sweep.png that is not there.
    report = _report()
    del report["sweeps"], report["itl_samples"]
    files = write_report(tmp_path, report)
    assert not (tmp_path / "gamma_sweep.png").exists() and "gamma_sweep.png" not in files
    md = (tmp_path / "report.md").read_text()
    assert "Figures: headline.png, survival.png, round_time.png; all of it in report.html." in md


def test_write_report_rejects_missing_keys(tmp_path):
    report = _report()
    del report["hardware"]
    with pytest.raises(ValueError, match="'hardware'"):
        write_report(tmp_path, report)
    report = _report()
    del report["runs"][0]["tau"]
    with pytest.raises(ValueError, match=r"runs'\]\[0\] lacks keys \['tau'\]"):
        write_report(tmp_path, report)


def test_consistency_checker_passes_good_report():
    assert check_report_consistency(_report()) == []


def _corrupt(field, value, run=1):
    report = copy.deepcopy(_report())
    report["runs"][run][field] = value
    return report


@pytest.mark.parametrize(
    "report, message",
    [
        (_corrupt("tau", 3.5), "tau 3.5 != 1 + accepted_mean"),
        (_corrupt("tau_committed", 2.5), "nothing truncated but tau"),
        (_corrupt("survival", [0.8, 0.5, 0.6]), "survival [0.8, 0.5, 0.6] increases"),
        (_corrupt("conditional", [0.5, 1.0, 1.0]), "Pr(A>=1)"),
        (_corrupt("acceptance_rate", 0.9), "acceptance_rate 0.9 != sum(survival)/gamma"),
        (_corrupt("time_per_token_s", 0.001), "time_per_token_s 0.001 != round_time_total_s"),
        (_corrupt("speedup_vs_vanilla", 9.0), "speedup 9.0 != vanilla time/token"),
        (_corrupt("speedup_vs_vanilla", 2.0, run=2), "no vanilla run in its serving state"),
        (_corrupt("method", "vanilla", run=1), "more than one vanilla run"),
    ],
)
def test_consistency_checker_flags_each_rule(report, message):
    violations = check_report_consistency(report)
    assert any(message in v for v in violations), violations


def test_violations_are_written_to_markdown(tmp_path):
    write_report(tmp_path, _corrupt("tau", 3.5))
    assert "tau 3.5 != 1 + accepted_mean" in (tmp_path / "report.md").read_text()
    data = json.loads((tmp_path / "report.json").read_text())
    assert any("tau 3.5" in v for v in data["consistency_violations"])


def _state_runs(times: dict[str, list[float]]):
    """One serving state whose methods have the given per-repeat times per token (s)."""
    state = dict(prompt_set="p", split="test", category="all", temperature=0.0, batch_size=1)
    runs = []
    for method, tpts in times.items():
        gamma = 0 if method in ("vanilla", "hf-generate") else 3
        per_rep = [_result(gamma, [0] * 10 if not gamma else [3, 1] * 5, t * (10 if not gamma else 30) / 10)
                   for t in tpts]
        idx, spread = repeat_fields([compute_metrics(r).time_per_token_s for r in per_rep])
        runs.append(run_record(method, compute_metrics(per_rep[idx]), gamma=gamma, **state, **spread))
    fill_speedups(runs)
    return runs


def test_speedup_is_against_the_fastest_baseline_with_paired_spread():
    runs = _state_runs({"vanilla": [0.010, 0.011, 0.030], "hf-generate": [0.009, 0.012, 0.010],
                        "eagle3": [0.004, 0.005, 0.006]})
    van, hf, spec = runs
    assert van["time_per_token_s"] == pytest.approx(0.011) and hf["time_per_token_s"] == pytest.approx(0.010)
    assert spec["baseline_method"] == "hf-generate" and van["baseline_method"] == "hf-generate"
    assert spec["speedup"] == pytest.approx(0.010 / 0.005)
    assert spec["speedup_vs_vanilla"] == pytest.approx(0.011 / 0.005)
    # Paired per repeat: 0.009/0.004, 0.012/0.005, 0.010/0.006.
    assert spec["speedup_repeats"] == pytest.approx([2.25, 2.4, 10 / 6])
    assert (spec["speedup_min"], spec["speedup_max"]) == (pytest.approx(10 / 6), pytest.approx(2.4))
    assert spec["time_per_token_min_s"] == pytest.approx(0.004) and spec["time_per_token_max_s"] == pytest.approx(0.006)
    report = {"config": {}, "versions": {}, "hardware": {}, "runs": runs}
    assert check_report_consistency(report) == []
    table = compact_table(report)
    assert "fastest baseline, hf-generate" in table and "2.00 (1.67-2.40)" in table


def test_headline_uses_the_all_turns_records_of_a_two_turn_set():
    from eaglehead.eval.figures import headline_runs

    def rec(method, turn, t):
        return {"method": method, "turn": turn, "time_per_token_s": t, "split": "test", "category": "all",
                "prompt_set": "mt-bench", "temperature": 0.0, "batch_size": 1}

    runs = [rec("vanilla", "all", 0.010), rec("vanilla", 1, 0.008), rec("hf-generate", "all", 0.011),
            rec("hf-generate", 1, 0.007)]  # a faster turn-1 part must not stand for the whole run
    (state, chosen), = headline_runs(runs).items()
    assert state == ("mt-bench", 0.0, 1)
    assert [(r["method"], r["turn"], r["time_per_token_s"]) for r in chosen] == [("vanilla", "all", 0.010),
                                                                                ("hf-generate", "all", 0.011)]


@pytest.mark.parametrize("field, value, message", [
    ("baseline_method", "vanilla", "is not the fastest baseline"),
    ("speedup", 3.0, "speedup 3.0 != hf-generate time/token"),
    ("speedup_max", 9.0, "speedup min/max"),
    ("time_per_token_max_s", 1.0, "time_per_token min/max"),
    ("speedup_repeats", [1.0, 1.0, 1.0], "speedup_repeats"),
])
def test_consistency_covers_spread_and_baseline(field, value, message):
    runs = _state_runs({"vanilla": [0.010, 0.011, 0.030], "hf-generate": [0.009, 0.012, 0.010],
                        "eagle3": [0.004, 0.005, 0.006]})
    runs[2][field] = value
    violations = check_report_consistency({"config": {}, "versions": {}, "hardware": {}, "runs": runs})
    assert any(message in v for v in violations), violations


def test_html_check_flags_external_references():
    page = '<html><body><table></table><img src="data:image/png;base64,AAAA"></body></html>'
    assert check_html(page) == []
    for bad in ('<img src="plot.png">', '<script src="https://x/y.js"></script>', '<a href="https://x">x</a>',
                '<link rel="stylesheet" href="s.css">'):
        assert check_html(page.replace("<table></table>", "<table></table>" + bad)), bad
    assert check_html("<html><img src='data:image/png;base64,AA'></html>") == ["no table"]


def _identity_runs():
    base = dict(category="all", turn="all", batch_size=1, requests=160, engine="torch")
    return [dict(base, method="vanilla", gamma=None, identical_to_vanilla=True, mismatched_prompts=0),
            dict(base, method="eagle3", gamma=3, identical_to_vanilla=False, mismatched_prompts=2),
            dict(base, method="eagle3-tree", gamma=16, identical_to_vanilla=True, mismatched_prompts=0),
            dict(base, method="eagle3", gamma=3, category="code", identical_to_vanilla=False,
                 mismatched_prompts=1),
            dict(base, method="llamacpp-eagle3", gamma=3, engine="llama.cpp", identical_to_vanilla=False,
                 mismatched_prompts=1)]


@pytest.mark.parametrize("dtype, verdict", [("float32", "a bug"), ("bfloat16", "expected in bfloat16")])
def test_torch_identity_notes_count_the_prompts_and_say_what_a_mismatch_means(dtype, verdict):
    from eaglehead.eval.assembly import torch_identity_notes

    notes = torch_identity_notes(_identity_runs(), dtype)
    assert len(notes) == 1  # only the torch run of category all that differs
    assert notes[0].startswith("eagle3 (gamma 3, batch 1, torch): identical to torch vanilla on 158/160 prompts")
    assert verdict in notes[0]


def test_markdown_and_html_show_the_greedy_identity_and_the_notes(tmp_path):
    report = _report()
    report["identity"] = {"greedy_runs_checked": 2, "all_identical": False, "mismatched": [["eagle3", 3, 0.0, 1]],
                          "engines": {"llama.cpp": {"greedy_runs_checked": 1, "all_identical": True}}}
    report["notes"] = ["eagle3 (gamma 3, batch 1, torch): identical to torch vanilla on 7/8 prompts; expected"]
    write_report(tmp_path, report)
    md = (tmp_path / "report.md").read_text()
    section = md[md.index("## Greedy identity and notes"):md.index("## Consistency checks")]
    assert "token-identical to vanilla: False (not: eagle3 (gamma 3))" in section
    assert "llama.cpp: 1 greedy runs checked, token-identical to its own plain decoding: True" in section
    assert "on 7/8 prompts" in section
    assert "on 7/8 prompts" in (tmp_path / "report.html").read_text()


def test_the_headline_title_names_the_colour_of_each_engines_plain_bar(tmp_path, monkeypatch):
    from eaglehead.eval import figures

    titles = []
    monkeypatch.setattr(figures, "_suptitle", lambda fig, text, fontsize=10: titles.append(text))
    state = {"prompt_set": "p", "temperature": 0.0, "batch_size": 1, "category": "all", "turn": None}
    runs = [{**state, "method": "vanilla", "time_per_token_s": 0.07, "speedup": 1.0},
            {**state, "method": "vllm", "engine": "vllm", "time_per_token_s": 0.04, "speedup": 1.8},
            {**state, "method": "llamacpp", "engine": "llama.cpp", "time_per_token_s": 0.01, "speedup": 6.0},
            {**state, "method": "llamacpp-ngram", "engine": "llama.cpp", "gamma": 5, "tau": 3.5,
             "tau_committed": 1.5, "time_per_token_s": 0.012, "speedup": 5.8}]
    figures.plot_headline(runs, tmp_path / "a.png")
    assert "brown = plain llama.cpp" in titles[-1] and "green = plain vLLM" in titles[-1]
    assert "the figure in brackets every round" in titles[-1]  # what "(1.50 over all rounds)" means
    assert figures.METHOD_COLORS["vllm"] == "#2e7d32" and figures.METHOD_COLORS["llamacpp"] == "#6b4226"
    figures.plot_headline(runs[:1], tmp_path / "b.png")  # torch only: no engine named
    assert "plain" not in titles[-1] and "brackets" not in titles[-1]
