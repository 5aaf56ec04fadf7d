import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

import torch  # noqa: E402

# The tests' models are tiny: per-op threading overhead dominates and two threads only contend
# with each other (and with anything else on a 2-core machine).
torch.set_num_threads(1)


def pytest_collection_finish(session):
    """The vLLM proof's offline run (tests/engines/test_vllm.py, ~3 min of start-ups on 2 cores) starts as soon as
    the session knows it will run, in its own process beside the tests before it: they run torch on one thread
    (above), so the second core would otherwise idle. Its tests read the result when they come."""
    if any(item.nodeid.startswith("tests/engines/test_vllm.py::") for item in session.items):
        from tests.engines.test_vllm import start_proof

        start_proof()


def pytest_sessionfinish(session, exitstatus):
    import sys

    module = sys.modules.get("tests.engines.test_vllm")
    if module is not None:
        module.stop_proof()
