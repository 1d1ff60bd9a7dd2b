"""`sim plan`'s worker processes end with it, however it ends: SIGKILL or SIGTERM sent to the parent
alone (not its process group) leaves no simulation running on, orphaned (issue 17)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from simulator.traces import agent_trace

HERE = Path(__file__).parent


@pytest.fixture
def plan(tmp_path) -> Path:
    for name in ("plan_tiny.yaml", "plan_tiny_scenario.yaml"):
        shutil.copy(HERE / name, tmp_path / name)
    agent_trace(
        tmp_path / "plan_tiny_trace.parquet", sessions=80, turns=4, gap_s=0.05, shared_prefix_tokens=0
    )
    return tmp_path / "plan_tiny.yaml"


def _workers(pid: int) -> list[int]:
    """Processes whose parent is `pid` and that run a multiprocessing worker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"multiprocessing" in cmdline and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_parent_alone_ends_its_workers(plan, signum):
    sim = Path(sys.executable).with_name("sim")
    proc = subprocess.Popen(
        [str(sim), "plan", str(plan), "--out", str(plan.parent / "out"), "--workers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the plan started no workers"
            time.sleep(0.05)
            workers = _workers(proc.pid)
        time.sleep(0.5)  # the workers are simulating
        os.kill(proc.pid, signum)  # the parent only
        _, stderr = proc.communicate(timeout=60)
        deadline = time.monotonic() + 20
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:  # never leave one behind, even when the test fails
            if _alive(w):
                os.kill(w, signal.SIGKILL)
    if signum == signal.SIGTERM:
        assert proc.returncode == 143, stderr
        assert "interrupted by SIGTERM" in stderr and "the same command resumes" in stderr
