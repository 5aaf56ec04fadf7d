"""``eaglehead eval --report-to wandb``: the report's tables and figures logged to one wandb run.

Usage (``WANDB_MODE=offline`` writes the run under ``OUT/wandb/`` without a network)::

    files = write_report(out, report)
    log_report(report, files, project="eaglehead", out_dir=out)

Logged: the plan as the run's config; ``runs`` (every run record's scalar fields), ``summary`` (the
test split per serving state, as printed at the end of ``eaglehead eval``) and ``gamma_selection`` as
tables; every PNG as an image; each test-split headline speedup in the run summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .figures import headline_runs, method_label, state_label


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def log_report(report: dict[str, Any], files: dict[str, Path], *, project: str, out_dir: str | Path) -> str:
    """Log ``report`` and its ``files`` to a new wandb run; returns the run's directory."""
    import wandb

    run = wandb.init(project=project, job_type="eval", dir=str(out_dir), config=report.get("config") or {},
                     name=f"eval-{(report.get('config') or {}).get('prompt_set', 'report')}")
    try:
        runs = report["runs"]
        keys = dict.fromkeys(k for r in runs for k in r)  # tree and engine runs carry keys others lack
        cols = [k for k in keys if all(_scalar(r.get(k)) for r in runs)]
        payload = {"runs": wandb.Table(columns=cols, data=[[r.get(k) for k in cols] for r in runs])}
        summary_cols = ["state", "method", "tau", "ms_per_token", "ms_min", "ms_max", "baseline", "speedup",
                        "speedup_min", "speedup_max", "speedup_vs_vanilla"]
        rows = []
        for key, state_runs in headline_runs(runs).items():
            for r in state_runs:
                ms = [None if r.get(k) is None else 1e3 * r[k]
                      for k in ("time_per_token_s", "time_per_token_min_s", "time_per_token_max_s")]
                rows.append([state_label(key), method_label(r), r.get("tau"), *ms, r.get("baseline_method"),
                             r.get("speedup"), r.get("speedup_min"), r.get("speedup_max"), r.get("speedup_vs_vanilla")])
                if r.get("speedup") is not None:
                    run.summary[f"speedup/{state_label(key)}/{method_label(r)}"] = r["speedup"]
        payload["summary"] = wandb.Table(columns=summary_cols, data=rows)
        sel = report.get("gamma_selection") or []
        if sel:
            sel_cols = [k for k in sel[0] if all(_scalar(s.get(k)) for s in sel)]
            payload["gamma_selection"] = wandb.Table(columns=sel_cols, data=[[s.get(k) for k in sel_cols] for s in sel])
        for name, path in files.items():
            if name.endswith(".png"):
                payload[f"figures/{name[:-4]}"] = wandb.Image(str(path))
        run.log(payload)
        return str(run.dir)
    finally:
        run.finish()
        wandb.teardown()  # drop the process-wide wandb state (its dir), so a later run in this process starts clean
