"""Write the generated documentation, or check that the checked-in copies are current.

    python -m eaglehead.docs            # docs/results.md, README.md's result blocks, docs/reference/*.md
    python -m eaglehead.docs --check    # writes nothing; exit 1 naming each file that differs
    python -m eaglehead.docs summarize runs/NAME/report.json --out docs/reports/NAME \\
        --title "..." --prompts "..." --command "eaglehead eval ..." --commit HEAD

Run from the repository root (or pass ``--root``). The results come from ``docs/reports/*/report.json``
(summaries of ``eaglehead eval`` reports: :mod:`eaglehead.docsgen.results`); the references from the
``eaglehead`` parser and the typed config dataclasses (:mod:`eaglehead.docsgen.reference`). This module sits in
the top package because the command-line reference needs :func:`eaglehead.cli.build_parser`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from eaglehead.builtin.jsonio import read_json
from eaglehead.cli import build_parser
from eaglehead.docsgen.reference import cli_reference, config_reference, config_sections
from eaglehead.docsgen.results import dump_summary, load_reports, readme_blocks, replace_blocks, results_page, \
    summarize

# Defaults the parser computes from the machine it runs on, shown as the rule instead of this machine's value.
ENV_DEFAULTS = {(command, "device"): "`cuda` when a GPU is visible, else `cpu`" for command in ("generate", "eval")}


def generated_files(root: Path) -> dict[Path, str]:
    """``{path: the text the command writes there}`` for a repository checkout at ``root``."""
    for need in ("README.md", "docs/reports"):
        if not (root / need).exists():
            raise ValueError(f"--root {root}: no {need} there; run from the eaglehead repository root")
    reports = load_reports(root / "docs" / "reports")
    readme = root / "README.md"
    return {
        root / "docs" / "results.md": results_page(reports),
        readme: replace_blocks(readme.read_text(), readme_blocks(reports), str(readme)),
        root / "docs" / "reference" / "cli.md": cli_reference(build_parser(), ENV_DEFAULTS),
        root / "docs" / "reference" / "config.md": config_reference(config_sections()),
    }


def stale_files(root: Path) -> list[Path]:
    """The generated files whose checked-in text differs from what the command writes now."""
    return [path for path, text in generated_files(root).items()
            if not path.is_file() or path.read_text() != text]


def _summarize(args) -> int:
    commit = args.commit
    if commit == "HEAD":
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=args.root).stdout.strip()
    report = read_json(args.report, expect=dict)
    launches = report.get("config", {}).get("launches") or [{}]
    summary = {"title": args.title, "command": args.command, "date": args.date or launches[0].get("utc", "?"),
               "commit": commit, "source": f"summarised from {args.report} by `python -m eaglehead.docs summarize`",
               "prompts": args.prompts}
    out = Path(args.out) / "report.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump_summary(summarize(report, summary)))
    print(f"wrote {out}; now run python -m eaglehead.docs")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eaglehead.docs", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository checkout (default: here)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    sub = parser.add_subparsers(dest="action")
    s = sub.add_parser("summarize", help="a docs/reports summary from an eaglehead eval report.json")
    s.add_argument("report", help="the run's report.json")
    s.add_argument("--out", required=True, help="docs/reports/NAME: the summary's folder")
    for opt, text in (("--title", "one line: what the run measured"), ("--prompts", "the prompt set, in words"),
                      ("--command", "the eaglehead eval command that made the report")):
        s.add_argument(opt, required=True, help=text)
    s.add_argument("--commit", default="HEAD", help="40 hex digits of the code that ran (default: HEAD)")
    s.add_argument("--date", default=None, help="default: the report's first launch time")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.action == "summarize":
            return _summarize(args)
        if args.check:
            stale = stale_files(args.root)
            for path in stale:
                print(f"stale: {path} (regenerate with: python -m eaglehead.docs)", file=sys.stderr)
            return 1 if stale else 0
        for path, text in generated_files(args.root).items():
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text() != text:
                path.write_text(text)
                print(f"wrote {path}")
        return 0
    except ValueError as exc:
        print(f"python -m eaglehead.docs: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
