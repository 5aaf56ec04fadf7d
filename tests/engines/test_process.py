"""The child-server lifecycle every engine uses: healthy, died (with its log tail), timed out, always stopped."""

import os
import sys
import time

import pytest

from eaglehead.engines import EngineDied, EngineTimeout, ServerProcess, free_port


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): it is dead for our purpose
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_a_server_that_answers_is_healthy_and_is_stopped(tmp_path):
    port = free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    with ServerProcess(argv, health_url=f"http://127.0.0.1:{port}/", log=tmp_path / "log", name="http") as proc:
        assert proc.wait_healthy(timeout_s=30) >= 0
        pid = proc.proc.pid
    assert proc.proc.poll() is not None and not _alive(pid)


def test_a_server_that_dies_is_named_with_its_log_tail(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('cannot load the head: bad config'); sys.exit(3)"]
    proc = ServerProcess(argv, health_url=f"http://127.0.0.1:{free_port()}/", log=tmp_path / "log", name="engine")
    with pytest.raises(EngineDied) as err:
        proc.wait_healthy(timeout_s=30)
    assert "exited with code 3" in str(err.value) and "cannot load the head: bad config" in str(err.value)


def test_a_server_that_never_answers_times_out_and_its_process_group_is_killed(tmp_path):
    # the child forks a grandchild (as vLLM forks its engine core): stop() must take both
    pidfile = tmp_path / "grandchild"
    code = ("import subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    proc = ServerProcess([sys.executable, "-c", code], health_url=f"http://127.0.0.1:{free_port()}/",
                         log=tmp_path / "log", name="engine")
    deadline = time.monotonic() + 20
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, "the child never started its grandchild"
        time.sleep(0.1)
    with pytest.raises(EngineTimeout, match="was not healthy after 1 s"):
        proc.wait_healthy(timeout_s=1, poll_s=0.2)
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.proc.poll() is not None and not _alive(grandchild)


def test_stop_leaves_no_process_of_the_group(tmp_path):
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); " \
           "time.sleep(300)"
    proc = ServerProcess([sys.executable, "-c", code], health_url="", log=tmp_path / "log", name="engine")
    time.sleep(1.0)
    proc.stop()
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.proc.pid, 0)


def test_a_killed_parent_leaves_no_grandchild_behind(tmp_path):
    """The parent of a server is killed outright (SIGKILL: no atexit, no stop()); the server's own child, which
    the kernel's parent-death signal does not reach (vLLM's engine core), is killed by the group's watchdog."""
    import subprocess

    pidfile = tmp_path / "grandchild"
    server = ("import subprocess, sys, time; "
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    parent = ("import sys, time; from eaglehead.engines import ServerProcess; "
              f"ServerProcess([sys.executable, '-c', {server!r}], health_url='', log={str(tmp_path / 'log')!r}); "
              "print('started', flush=True); time.sleep(300)")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 20
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, "the server never started its child"
        time.sleep(0.1)
    grandchild = int(pidfile.read_text())
    assert _alive(grandchild)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_group_memory_counts_what_the_server_forked(tmp_path):
    # the grandchild (vLLM's engine core, say) holds 64 MiB the leader never touches: the group's mark counts it
    pidfile = tmp_path / "grandchild"
    big = ("b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); "
           f"open({str(pidfile)!r}, 'w').write('ready'); import time; time.sleep(300)")
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {big!r}]); time.sleep(300)"
    with ServerProcess([sys.executable, "-c", code], health_url=f"http://127.0.0.1:{free_port()}/",
                       log=tmp_path / "log", name="engine") as proc:
        deadline = time.monotonic() + 20
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline, "the grandchild never filled its buffer"
            time.sleep(0.1)
        with open(f"/proc/{proc.proc.pid}/status") as f:
            leader = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM:"))
        total = proc.group_hwm_bytes()
        assert leader < 64 << 20  # the leader alone never held the buffer
        assert total >= leader + (64 << 20)
