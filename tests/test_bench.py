"""bench/env_step.py's CPU accounting by process kind (the throughput rows' breakdown)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import env_step  # noqa: E402


def test_an_exiting_process_keeps_its_kind(monkeypatch):
    """An exiting Chromium process (a zombie: its command line reads empty) or a gone one cannot be classified:
    it keeps the kind it had. It used to turn into "other", so whenever Chromium shut down between two readings
    a run's renderer and browser CPU was reported as "other"."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--type=renderer"])
    try:
        cpu = env_step.ProcessCPU()
        assert cpu.kinds[child.pid] == "renderer" and cpu.kinds[os.getpid()] == "python"
        real = env_step.process_kind
        monkeypatch.setattr(env_step, "process_kind", lambda pid: None if pid == child.pid else real(pid))
        cpu.rescan()   # the child reads as a zombie would
        assert cpu.kinds[child.pid] == "renderer"
    finally:
        child.kill()
        child.wait()
    assert env_step.process_kind(child.pid) is None
    busy, idle = env_step.machine_ticks()
    assert busy > 0 and idle >= 0
