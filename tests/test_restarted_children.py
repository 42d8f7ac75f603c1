"""make run's children come back when they die (sinkadmin.services.Restarted), with real processes."""

from __future__ import annotations

import sys
from pathlib import Path

from sinkadmin.services import ManagedProcess, Restarted, spawn

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def killed(service: ManagedProcess) -> None:
    service.process.kill()
    service.process.wait(10)


def test_a_child_that_dies_is_started_again_after_a_back_off_that_doubles(tmp_path: Path) -> None:
    said: list[str] = []
    starts: list[ManagedProcess] = []

    def start() -> ManagedProcess:
        starts.append(spawn("sleeper", SLEEPER, tmp_path))
        return starts[-1]

    child = Restarted(start, said.append)
    try:
        killed(child.current)
        now = child.started_at + 5
        child.check(now)
        assert said == [f"sleeper exited (-9); restarting in 1 s (see {tmp_path / 'sleeper.log'})"]
        child.check(now + 0.5)
        assert len(starts) == 1  # (still in its back-off)
        child.check(now + 1)
        assert len(starts) == 2 and child.current.process.poll() is None and said[-1] == "sleeper restarted"

        killed(child.current)
        child.check(child.started_at + 5)
        assert "restarting in 2 s" in said[-1]
        child.check(child.due or 0)
        # Alive for a minute: the next death starts the back-off over.
        child.check(child.started_at + Restarted.HEALTHY_AFTER_S)
        killed(child.current)
        child.check(child.started_at + Restarted.HEALTHY_AFTER_S + 1)
        assert "restarting in 1 s" in said[-1]
    finally:
        child.stop()
    assert all(s.process.poll() is not None for s in starts)
