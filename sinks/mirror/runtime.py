"""The Kafka mirror under the product's lifecycle: a task the supervisor started on a Celery worker runs the
engine on the share of source partitions it was given, heartbeats with its lag, and enters each committed
transaction in the ledger. No coordinator: each task's transactions commit on their own (docs/mirror.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Producer
from django.db import close_old_connections

from connectors.actions import ledger
from connectors.config import SinkConfig
from sinks.mirror.checkpoints import CheckpointRunner
from sinks.mirror.engine import Fenced, MirrorTask, Transaction, transactional_id
from sinks.mirror.settings import MirrorSettings
from sinks.mirror.syncs import is_heartbeats_topic
from workers.sink import TaskHeartbeat

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 1.0


def fence(connector: str, config: SinkConfig, task_indexes: Sequence[int]) -> None:
    """Fence the transactional producers of these tasks on the target cluster: whatever transaction a runner
    of theirs has open is aborted, and it can commit nothing more (as KIP-618 fences a source connector's
    tasks before their successors start)."""
    settings: MirrorSettings = config.settings
    if not settings.exactly_once:
        return  # (at least once: no transactions to fence; a batch copied twice is the documented cost)
    for index in task_indexes:
        producer = Producer({**settings.clients("target"), "transactional.id": transactional_id(connector, index)})
        producer.init_transactions(30)
        producer.flush(0)


def run_task(
    name: str,
    task_index: int,
    partitions: Sequence[tuple[str, int]],
    stop: Callable[[], bool],
    *,
    task_epoch: int = 0,
    heartbeat: TaskHeartbeat | None = None,
) -> None:
    """Mirror ``partitions`` until ``stop()``, or until ``heartbeat(status)`` says to stop (None)."""
    # (Django's apps are ready by the time a task runs.)
    from connectors.actions import get_connector
    from connectors.models import DesiredState

    connector = get_connector(name)
    config = SinkConfig.parse(connector.config)

    def entered(done: Transaction) -> None:
        ledger.record_transaction(
            connector.pk,
            epoch=task_epoch,
            started_at=datetime.fromtimestamp(done.started_at, tz=UTC),
            ranges=[
                ledger.PartitionRange(topic, partition, start, end, records)
                for (topic, partition), (start, end, records) in sorted(done.ranges.items())
            ],
            size=done.bytes,
        )

    task = MirrorTask(
        name,
        task_index,
        config.tasks_max,
        config.settings,
        assignment=[(str(t), int(p)) for t, p in partitions],
        on_commit=entered,
    )
    last_beat = 0.0
    desired: str | None = DesiredState.RUNNING
    beside: CheckpointRunner | None = None
    if task_index == 0 and (config.settings.emit_checkpoints or config.settings.emit_heartbeats):
        # The mirror's checkpoints and heartbeats, beside its first task (one runner per mirror, as MM2 has
        # one MirrorCheckpointConnector and one MirrorHeartbeatConnector per flow); stopped with it. What
        # fails in it shows in task 0's status.
        beside = CheckpointRunner(name, config.settings)

    starting = True

    def warning() -> str:
        # (Until it has reached both clusters and read where to resume, a task has copied nothing: a start that
        # hangs on a cluster out of reach must not read as healthy meanwhile.)
        failing = beside.failure if beside is not None else ""
        return "; ".join(w for w in ("starting: reaching the clusters" if starting else "", failing) if w)

    def stopping() -> bool:
        """Called by the engine between its calls to the clusters (and between a start's attempts to reach the
        target's transaction coordinator): the heartbeat beats from here, so a runner stuck in a call past its
        timeout stops beating, and the supervisor starts another, which fences it."""
        nonlocal last_beat, desired
        if heartbeat is not None and time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
            last_beat = time.monotonic()
            desired = heartbeat(partition_status(task), warning())
        return stop() or desired is None

    def started(task: MirrorTask) -> None:
        nonlocal starting
        # The target's offsets are the truth: the ledger shows them from the start, so lag is measured from
        # them even where a transaction committed without its ledger entry (its task killed in between).
        ledger.set_offsets(connector.pk, task.positions)
        starting = False
        log.info("%s: mirror task %d started with %d partitions", name, task_index, len(task.partitions))

    done = threading.Event()
    checkpointing = None
    if beside is not None:
        checkpointing = threading.Thread(
            target=beside.run, args=(lambda: done.is_set() or stop(),), name=f"{name}-checkpoints", daemon=True
        )
        checkpointing.start()
    try:
        task.run(stopping, paused=lambda: desired == DesiredState.PAUSED, on_start=started)
    except Fenced as exc:
        # A newer runner of this task (or the supervisor, moving its partitions) took over: nothing of this
        # runner's open transaction commits, and the newer one resumes from the target's offsets.
        log.warning("%s", exc)
    finally:
        done.set()
        if checkpointing is not None:
            checkpointing.join(30)
        close_old_connections()


def partition_status(task: MirrorTask) -> dict[str, Any]:
    """Live figures per partition for the UI and API: where the target's offsets are, and the source's end."""
    ends = task.end_offsets()
    return {
        f"{topic}/{partition}": {
            "state": "MIRRORING",
            "staged": 0,
            "position": task.positions.get((topic, partition)),
            "end_offset": ends.get((topic, partition)),
            "paused": False,
            # (A heartbeats partition's: the time of the latest heartbeat replicated, None before the first, for
            # the connector's page.)
            **(
                {"heartbeat_ms": task.heartbeats.get((topic, partition))}
                if is_heartbeats_topic(topic, task.settings.separator)
                else {}
            ),
        }
        for topic, partition in sorted(task.partitions)
    }
