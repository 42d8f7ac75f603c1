"""Ledger writes: coordinator leases, offset seeding, prepare and commit.

Each function is one database transaction. Fencing (DESIGN I3) and offset
contiguity (I1) are checked inside the transaction that writes, with the
connector row locked, so two coordinators can never both prepare.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from connectors.actions.errors import CommitNotAbandonable, LedgerConflict, NotStopped, StaleEpoch
from connectors.config.secrets import storable
from connectors.models import (
    Commit,
    CommitEnd,
    CommitPartition,
    CommitState,
    Connector,
    CoordinatorPhase,
    CoordinatorStatus,
    DesiredState,
    PartitionOffset,
)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionRange:
    """Records [start, end) of one partition, as one write status reports them."""

    topic: str
    partition: int
    start: int
    end: int
    records: int
    dead_lettered: int = 0
    # Records read and written nowhere: tombstones, and records the transforms dropped.
    skipped: int = 0

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)


def _locked_offsets(connector_id: int, epoch: int) -> tuple[Connector, dict[TopicPartition, PartitionOffset]]:
    """The connector and its partitions' offsets, locked for a new ledger entry (inside a transaction);
    refused while a prepared commit waits to be finished (DESIGN I4)."""
    connector = _locked_connector(connector_id, epoch)
    if Commit.objects.filter(connector_id=connector_id, state=CommitState.PREPARED).exists():
        raise LedgerConflict(f"connector {connector.name} has a prepared commit that must be finished first")
    offsets = {
        (row.topic, row.partition): row
        for row in PartitionOffset.objects.select_for_update().filter(connector_id=connector_id)
    }
    return connector, offsets


def _locked_connector(connector_id: int, epoch: int) -> Connector:
    connector = Connector.objects.select_for_update().get(pk=connector_id)
    if connector.coordinator_epoch != epoch:
        raise StaleEpoch(
            f"epoch {epoch} of connector {connector.name} is stale (current: {connector.coordinator_epoch})"
        )
    return connector


def _add_partitions(commit: Commit, ranges: Iterable[PartitionRange]) -> None:
    CommitPartition.objects.bulk_create(
        [
            CommitPartition(
                commit=commit,
                topic=r.topic,
                partition=r.partition,
                start_offset=r.start,
                end_offset=r.end,
                records=r.records,
                dead_lettered=r.dead_lettered,
                skipped=r.skipped,
            )
            for r in ranges
        ]
    )


def take_coordinator_lease(connector_id: int, worker_id: str) -> int:
    """Become the connector's coordinator: bump its epoch and return the new one."""
    with transaction.atomic():
        updated = Connector.objects.filter(pk=connector_id).update(coordinator_epoch=F("coordinator_epoch") + 1)
        if not updated:
            raise Connector.DoesNotExist(connector_id)
        epoch = Connector.objects.values_list("coordinator_epoch", flat=True).get(pk=connector_id)
        CoordinatorStatus.objects.update_or_create(
            connector_id=connector_id,
            defaults={
                "epoch": epoch,
                "worker_id": worker_id,
                "phase": CoordinatorPhase.IDLE,
                "heartbeat_at": timezone.now(),
                "commit_id": None,
                "commit_started_at": None,
                "start_control_offset": None,
                "partitions_expected": [],
                "partitions_reported": [],
            },
        )
    return epoch


def next_offsets(connector_id: int) -> dict[TopicPartition, int]:
    """Where each partition's next commit starts: the end of its last prepared commit (the runtime
    resumes there, since a prepared commit is always rolled forward)."""
    rows = PartitionOffset.objects.filter(connector_id=connector_id).values_list("topic", "partition", "next_offset")
    return {(topic, partition): offset for topic, partition, offset in rows}


def committed_offsets(connector_id: int) -> dict[TopicPartition, int]:
    """Each partition's offset below which every record is readable in the sink: the end of its last
    COMMITTED commit (DESIGN I10). What the offsets API and lag report."""
    rows = PartitionOffset.objects.filter(connector_id=connector_id).values_list(
        "topic", "partition", "committed_offset"
    )
    return {(topic, partition): offset for topic, partition, offset in rows}


