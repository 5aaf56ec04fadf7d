import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

import torch  # noqa: E402

# The tests' models are tiny: per-op threading overhead dominates and two threads only contend
# with each other (and with anything else on a 2-core machine).
torch.set_num_threads(1)
# The engine children (vLLM preloads Intel's OpenMP) inherit this: an OpenMP thread that finished its share spins
# for 200 ms by default before it sleeps, which on 2 cores shared with the other test worker steals the core that
# worker runs on. Tests time nothing; benchmarks (eaglehead eval) keep the engines' defaults.
os.environ.setdefault("KMP_BLOCKTIME", "0")

# Modules that take minutes, started first so that the two test workers (``make test``: pytest-xdist, one module
# per worker at a time) do not end on one of them while the other idles. Measured 2026-12-07 (BENCHMARKS.md).
HEAVY_FIRST = ("tests/engines/test_vllm.py", "tests/eval/test_vllm_eval.py", "tests/train/test_recipe.py",
               "tests/demos/test_stdlib.py", "tests/datagen/test_engine_vllm.py", "tests/eval/test_llamacpp_eval.py",
               "tests/builtin/test_llamacpp_dflash.py", "tests/demos/test_smollm2.py", "tests/engines/test_llamacpp.py",
               "tests/test_installed_package.py")


def pytest_collection_modifyitems(session, config, items):
    """The heavy modules first, in ``HEAVY_FIRST`` order; every other test keeps its place (a stable sort)."""
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collection_finish(session):
    """The vLLM proof's offline run (tests/engines/test_vllm.py, ~3 min of start-ups on 2 cores) starts as soon as
    the session knows it will run, in its own process beside the tests before it: they run torch on one thread
    (above), so the second core would otherwise idle. Its tests read the result when they come.

    Under pytest-xdist (``make test`` runs two workers, one a core) every worker collects every test and the
    module is scheduled on one of them only later: the run then starts where the module's fixture first asks
    for it (the other worker keeps the other core busy meanwhile)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any(item.nodeid.startswith("tests/engines/test_vllm.py::") for item in session.items):
        from tests.engines.test_vllm import start_proof

        start_proof()


def pytest_sessionfinish(session, exitstatus):
    import sys

    module = sys.modules.get("tests.engines.test_vllm")
    if module is not None:
        module.stop_proof()
