"""A serving engine as a child process on 127.0.0.1: a free port, a log file, a health wait, a stop that always runs.

    with ServerProcess([python, "-m", "some.server", "--port", str(port)], health_url=..., log=path) as proc:
        proc.wait_healthy(timeout_s=300)

The child cannot outlive this process: on Linux the kernel sends it SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``, set between fork and exec), and ``stop`` runs on exit, on an error in the ``with`` body and
on Ctrl-C (the child is in its own process group, so the terminal's SIGINT reaches only us and we stop it in
order). What the child forks (vLLM's engine core and worker) gets no such signal: when this process is killed
outright (SIGKILL, or SIGTERM, which skips ``atexit``), a watchdog in the child's process group, a small
interpreter that is our child too, sees its parent change and kills the whole group, so no engine core is left
holding cores and memory. Standard library only: a server is started from code that must not import torch.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

PR_SET_PDEATHSIG = 1
# The watchdog: argv[1] is the pid it guards; once its parent is not that pid any more, it kills its process group
# (the server's, itself included).
WATCHDOG = ("import os, signal, sys, time\n"
            "parent = int(sys.argv[1])\n"
            "while os.getppid() == parent:\n"
            "    time.sleep(0.5)\n"
            "os.killpg(os.getpgrp(), signal.SIGKILL)\n")


class EngineError(RuntimeError):
    """A serving engine failed: it would not start, died, or answered badly. The message holds its log tail."""


class EngineDied(EngineError):
    """The engine's process exited before it was stopped."""


class EngineTimeout(EngineError):
    """The engine did not become healthy in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the system picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL when the parent dies; a process group of its own (see module doc)."""
    os.setpgrp()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not glibc Linux: stop() on exit still covers every clean and Ctrl-C exit
        pass


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ServerProcess:
    """One child server process writing its output to ``log``; ``health_url`` answers 200 once it serves."""

    def __init__(self, argv: list[str], *, health_url: str, log: Path, env: dict[str, str] | None = None,
                 name: str = "server"):
        self.argv, self.health_url, self.log, self.name = argv, health_url, Path(log), name
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         env=env, preexec_fn=_die_with_parent)
        group = self.proc.pid
        try:
            self.watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid())],
                                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, preexec_fn=lambda: os.setpgid(0, group))
        except (OSError, subprocess.SubprocessError):  # the child already exited (its group is gone): nothing to guard
            self.watchdog = None
        atexit.register(self.stop)

    def error(self, what: str, cls: type[EngineError] = EngineError) -> EngineError:
        return cls(f"{self.name} {what} (log {self.log}, last lines):\n{log_tail(self.log)}")

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise self.error(f"exited with code {self.proc.returncode}", EngineDied)

    def group_hwm_bytes(self) -> int | None:
        """The resident high-water marks (Linux ``VmHWM``) of every process in the child's group summed, the
        watchdog left out: the server and what it forked (vLLM's engine core and worker). Each mark covers the
        process's life so far, so the sum bounds the group's peak from above; None where ``/proc`` cannot say."""
        skip = {self.watchdog.pid} if self.watchdog is not None else set()
        total, seen = 0, False
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in skip:
                continue
            try:
                if os.getpgid(int(entry.name)) != self.proc.pid:
                    continue
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        total, seen = total + int(line.split()[1]) * 1024, True
            except (OSError, ValueError):  # gone meanwhile, or not ours to read
                continue
        return total if seen else None

    def wait_healthy(self, timeout_s: float, poll_s: float = 0.5) -> float:
        """Seconds until ``health_url`` answered 200; EngineDied / EngineTimeout (with the log tail) otherwise."""
        start = time.monotonic()
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(self.health_url, timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - start
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass  # not listening yet
            if time.monotonic() - start > timeout_s:
                self.stop()
                raise self.error(f"was not healthy after {timeout_s:.0f} s", EngineTimeout)
            time.sleep(poll_s)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the child's process group (vLLM forks an engine core), SIGKILL after ``grace_s``."""
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # the group may hold workers that outlive their leader: kill them and wait (briefly) until they are gone,
        # so that the caller's next server never shares the cores with a dying one
        deadline = time.monotonic() + 5.0
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
            if self.watchdog is not None:
                self.watchdog.wait(5.0)  # reaped, or its zombie would keep the group alive below
            while time.monotonic() < deadline:
                os.killpg(self.proc.pid, 0)  # ProcessLookupError once the group is empty
                time.sleep(0.05)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.kill()
            self.watchdog.wait()
        atexit.unregister(self.stop)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
