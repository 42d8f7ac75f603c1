"""Fixtures of the web UI tests: a named user, connectors made through the
actions, ledger entries made through the ledger functions, and the real
runtime in threads.

The runtime (workers) is what writes task rows and the coordinator's live
phase. ``runtime_in_threads`` runs it for the browser story; the view tests
that need such rows in a given state (a failed task, a commit half
reported) write them as the runtime would, and say so.
"""

from __future__ import annotations

import gc
import socket
import sys
import threading
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.db.models import F
from django.test import Client
from django.utils import timezone

from connectors import actions
from connectors.actions import PartitionRange
from connectors.actions import runtime as runtime_state
from connectors.models import Commit, Connector, ConnectorTask, TaskState
from workers import runtime
from workers.supervisor import Supervisor

PASSWORD = "pw-alice-1234-ui"
CONFIG = {"connector.class": "iceberg", "topics": "orders", "iceberg.tables": "db.orders"}


@pytest.fixture
def alice_user(db: None) -> User:
    return User.objects.create_user("alice", "alice@example.com", PASSWORD)


@pytest.fixture
def alice(client: Client, alice_user: User) -> Client:
    client.force_login(alice_user)
    return client


@pytest.fixture
def make_connector(db: None) -> Callable[..., Connector]:
    def make(name: str = "orders-sink", **overrides: str) -> Connector:
        return actions.create_connector(name, {**CONFIG, **overrides})

    return make


CommitMaker = Callable[..., Commit]
LedgerFor = Callable[..., CommitMaker]


@pytest.fixture
def commit_ledger(db: None) -> LedgerFor:
    """A ledger writer per connector: each call prepares and commits one interval through the ledger functions."""

    def for_connector(connector: Connector, start_offsets: dict[tuple[str, int], int] | None = None) -> CommitMaker:
        epoch = actions.take_coordinator_lease(connector.pk, "test-worker")
        offsets = actions.seed_offsets(connector.pk, epoch, start_offsets or {("orders", 0): 0})

        def commit(
            records: dict[tuple[str, int], int],
            *,
            watermark: datetime | None = None,
            complete: bool = True,
            started_at: datetime | None = None,
            snapshot: int | None = None,
            finish: bool = True,
            ended_by: str = "interval",
        ) -> Commit:
            ranges = []
            files: list[dict[str, Any]] = []
            commit_id = uuid.uuid4()
            for (topic, partition), count in records.items():
                start = offsets[(topic, partition)]
                ranges.append(PartitionRange(topic, partition, start, start + count, count))
                files.append(
                    {
                        "table": connector.destinations[0],
                        "path": f"/warehouse/{topic}+{partition}+{start}+{start + count}-{commit_id}.parquet",
                        "topic": topic,
                        "partition": partition,
                        "records": count,
                        "bytes": count * 100,
                    }
                )
                offsets[(topic, partition)] = start + count
            prepared = actions.prepare_commit(
                connector.pk,
                epoch=epoch,
                commit_id=commit_id,
                started_at=started_at or timezone.now() - timedelta(seconds=2),
                ranges=ranges,
                files=files,
                watermark=watermark,
                complete=complete,
                ended_by=ended_by,
            )
            if finish:
                actions.mark_committed(commit_id, {connector.destinations[0]: snapshot or (1000 + len(offsets))})
                prepared.refresh_from_db()
            return prepared

        def abort(error: str) -> Commit:
            """A commit given up now, with ``error``, as the coordinator records it."""
            return actions.abort_commit(
                connector.pk, epoch=epoch, commit_id=uuid.uuid4(), started_at=timezone.now(), ranges=[], error=error
            )

        commit.epoch = epoch  # type: ignore[attr-defined]
        commit.abort = abort  # type: ignore[attr-defined]
        return commit

    return for_connector


def runtime_task(
    connector: Connector,
    index: int,
    *,
    state: str = TaskState.RUNNING,
    partitions: Iterable[tuple[str, int]] = (),
    partition_status: dict[str, dict[str, int]] | None = None,
    heartbeat_age: timedelta = timedelta(seconds=1),
    error_message: str = "",
    error_trace: str = "",
) -> ConnectorTask:
    """A task row as the runtime writes it (it has no action function yet)."""
    now = timezone.now()
    return ConnectorTask.objects.create(
        connector=connector,
        task_index=index,
        state=state,
        worker_id=f"worker-{index}",
        assigned_partitions=[[t, p] for t, p in partitions],
        heartbeat_at=now - heartbeat_age,
        started_at=now - timedelta(minutes=5),
        partition_status=partition_status or {},
        error_message=error_message,
        error_trace=error_trace,
        failed_at=now if state == TaskState.FAILED else None,
        failure_count=1 if state == TaskState.FAILED else 0,
    )