def seed_offsets(connector_id: int, epoch: int, seeds: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Record starting offsets for partitions the ledger has never seen; return all offsets.

    Seeding in the ledger (instead of trusting each write status's start)
    makes the contiguity check of ``prepare_commit`` hold from a partition's
    very first commit.
    """
    with transaction.atomic():
        _locked_connector(connector_id, epoch)
        known = next_offsets(connector_id)
        PartitionOffset.objects.bulk_create(
            [
                PartitionOffset(
                    connector_id=connector_id,
                    topic=topic,
                    partition=partition,
                    next_offset=offset,
                    committed_offset=offset,
                )
                for (topic, partition), offset in seeds.items()
                if (topic, partition) not in known
            ],
            ignore_conflicts=True,
        )
        return next_offsets(connector_id)


def skip_offsets(connector_id: int, epoch: int, skips: Mapping[TopicPartition, tuple[int, int]]) -> Commit:
    """Move partitions from ``start`` to ``end`` without reading them, as one ledger entry.

    For offsets whose records retention deleted before they were committed
    (``sinkadmin.offsets.out-of-range=skip``): the entry's ranges keep the
    ledger contiguous (I1) and say how many offsets were passed over, so the
    loss is on record rather than silent.
    """
    with transaction.atomic():
        connector, offsets = _locked_offsets(connector_id, epoch)
        for (topic, partition), (start, end) in skips.items():
            row = offsets.get((topic, partition))
            if row is None or row.next_offset != start or end <= start:
                at = row.next_offset if row else None
                raise LedgerConflict(f"{topic}/{partition}: cannot skip from {start} to {end}, the ledger is at {at}")
        now = timezone.now()
        commit = Commit.objects.create(
            connector_id=connector_id,
            connector_name=connector.name,
            epoch=epoch,
            state=CommitState.COMMITTED,
            started_at=now,
            prepared_at=now,
            committed_at=now,
            skipped=sum(end - start for start, end in skips.values()),
            ended_by=CommitEnd.SKIPPED,
        )
        CommitPartition.objects.bulk_create(
            [
                CommitPartition(
                    commit=commit,
                    topic=topic,
                    partition=partition,
                    start_offset=start,
                    end_offset=end,
                    skipped=end - start,
                )
                for (topic, partition), (start, end) in sorted(skips.items())
            ]
        )
        for tp, (_, end) in skips.items():
            row = offsets[tp]
            row.next_offset = row.committed_offset = end
            row.last_commit = commit
            row.save(update_fields=["next_offset", "committed_offset", "last_commit", "updated_at"])
    return commit


def pending_commit(connector_id: int) -> Commit | None:
    return Commit.objects.filter(connector_id=connector_id, state=CommitState.PREPARED).first()


def prepare_commit(
    connector_id: int,
    *,
    epoch: int,
    commit_id: uuid.UUID,
    started_at: datetime,
    ranges: Iterable[PartitionRange],
    files: list[dict[str, Any]],
    watermark: datetime | None,
    complete: bool,
    ended_by: str = CommitEnd.INTERVAL,
) -> Commit:
    """Compare-and-set the ledger: accept the commit only if it continues every partition."""
    ranges = [r for r in ranges if r.end > r.start]
    with transaction.atomic():
        connector, offsets = _locked_offsets(connector_id, epoch)
        for r in ranges:
            row = offsets.get(r.key)
            expected = row.next_offset if row else None
            if expected != r.start:
                raise LedgerConflict(
                    f"{r.topic}/{r.partition}: write status starts at {r.start}, the ledger is at {expected}"
                )
        now = timezone.now()
        commit = Commit.objects.create(
            connector_id=connector_id,
            connector_name=connector.name,
            commit_id=commit_id,
            epoch=epoch,
            state=CommitState.PREPARED,
            started_at=started_at,
            prepared_at=now,
            records=sum(r.records for r in ranges),
            bytes=sum(int(f.get("bytes", 0)) for f in files),
            files_count=len(files),
            dead_lettered=sum(r.dead_lettered for r in ranges),
            skipped=sum(r.skipped for r in ranges),
            files=files,
            watermark=watermark,
            complete=complete,
            ended_by=ended_by,
        )
        _add_partitions(commit, ranges)
        for r in ranges:
            row = offsets[r.key]
            row.next_offset = r.end
            row.last_commit = commit
            row.save(update_fields=["next_offset", "last_commit", "updated_at"])
        CoordinatorStatus.objects.filter(connector_id=connector_id).update(phase=CoordinatorPhase.COMMITTING)
    return commit


def committed_tables(connector_name: str) -> list[str]:
    """The tables a connector's commits have been made to, by name: where a sink whose records name their
    tables (the Iceberg sink's dynamic routing) has tables to maintain, or to recover commits from."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT jsonb_object_keys(snapshot_ids) FROM {Commit._meta.db_table} "
            "WHERE connector_name = %s AND state = %s ORDER BY 1",
            [connector_name, CommitState.COMMITTED],
        )
        return [row[0] for row in cursor.fetchall()]


def mark_committed(commit_id: uuid.UUID, snapshot_ids: Mapping[str, int]) -> bool:
    """Finish a prepared commit once every table holds it. False if it was not PREPARED."""
    with transaction.atomic():
        commit = Commit.objects.select_for_update().filter(commit_id=commit_id).first()
        if commit is None or commit.state != CommitState.PREPARED:
            return False
        commit.state = CommitState.COMMITTED
        commit.committed_at = timezone.now()
        commit.snapshot_ids = {**commit.snapshot_ids, **{k: int(v) for k, v in snapshot_ids.items()}}
        commit.save(update_fields=["state", "committed_at", "snapshot_ids"])
        # Its records are readable now: the offsets readers are told move to its ends.
        connector_id = commit.connector_id
        for topic, partition, end in commit.partitions.values_list("topic", "partition", "end_offset"):
            if connector_id is not None:  # (None: the connector was deleted since)
                PartitionOffset.objects.filter(
                    connector_id=connector_id, topic=topic, partition=partition, committed_offset__lt=end
                ).update(committed_offset=end, updated_at=timezone.now())
    return True


def abort_commit(
    connector_id: int,
    *,
    epoch: int,
    commit_id: uuid.UUID,
    started_at: datetime,
    ranges: Iterable[PartitionRange],
    error: str,
) -> Commit:
    """Record a commit that was given up; its offsets do not advance."""
    connector = Connector.objects.only("name").get(pk=connector_id)
    ranges = list(ranges)
    with transaction.atomic():
        commit = Commit.objects.create(
            connector_id=connector_id,
            connector_name=connector.name,
            commit_id=commit_id,
            epoch=epoch,
            state=CommitState.ABORTED,
            started_at=started_at,
            records=sum(r.records for r in ranges),
            dead_lettered=sum(r.dead_lettered for r in ranges),
            error=storable(error),
            complete=False,
        )
        _add_partitions(commit, ranges)
    return commit


def abandon_commit(connector_id: int, commit_id: uuid.UUID, reason: str) -> Commit:
    """Give up a prepared commit that cannot be applied: ABORTED with ``reason``, its partitions' next
    offsets rewound to its starts (the next commit writes its records again), and the coordinator's epoch
    bumped, so that a coordinator still holding it can prepare nothing more. The caller has checked that
    the sink holds none of it (``connectors.actions.lifecycle.abandon_commit``)."""
    with transaction.atomic():
        connector = Connector.objects.select_for_update().get(pk=connector_id)
        commit = Commit.objects.select_for_update().filter(connector_id=connector_id, commit_id=commit_id).first()
        if commit is None or commit.state != CommitState.PREPARED:
            state = "unknown" if commit is None else commit.state
            raise CommitNotAbandonable(f"commit {commit_id} is {state}: only a prepared commit can be abandoned")
        commit.state = CommitState.ABORTED
        commit.error = storable(f"abandoned: {reason}")[:10000]
        commit.save(update_fields=["state", "error"])
        for topic, partition, start, end in commit.partitions.values_list(
            "topic", "partition", "start_offset", "end_offset"
        ):
            # (A row past the commit's end was moved since, by an operator: left as it is.)
            PartitionOffset.objects.filter(
                connector_id=connector_id, topic=topic, partition=partition, next_offset=end
            ).update(next_offset=start, last_commit=None, updated_at=timezone.now())
        connector.coordinator_epoch = F("coordinator_epoch") + 1
        connector.save(update_fields=["coordinator_epoch", "updated_at"])
    return commit


def publish_coordinator_phase(
    connector_id: int,
    epoch: int,
    *,
    phase: str,
    commit_id: uuid.UUID | None,
    started_at: datetime | None,
    control_offset: int | None,
    expected: list[TopicPartition],
    reported: list[TopicPartition],
    sink_warning: str = "",
) -> bool:
    """Live coordinator state for UI and API. False if ``epoch`` is no longer the connector's.

    ``sink_warning``: a service the sink writes to that commits are waiting for (the catalog).
    """
    updated = CoordinatorStatus.objects.filter(connector_id=connector_id, connector__coordinator_epoch=epoch).update(
        epoch=epoch,
        phase=phase,
        commit_id=commit_id,
        commit_started_at=started_at,
        start_control_offset=control_offset,
        partitions_expected=[list(tp) for tp in expected],
        partitions_reported=[list(tp) for tp in reported],
        sink_warning=storable(sink_warning),
        heartbeat_at=timezone.now(),
    )
    return updated == 1


@dataclass(frozen=True)
class RecoveredCommit:
    """A commit found in table snapshot summaries (for rebuilding a lost ledger)."""

    commit_id: uuid.UUID
    epoch: int
    committed_at: datetime
    snapshot_ids: dict[str, int]
    # {(topic, partition): (start, end)}
    ranges: dict[TopicPartition, tuple[int, int]]
    watermark: datetime | None


def adopt_ledger(connector: Connector) -> int:
    """The ledger a deleted connector of the same name left behind (a deletion keeps its commits) becomes
    ``connector``'s, and its offsets are where those commits end: a connector created again under a name
    resumes where the deleted one stopped, as Kafka Connect's sink resumes from the consumer group a deleted
    connector leaves. A PREPARED commit among them is rolled forward by the new coordinator (I4, I9); an
    ABORTED one moved nothing. Run in the transaction that creates ``connector``; returns the commits adopted."""
    adopted = Commit.objects.filter(connector__isnull=True, connector_name=connector.name).update(connector=connector)
    if not adopted:
        return 0
    offsets: dict[TopicPartition, PartitionOffset] = {}
    ranges = (
        CommitPartition.objects.filter(commit__connector=connector)
        .exclude(commit__state=CommitState.ABORTED)
        .select_related("commit")
        .order_by("commit__started_at", "commit_id")
    )
    for piece in ranges:
        offset = offsets.setdefault(
            (piece.topic, piece.partition),
            PartitionOffset(
                connector=connector,
                topic=piece.topic,
                partition=piece.partition,
                next_offset=piece.start_offset,
                committed_offset=piece.start_offset,
            ),
        )
        offset.next_offset = max(offset.next_offset, piece.end_offset)
        if piece.commit.state == CommitState.COMMITTED:
            offset.committed_offset = max(offset.committed_offset, piece.end_offset)
            offset.last_commit = piece.commit
    PartitionOffset.objects.bulk_create(offsets.values())
    return adopted


def restore_commits(connector_id: int, recovered: Iterable[RecoveredCommit]) -> tuple[int, dict[TopicPartition, int]]:
    """Write recovered commits missing from the ledger and set offsets to the end of each partition's last range.

    Returns how many commits were added and the offsets now in the ledger.
    Refused unless the connector is STOPPED, like any offset change.
    """
    recovered = list(recovered)  # iterated twice below
    with transaction.atomic():
        connector = Connector.objects.select_for_update().get(pk=connector_id)
        if connector.desired_state != DesiredState.STOPPED:
            raise NotStopped(f"stop connector {connector.name} before rebuilding its ledger")
        known = set(
            Commit.objects.filter(commit_id__in=[r.commit_id for r in recovered]).values_list("commit_id", flat=True)
        )
        added = 0
        ends: dict[TopicPartition, int] = {}
        for item in sorted(recovered, key=lambda r: r.committed_at):
            for tp, (_, end) in item.ranges.items():
                ends[tp] = max(ends.get(tp, 0), end)
            if item.commit_id in known:
                continue
            commit = Commit.objects.create(
                connector=connector,
                connector_name=connector.name,
                commit_id=item.commit_id,
                epoch=item.epoch,
                state=CommitState.COMMITTED,
                started_at=item.committed_at,
                prepared_at=item.committed_at,
                committed_at=item.committed_at,
                snapshot_ids=item.snapshot_ids,
                watermark=item.watermark,
                records=sum(end - start for start, end in item.ranges.values()),
            )
            _add_partitions(
                commit,
                [PartitionRange(t, p, start, end, records=end - start) for (t, p), (start, end) in item.ranges.items()],
            )
            added += 1
        for (topic, partition), end in ends.items():
            PartitionOffset.objects.update_or_create(
                connector=connector,
                topic=topic,
                partition=partition,
                defaults={"next_offset": end, "committed_offset": end},
            )
    return added, committed_offsets(connector_id)


def record_transaction(
    connector_id: int, *, epoch: int, started_at: datetime, ranges: Iterable[PartitionRange], size: int
) -> Commit:
    """Enter a transaction a mirror task committed on the target cluster: a COMMITTED entry, and each
    partition's offset moved up to its end.

    For this sink the ledger is a record, not the truth: the transaction
    committed before it is entered, so no epoch is checked (a fenced
    runner's last transaction did commit), and an offset never moves back
    (entries of two runners may arrive out of order).
    """
    ranges = list(ranges)
    now = timezone.now()
    with transaction.atomic():
        connector = Connector.objects.only("name").get(pk=connector_id)
        commit = Commit.objects.create(
            connector_id=connector_id,
            connector_name=connector.name,
            epoch=epoch,
            state=CommitState.COMMITTED,
            started_at=started_at,
            prepared_at=now,
            committed_at=now,
            records=sum(r.records for r in ranges),
            bytes=size,
        )
        _add_partitions(commit, ranges)
        # Only this transaction's partitions are locked: the connector's other tasks enter theirs meanwhile.
        mine = Q()
        for r in ranges:
            mine |= Q(topic=r.topic, partition=r.partition)
        rows = {
            (row.topic, row.partition): row
            for row in PartitionOffset.objects.select_for_update().filter(mine, connector_id=connector_id)
        }
        for r in ranges:
            row = rows.get(r.key)
            if row is None:
                PartitionOffset.objects.create(
                    connector_id=connector_id,
                    topic=r.topic,
                    partition=r.partition,
                    next_offset=r.end,
                    committed_offset=r.end,
                    last_commit=commit,
                )
            elif r.end >= row.next_offset:
                row.next_offset = row.committed_offset = r.end
                row.last_commit = commit
                row.save(update_fields=["next_offset", "committed_offset", "last_commit", "updated_at"])
    return commit


def set_offsets(connector_id: int, offsets: Mapping[TopicPartition, int]) -> None:
    """Set partitions' offsets to what a sink that keeps its own offsets holds (the mirror's target group,
    read when a task starts or changed through the offsets API): the ledger shows the truth's position,
    so lag is measured from it."""
    with transaction.atomic():
        for (topic, partition), offset in offsets.items():
            PartitionOffset.objects.update_or_create(
                connector_id=connector_id,
                topic=topic,
                partition=partition,
                defaults={"next_offset": offset, "committed_offset": offset},
            )
