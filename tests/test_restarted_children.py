"""make run's children come back when they die (sinkadmin.services.Restarted), with real processes."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from connectors.management.commands.runstack import RecordedProcesses
from connectors.models import StackProcess, StackProcessState
from sinkadmin.services import ManagedProcess, Restarted, ServiceError, spawn, wait_ready

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


@pytest.mark.django_db
def test_the_stacks_children_are_recorded_for_the_workers_page_as_they_die_and_come_back(tmp_path: Path) -> None:
    said: list[str] = []
    recorded = RecordedProcesses("laptop", said.append)
    StackProcess.objects.create(host="laptop", name="from-an-earlier-run", seen_at=timezone.now())
    recorded.stack_started()
    child = Restarted(lambda: spawn("spark-connect", SLEEPER, tmp_path), said.append, recorded)
    try:
        row = StackProcess.objects.get(host="laptop")
        assert (row.name, row.state, row.pid, row.restarts) == (
            "spark-connect",
            StackProcessState.RUNNING,
            child.current.process.pid,
            0,
        )
        assert row.log_path == str(tmp_path / "spark-connect.log")

        killed(child.current)
        child.check(child.started_at + 5)
        row.refresh_from_db()
        assert (row.state, row.pid, row.last_exit_code) == (StackProcessState.RESTARTING, None, -9)
        assert row.last_exit_at is not None

        child.check(child.due or 0)
        row.refresh_from_db()
        assert (row.state, row.pid, row.restarts) == (StackProcessState.RUNNING, child.current.process.pid, 1)
        assert row.last_exit_code == -9  # (the last death stays shown)
    finally:
        child.stop()
    recorded.stack_stopped()
    assert StackProcess.objects.get(host="laptop").state == StackProcessState.STOPPED
    assert not any("cannot record" in line for line in said)


def test_a_child_that_never_listens_is_stopped_and_named_with_its_logs_tail_and_its_stacks(tmp_path: Path) -> None:
    # A stand-in for a JVM stuck before it listens: it says where it got to, and answers SIGQUIT (as the
    # JVM does) by writing its stacks to its output.
    stuck = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGQUIT, lambda *_: print('Full thread dump: main waiting', flush=True))\n"
        "print('Waiting for the controller quorum', flush=True)\n"
        "time.sleep(120)\n"
    )
    child = spawn("stuck", [sys.executable, "-c", stuck], tmp_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ServiceError) as raised:
        wait_ready(child, "127.0.0.1", port, timeout=3, dump_threads=True)
    assert f"stuck did not listen on 127.0.0.1:{port} within 3s" in str(raised.value)
    assert "Waiting for the controller quorum" in str(raised.value)
    assert child.process.poll() is not None
    assert "Full thread dump: main waiting" in (tmp_path / "stuck.log").read_text()
