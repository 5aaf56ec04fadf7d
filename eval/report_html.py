"""``report.html``: the evaluation report as one self-contained page that opens from disk.

Tables and figures are inline (figures as ``data:image/png;base64`` URIs), with no scripts, styles
or links to anything outside the file. :func:`check_html` verifies exactly that with the standard
library's parser (the CI test uses it; no browser needed)::

    from eaglehead.eval.report_html import check_html
    problems = check_html(Path("runs/eval/report.html").read_text())   # [] when self-contained
"""

from __future__ import annotations

import base64
import html
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from .tables import IDENTITY_TITLE, PREAMBLE, TABLE_COLUMNS, compact_table, identity_items, report_tables, selection_text

FIGURE_ORDER = ("headline.png", "survival.png", "round_time.png", "gamma_sweep.png", "itl_cdf.png")
PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1280px; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
pre { background: #f7f7f7; padding: 0.5em; font-size: 11px; overflow-x: auto; }
.wide { overflow-x: auto; } .bad { color: #b00; } .ok { color: #070; }
"""


def img_tag(path: Path, alt: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _table(runs: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _ in TABLE_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(r))}</td>" for _, cell in TABLE_COLUMNS) + "</tr>"
                   for r in runs)
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def render_html(report: dict[str, Any], files: dict[str, Path]) -> str:
    """The page of a report (already JSON-clean) whose figures ``files`` has written."""
    e = html.escape
    cfg = report.get("config", {})
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>eaglehead eval: {e(str(cfg.get('prompt_set', '')))}</title>",
             f"<style>{PAGE_STYLE}</style></head><body>",
             f"<h1>eaglehead evaluation: {e(str(cfg.get('prompt_set', '')))}</h1>",
             f"<p>{e(PREAMBLE)}</p>", "<h2>Summary (test split)</h2>", f"<pre>{e(compact_table(report))}</pre>"]
    if "headline.png" in files:
        parts.append(img_tag(files["headline.png"], "time per token and speedup per method and serving state"))
    violations = report.get("consistency_violations") or []
    parts.append('<p class="ok">Consistency checks: all passed.</p>' if not violations else
                 '<p class="bad">Consistency violations:</p><ul>' + "".join(f"<li>{e(v)}</li>" for v in violations)
                 + "</ul>")
    if items := identity_items(report):
        parts.append(f"<h2>{e(IDENTITY_TITLE)}</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in items) + "</ul>")
    parts.append("<h2>Tables per serving state</h2>")
    for title, base, runs in report_tables(report["runs"]):
        parts += [f"<h3>{e(title)}</h3>", f"<p>Fastest baseline: {e(str(base))}.</p>", _table(runs)]
    if report.get("gamma_selection"):
        parts.append("<h2>Gamma choice (tune split)</h2><ul>")
        for s in report["gamma_selection"]:
            parts.append(f"<li>{e(selection_text(s))}</li>")
        parts.append("</ul>")
    parts.append("<h2>Figures</h2>")
    for name in FIGURE_ORDER[1:]:
        if name in files:
            parts += [f"<h3>{e(name)}</h3>", img_tag(files[name], name)]
    for key in ("config", "versions", "hardware"):
        if report.get(key):
            parts.append(f"<details><summary>{e(key)}</summary><pre>{e(json.dumps(report[key], indent=2))}</pre>"
                         "</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


class _Audit(HTMLParser):
    def __init__(self):
        super().__init__()
        self.problems: list[str] = []
        self.counts: dict[str, int] = {}

    def handle_starttag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag in ("script", "link", "iframe", "object", "embed"):
            self.problems.append(f"<{tag}> refers outside the page or runs code")
        for name, value in attrs:
            value = value or ""
            if name == "src" and not value.startswith("data:image/png;base64,"):
                self.problems.append(f"<{tag} src={value[:60]!r}> is not an inline PNG")
            if name == "href" and not value.startswith("#"):
                self.problems.append(f"<{tag} href={value[:60]!r}> leaves the page")
            if name == "style" and "url(" in value:
                self.problems.append(f"<{tag} style> loads a url()")


def check_html(text: str, *, figures: int = 1) -> list[str]:
    """Problems that stop the page from being self-contained and complete (``[]``: none): anything
    loaded from outside (scripts, links, non-inline images, ``url()``), fewer than ``figures`` inline
    images, or no table."""
    audit = _Audit()
    audit.feed(text)
    audit.close()
    problems = list(audit.problems)
    if "url(" in text.split("</style>")[0].split("<style>")[-1]:
        problems.append("the stylesheet loads a url()")
    if audit.counts.get("img", 0) < figures:
        problems.append(f"{audit.counts.get('img', 0)} inline figures, expected at least {figures}")
    if not audit.counts.get("table"):
        problems.append("no table")
    return problems
