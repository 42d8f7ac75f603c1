"""Fixtures of the web UI tests: a named user, connectors made through the
actions, and ledger entries made through the ledger functions.

The runtime (workers) is what writes task rows and the coordinator's live
phase; until the runtime's own write functions exist, tests that need such
rows write them as the runtime would, and say so.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from connectors import actions
from connectors.actions import PartitionRange
from connectors.models import Commit, Connector, ConnectorTask, TaskState

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
        ) -> Commit:
            ranges = []
            files: list[dict[str, Any]] = []
            commit_id = uuid.uuid4()
            for (topic, partition), count in records.items():
                start = offsets[(topic, partition)]
                ranges.append(PartitionRange(topic, partition, start, start + count, count))
                files.append(
                    {
                        "table": connector.tables[0],
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
            )
            if finish:
                actions.mark_committed(commit_id, {connector.tables[0]: snapshot or (1000 + len(offsets))})
                prepared.refresh_from_db()
            return prepared

        commit.epoch = epoch  # type: ignore[attr-defined]
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


def beat_coordinator(connector: Connector, **fields: Any) -> None:
    """Coordinator heartbeat and phase, as the runtime's coordinator writes them."""
    from connectors.models import CoordinatorStatus

    CoordinatorStatus.objects.filter(connector=connector).update(heartbeat_at=timezone.now(), **fields)
