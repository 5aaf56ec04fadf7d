"""The documentation site builds strictly: ``mkdocs build --strict`` (the pinned mkdocs of the test extra) with
mkdocs.yml's validation, so a broken link, a missing anchor or a page left out of the nav fails the default
test run. The same build must fail on a copy of the docs with each of those faults, so the check can catch them.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(root / "mkdocs.yml"), "--site-dir", str(site)],
                          capture_output=True, text=True, cwd=root, timeout=120)


def test_the_docs_build_strictly(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, f"mkdocs build --strict failed (fix the page it names):\n{done.stderr}"
    for page in ("index.html", "train/index.html", "serve/index.html", "evaluate/index.html",
                 "exactness/index.html", "cpu/index.html", "targets/index.html", "results/index.html",
                 "reference/cli/index.html", "reference/config/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    assert (tmp_path / "site" / "reports" / "mtbench-e31-fp32" / "report.json").is_file()


FAULTS = {
    "a link to a missing page": ("cpu.md", "[gone](no-such-page.md)\n", "no-such-page.md"),
    "a link to a missing anchor": ("cpu.md", "[gone](train.md#no-such-section)\n", "#no-such-section"),
    "a page left out of the nav": ("orphan.md", "# Orphan\n", "orphan.md"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_the_strict_build_fails_on_each_fault(tmp_path, fault):
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", copy / "docs")
    page, text, named = FAULTS[fault]
    with open(copy / "docs" / page, "a") as f:
        f.write("\n" + text)
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0 and named in done.stderr, done.stderr