def heartbeating_tasks(
    connector: Connector, partition_status: dict[tuple[str, int], dict[str, int]]
) -> list[ConnectorTask]:
    """The connector's tasks assigned its partitions, started and heartbeating ``partition_status`` (per
    partition: the end offset the task last saw, what it staged), through the runtime_state functions
    the supervisor and a task runner call (assign_tasks, request_task, claim_task, task_alive)."""
    tasks = runtime_state.assign_tasks(Connector.objects.get(pk=connector.pk), sorted(partition_status))
    for task in tasks:
        epoch = runtime_state.request_task(task)
        assert epoch is not None, f"task {task.task_index} is already running"
        claimed = runtime_state.claim_task(task.pk, epoch, f"worker-{task.task_index}@test", "localhost")
        assert claimed is not None
        status = {f"{t}/{p}": {"state": "staging", **partition_status[(t, p)]} for t, p in claimed.assigned_partitions}
        assert runtime_state.task_alive(task.pk, epoch, partition_status=status) is not None
    return list(ConnectorTask.objects.filter(connector=connector).order_by("task_index"))


def age_ledger(connector: Connector, by: timedelta) -> None:
    """The connector's ledger as it reads ``by`` later, nothing committed meanwhile: every time of its
    commits moved back by ``by``. The rows stay as the ledger functions wrote them; only the clock moves,
    which no action does (the runtime's ledger functions stamp "now")."""
    Commit.objects.filter(connector=connector).update(
        started_at=F("started_at") - by,
        prepared_at=F("prepared_at") - by,
        committed_at=F("committed_at") - by,
        watermark=F("watermark") - by,
    )


def beat_coordinator(connector: Connector, **fields: Any) -> None:
    """Coordinator heartbeat and phase, as the runtime's coordinator writes them."""
    from connectors.models import CoordinatorStatus

    CoordinatorStatus.objects.filter(connector=connector).update(heartbeat_at=timezone.now(), **fields)


@contextmanager
def runtime_in_threads(beat_seconds: float = 1.0, superseded_may_linger: bool = False) -> Iterator[list[str]]:
    """The real runtime in threads of this process, stopped on exit; yields the crashes seen.

    Every runner must stop on exit, but with ``superseded_may_linger`` a task
    runner that a newer one replaced may still be blocked in a Kafka client's
    call (a test says why: it is fenced, and commits nothing).

    The supervisor steps every ``beat_seconds`` as Celery beat runs it, and
    starts coordinators and tasks through the bodies of the Celery tasks
    (``connectors.tasks``: ``run_coordinator_supervised``, ``claim_task``
    then ``run_task_supervised``). Only the transport (Celery, Redis) is
    left out, so the task rows, heartbeats, coordinator phases and ledger
    entries the UI shows are the runtime's own, and pause, resume and config
    changes reach it as they do in production. (``running_in_threads`` of
    the integration tests runs a coordinator and tasks without heartbeats:
    no task rows, and a pause would not reach them.)
    """
    stop = threading.Event()
    crashes: list[str] = []
    threads: list[threading.Thread] = []

    def start(name: str, target: Callable[..., object], *args: object) -> None:
        def run() -> None:
            try:
                target(*args)
            except Exception as exc:
                crashes.append(f"{name}: {type(exc).__name__}: {exc}")
            finally:
                connections.close_all()  # this thread's connections, before the test database goes

        thread = threading.Thread(target=run, name=name, daemon=True)
        threads.append(thread)
        thread.start()

    def superseded(thread_name: str) -> bool:
        kind, _, rest = thread_name.partition("-")
        task_id, _, epoch = rest.partition("-")
        return kind == "task" and ConnectorTask.objects.filter(pk=int(task_id), epoch__gt=int(epoch)).exists()

    def run_task(task_id: int, epoch: int) -> None:
        task = runtime_state.claim_task(task_id, epoch, runtime.worker_id(), socket.gethostname())
        if task is not None:
            runtime.run_task_supervised(task, stop.is_set)

    supervisor = Supervisor(
        start_coordinator=lambda connector_id: start(
            f"coordinator-{connector_id}", runtime.run_coordinator_supervised, connector_id, stop.is_set
        ),
        start_task=lambda task_id, epoch: start(f"task-{task_id}-{epoch}", run_task, task_id, epoch),
    )

    # These threads are the worker: they advertise slots as a Celery worker does.
    started_at = timezone.now()

    def beat() -> None:
        while not stop.is_set():
            try:
                runtime_state.worker_heartbeat("threads@test", "localhost", 64, started_at)
                supervisor.step()
            except Exception as exc:  # beat runs the next step anyway
                crashes.append(f"supervisor: {type(exc).__name__}: {exc}")
            stop.wait(beat_seconds)

    start("supervisor", beat)
    try:
        yield crashes
    finally:
        stop.set()
        threads[0].join(60)  # the supervisor: no new thread after it
        for thread in threads[1:]:
            thread.join(60)
        stuck = [t for t in threads if t.is_alive() and not (superseded_may_linger and superseded(t.name))]
        frames = sys._current_frames()
        assert not stuck, "runtime threads did not stop:\n" + "\n".join(
            f"{t.name}:\n{''.join(traceback.format_stack(frames[t.ident]))}" for t in stuck if t.ident in frames
        )
        # The runtime's Iceberg SQL catalogs keep pooled connections to the
        # test database until they are collected; the database is dropped
        # at the end of the session.
        gc.collect()
