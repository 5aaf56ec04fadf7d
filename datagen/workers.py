"""A stage's missing shards sampled by several CPU processes at once (``workers: N``, engine torch).

On a small target the in-process sampler does not scale with threads: its batch is a few hundred kilobytes of
activations, and between the matrix products the Python loop runs on one core. ``N`` processes of ``threads /
N`` threads, each pinned to its own cores, keep every core busy (BENCHMARKS.md, "Chat data with worker
processes": on a 2-core AMD EPYC, two one-thread processes wrote ~1.3x the tokens per second of one two-thread
process while both were busy).

Each shard has its own seed and is written atomically, so which process writes it does not change its draws
and a run killed here resumes like any other. The parent keeps the work queue and the progress bar; a worker
that fails stops the others and names itself and its exit code.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import chat_data as cd


@dataclass
class ShardJob:
    """One shard to write: its file, and its prompts in the order of the stage's length sort."""
    path: Path
    indices: list[int]
    prompts: list[list[int]]
    labels: list[str]
    seed: int


def cpu_groups(workers: int, cpus: list[int] | None = None) -> list[list[int] | None]:
    """The cores each worker is pinned to: this process's cores cut into ``workers`` contiguous groups (sizes
    differing by at most one); ``None`` for every worker when there are fewer cores than workers."""
    if cpus is None:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < workers:
        return [None] * workers
    size, extra = divmod(len(cpus), workers)
    groups, start = [], 0
    for w in range(workers):
        end = start + size + (w < extra)
        groups.append(cpus[start:end])
        start = end
    return groups


def _worker(cfg, queue, cpus: list[int] | None, threads: int, sample_kwargs: dict) -> None:
    import torch

    from .pipeline import shard_writer

    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)
    write = shard_writer(cfg)
    while (job := queue.get()) is not None:
        write(job, sample_kwargs)


def sample_in_workers(cfg, jobs: list[ShardJob], *, progress, poll_s: float = 0.5, **sample_kwargs) -> None:
    """Write every job's shard with ``cfg.workers`` processes; ``progress.step(tokens)`` as each shard appears."""
    n = min(cfg.workers, len(jobs))
    groups = cpu_groups(n)
    ctx = mp.get_context("spawn")  # a fresh interpreter: no fork of torch's thread pools
    queue = ctx.Queue()
    for job in reversed(jobs):  # the stage sorts prompts by length: the longest shards first, so no worker is left
        queue.put(job)          # with a long shard while the others idle
    for _ in range(n):
        queue.put(None)
    procs = []
    for w, cpus in enumerate(groups):
        threads = cfg.threads or max(1, len(cpus or []) or (os.cpu_count() or n) // n)
        procs.append(ctx.Process(target=_worker, args=(cfg, queue, cpus, threads, sample_kwargs),
                                 name=f"datagen worker {w + 1}/{n}", daemon=True))
    pending = {job.path for job in jobs}
    try:
        for p in procs:
            p.start()
        while pending:
            for path in sorted(pending):
                if path.is_file():
                    pending.discard(path)
                    progress.step(sum(len(r["ids"]) for r in cd.read_shard(path)))
            failed = [p for p in procs if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"{failed[0].name} exited with code {failed[0].exitcode} (its error is printed "
                                   f"above); {len(pending)} shard(s) not written, the finished ones are kept: "
                                   "rerun to resume")
            if pending and all(p.exitcode == 0 for p in procs) and not any(p.is_file() for p in pending):
                raise RuntimeError(f"the workers finished but {len(pending)} shard(s) are missing, e.g. "
                                   f"{sorted(pending)[0]}")
            time.sleep(poll_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join()
        queue.close()
