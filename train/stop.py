"""A run stopped by a signal stops at a step boundary with a checkpoint there, instead of losing its steps.

SIGTERM (a scheduler's kill, a session that ends, ``kill PID``) and SIGINT (Ctrl-C) set a flag; the training loop
reads it after each optimizer step, every process of a launched run agrees on it (one all-reduce of a scalar:
``accelerate launch`` and torchrun forward the signal to every rank, but not at the same instant), and the run
writes a resumable checkpoint at that step and ends cleanly. Relaunching the same command resumes there
(``resume: auto``) on the trajectory an uninterrupted run would have taken (the data of step s is a function of s;
the RNG, optimizer and schedule states are in the checkpoint). A second Ctrl-C interrupts at once (the last
periodic checkpoint stays intact: checkpoints are renamed into place).
"""

from __future__ import annotations

import signal
import sys
import threading

import torch

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """Context manager: installs the handlers (main thread only; elsewhere it asks nothing) and restores the
    previous ones on exit. ``signum`` is the first signal received, or None."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt("a second Ctrl-C: stopping at once")
        if self.signum is None:
            self.signum = signum
            print(f"\n{signal.Signals(signum).name}: training stops after this step with a checkpoint "
                  "(Ctrl-C again stops at once)", file=sys.stderr, flush=True)

    def agreed(self, accelerator) -> int | None:
        """The signal any process received (the highest number when they differ), or None: collective when
        the run has several processes, so every rank stops after the same step."""
        flag = int(self.signum or 0)
        if accelerator.num_processes > 1:
            flag = int(accelerator.reduce(torch.tensor(flag, device=accelerator.device), reduction="max"))
        return flag or None


def exit_code(summary: dict) -> int:
    """The exit status of a training run from its summary: 0, or for a run a signal stopped (its checkpoint written,
    resumable) the shell's convention, 128 + the signal's number (143 for SIGTERM, 130 for SIGINT)."""
    return 128 + int(summary["signal"]) if "signal" in summary else 0
