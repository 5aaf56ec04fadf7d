import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

import torch  # noqa: E402

# The tests' models are tiny: per-op threading overhead dominates and two threads only contend
# with each other (and with anything else on a 2-core machine).
torch.set_num_threads(1)
