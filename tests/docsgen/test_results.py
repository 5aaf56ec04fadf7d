"""The results pages are generated from the checked-in report summaries, never copied by hand.

The checked-in ``docs/results.md`` and the README's result blocks must equal what ``python -m eaglehead.docs``
writes from ``docs/reports/*/report.json``; a changed report must make them stale; the summaries must be well
formed (a bad one is an error naming its file and key).
"""

import json
import shutil
from pathlib import Path

import pytest

from eaglehead.docs import generated_files, stale_files
from eaglehead.docsgen.results import headline_run, headline_table, load_reports, readme_blocks, replace_blocks, summarize

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "regenerate with: python -m eaglehead.docs (from the repository root), then commit the result"


def test_checked_in_pages_equal_what_the_command_writes():
    stale = [str(p.relative_to(ROOT)) for p in stale_files(ROOT)]
    assert stale == [], f"generated pages differ from the code and reports: {stale}; {REGENERATE}"


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of what the generator reads: README.md and docs/ (reports included)."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_a_changed_report_makes_the_results_and_the_readme_stale(checkout):
    path = checkout / "docs" / "reports" / "mtbench-e31-fp32" / "report.json"
    report = json.loads(path.read_text())
    eagle3 = next(r for r in report["runs"] if r["method"] == "eagle3")
    eagle3["speedup"] = 9.99
    path.write_text(json.dumps(report, indent=2) + "\n")
    stale = {p.relative_to(checkout).as_posix() for p in stale_files(checkout)}
    assert stale == {"docs/results.md", "README.md"}
    pages = generated_files(checkout)
    assert "**9.99x**" in pages[checkout / "README.md"] and "9.99x" in pages[checkout / "docs" / "results.md"]


def test_every_figure_of_the_readme_headline_comes_from_a_report():
    reports = load_reports(ROOT / "docs" / "reports")
    table = headline_table(reports, "docs/results.md#")
    readme = (ROOT / "README.md").read_text()
    assert table in readme
    headline_runs = [(name, r) for name, rep in reports if rep["summary"].get("readme") == "headline"
                     for r in rep["runs"] if headline_run(rep, r)]
    assert len(table.splitlines()) == 2 + len(headline_runs) >= 2 + 3  # a row per head run, torch/llama.cpp/vLLM
    engines = {r["engine"] for _, r in headline_runs}
    assert engines == {"torch", "llama.cpp", "vllm"}
    for name, run in headline_runs:
        speedup = run["speedup"] if run["engine"] == "torch" else run["speedup_vs_engine"]
        assert f"**{speedup:.2f}x**" in table and f"[{name}](docs/results.md#{name})" in table


def test_headline_engines_keeps_only_those_engines_rows(checkout):
    reports = dict(load_reports(checkout / "docs" / "reports"))
    report = reports["mtbench-vllm-bf16"]
    assert {r["engine"] for r in report["runs"] if "eagle" in r["method"]} == {"torch", "vllm"}
    assert report["summary"]["headline_engines"] == ["vllm"]
    table = headline_table([("mtbench-vllm-bf16", report)], "#")
    assert len(table.splitlines()) == 3 and table.splitlines()[2].startswith("| vllm | bfloat16 |")
    del report["summary"]["headline_engines"]
    rows = headline_table([("mtbench-vllm-bf16", report)], "#").splitlines()[2:]
    assert sorted(r.split(" | ")[0] for r in rows) == ["| torch", "| vllm"]


def test_each_summary_states_its_command_date_commit_cpu_and_source():
    reports = load_reports(ROOT / "docs" / "reports")
    assert {name for name, _ in reports} >= {"mtbench-e31-fp32", "mtbench-e31-bf16", "mtbench-engines-fp32-sub2",
                                             "demo-stdlib-cold"}
    page = (ROOT / "docs" / "results.md").read_text()
    for name, report in reports:
        s = report["summary"]
        assert s["command"].split()[0] in ("eaglehead", "rm", "python", "make"), name
        assert s["commit"] in page and s["date"] in page and s["source"] in page, name
        assert "cpu_flags" in report["hardware"] and report["hardware"]["cpu_count"] >= 1, name
        # summaries stay small: only the summary rows of each serving state
        assert all(r["category"] == "all" and r["turn"] == "all" for r in report["runs"]), name


def test_a_bad_summary_is_an_error_naming_its_file_and_key(tmp_path):
    run = tmp_path / "reports" / "bad-run"
    run.mkdir(parents=True)
    good = json.loads((ROOT / "docs" / "reports" / "mtbench-e31-bf16" / "report.json").read_text())
    good["summary"]["commit"] = "bde5af1"
    (run / "report.json").write_text(json.dumps(good))
    with pytest.raises(ValueError, match=r"bad-run/report.json: summary.commit: expected 40 hex digits"):
        load_reports(tmp_path / "reports")
    del good["summary"]["command"]
    (run / "report.json").write_text(json.dumps(good))
    with pytest.raises(ValueError, match=r"bad-run/report.json: summary: missing command"):
        load_reports(tmp_path / "reports")
    good["summary"].update(command="eaglehead eval", commit="b" * 40, headline_engines=["vLLM"])
    (run / "report.json").write_text(json.dumps(good))
    with pytest.raises(ValueError, match=r"bad-run/report.json: summary.headline_engines: expected a list of torch"):
        load_reports(tmp_path / "reports")


def test_a_readme_without_its_generated_block_is_refused():
    reports = load_reports(ROOT / "docs" / "reports")
    with pytest.raises(ValueError, match="README.md: no generated block '<!-- results:headline"):
        replace_blocks("# no blocks here\n", readme_blocks(reports), "README.md")


def test_summarize_keeps_the_summary_rows_and_the_provenance():
    runs = [{"method": "vanilla", "engine": "torch", "prompt_set": "p", "split": "test", "category": c, "turn": t,
             "temperature": 0.0, "batch_size": 1, "gamma": 0, "tau": 1.0, "time_per_token_s": 0.01,
             "survival": [0.5], "itl_p50_s": 0.01}
            for c, t in (("all", "all"), ("math", "all"), ("all", 1))]
    report = {"config": {"target": "t", "dtype": "float32", "out": "runs/x"}, "hardware": {"cpu_flags": ["avx2"],
              "platform": "Linux"}, "versions": {"torch": "2.13.0"}, "runs": runs}
    summary = {"title": "T", "command": "eaglehead eval ...", "date": "d", "commit": "0" * 40, "source": "s",
               "prompts": "p"}
    out = summarize(report, summary)
    assert out["runs"] == [{k: runs[0][k] for k in runs[0] if k not in ("survival", "itl_p50_s")}]
    assert out["config"] == {"target": "t", "dtype": "float32"} and out["hardware"] == {"cpu_flags": ["avx2"]}
    assert out["summary"] is summary
