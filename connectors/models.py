"""Connectors, their running tasks, and the commit ledger.

The ledger (``Commit`` + ``CommitPartition`` + ``PartitionOffset``) is the
source of truth for which Kafka offsets are in the tables. All writes go
through ``connectors.actions``.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.urls import reverse

from connectors.config.definitions import resolve
from connectors.config.plugins import resolve_plugin


class DesiredState(models.TextChoices):
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"


class TaskState(models.TextChoices):
    UNASSIGNED = "UNASSIGNED"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    RESTARTING = "RESTARTING"


class CoordinatorPhase(models.TextChoices):
    IDLE = "idle"
    # START_COMMIT sent; participants stage records until END_COMMIT.
    STAGING = "staging"
    # END_COMMIT sent; waiting for write statuses.
    COLLECTING = "collecting"
    COMMITTING = "committing"


class Connector(models.Model):
    name = models.CharField(max_length=255, unique=True)
    config = models.JSONField(default=dict, help_text="Flat string keys and values, as in Kafka Connect.")
    desired_state = models.CharField(max_length=16, choices=DesiredState.choices, default=DesiredState.RUNNING)
    # Bumped by every coordinator that takes over; statuses and prepares from
    # an older epoch are refused (DESIGN I3).
    coordinator_epoch = models.BigIntegerField(default=0)
    # Bumped on every config change and restart request: a cheap marker that
    # tells running tasks and the supervisor to reload.
    generation = models.BigIntegerField(default=0)
    failure_message = models.TextField(blank=True, default="")
    failure_trace = models.TextField(blank=True, default="")
    failed_at = models.DateTimeField(null=True, blank=True)
    # Kept across restarts, with failure_count: "first failed ..., N times".
    first_failed_at = models.DateTimeField(null=True, blank=True)
    failure_count = models.IntegerField(default=0)
    # What the supervisor's last step found wrong with the source (a topic
    # that does not exist, a regex matching nothing): shown as a warning, so
    # a connector with nothing to read never reads as healthy.
    source_warnings = models.JSONField(default=list, blank=True)
    # Indexes of tasks whose share of partitions changed (or that went away)
    # while their runners may still be live, for a sink whose tasks commit on
    # their own (the mirror): their producers are fenced before any task of
    # the connector starts again, so a partition never has two writers.
    fence_pending = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("connector-detail", args=[self.name])

    @property
    def connector_class(self) -> str:
        return str(self.config.get("connector.class", ""))

    @property
    def destinations(self) -> list[str]:
        """Where it writes (its tables, its directory), as its plugin reads that from the config."""
        plugin = resolve_plugin(self.connector_class)
        return list(resolve(plugin.destinations)(self.config)) if plugin and plugin.destinations else []

    @property
    def tasks_max(self) -> int:
        try:
            return max(1, int(self.config.get("tasks.max", 1)))
        except (TypeError, ValueError):
            return 1


class ConnectorTask(models.Model):
    """One worker task of a connector: hosts the participants of its partitions."""

    connector = models.ForeignKey(Connector, on_delete=models.CASCADE, related_name="tasks")
    task_index = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.UNASSIGNED)
    worker_id = models.CharField(max_length=255, blank=True, default="")
    worker_host = models.CharField(max_length=255, blank=True, default="")
    # [[topic, partition], ...] as assigned by the supervisor.
    assigned_partitions = models.JSONField(default=list, blank=True)
    # Bumped each time the task is (re)started; a process running an older
    # epoch of the same task is a zombie and stops at its next heartbeat.
    epoch = models.BigIntegerField(default=0)
    # The connector generation (config) this task was started with.
    generation = models.BigIntegerField(default=0)
    # When the supervisor last asked a worker to run this epoch; it does not
    # ask again until that request had time to start.
    requested_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    error_message = models.TextField(blank=True, default="")
    error_trace = models.TextField(blank=True, default="")
    failed_at = models.DateTimeField(null=True, blank=True)
    first_failed_at = models.DateTimeField(null=True, blank=True)
    failure_count = models.IntegerField(default=0)
    # Failures within the crash window that were not outages (see actions.runtime.CRASH_WINDOW).
    crashes = models.IntegerField(default=0)
    crashes_since = models.DateTimeField(null=True, blank=True)
    # Live per-partition figures: {"topic/partition": {"staged": n, "end_offset": m, ...}}
    partition_status = models.JSONField(default=dict, blank=True)
    # Why the supervisor has not started it ("no worker has a free slot: ...").
    unassigned_reason = models.TextField(blank=True, default="")
    # What the running task reports failing without failing it (a mirror's checkpoints that cannot be written
    # while its records still are), from its heartbeats; "" when nothing does.
    warning = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["connector", "task_index"]
        constraints = [
            models.UniqueConstraint(fields=["connector", "task_index"], name="unique_task_per_connector"),
        ]

    def __str__(self) -> str:
        return f"{self.connector.name}-{self.task_index}"


class CoordinatorStatus(models.Model):
    """Live state of a connector's coordinator, for the UI and the API."""

    connector = models.OneToOneField(Connector, on_delete=models.CASCADE, related_name="coordinator")
    epoch = models.BigIntegerField(default=0)
    phase = models.CharField(max_length=16, choices=CoordinatorPhase.choices, default=CoordinatorPhase.IDLE)
    worker_id = models.CharField(max_length=255, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    requested_at = models.DateTimeField(null=True, blank=True)
    commit_id = models.UUIDField(null=True, blank=True)
    commit_started_at = models.DateTimeField(null=True, blank=True)
    # Where on the control topic the current commit's START_COMMIT is (at or
    # after this offset), so a participant that starts mid-commit can join it
    # instead of waiting for the next one.
    start_control_offset = models.BigIntegerField(null=True, blank=True)
    partitions_expected = models.JSONField(default=list, blank=True)
    partitions_reported = models.JSONField(default=list, blank=True)
    # Why the supervisor has not started it ("no worker has a free slot: ...").
    unassigned_reason = models.TextField(blank=True, default="")
    # A service the sink writes to (the catalog, a table's storage) that the
    # last commit could not reach: commits are retried until it answers.
    sink_warning = models.TextField(blank=True, default="")
    # Its last crash (an exception it did not handle), shown as the connector's trace until it runs again;
    # restarted with back-off, and the connector fails after too many (see actions.runtime.CRASH_WINDOW).
    error_message = models.TextField(blank=True, default="")
    error_trace = models.TextField(blank=True, default="")
    failed_at = models.DateTimeField(null=True, blank=True)
    crashes = models.IntegerField(default=0)
    crashes_since = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"coordinator of {self.connector.name}"


class Worker(models.Model):
    """A Celery worker that hosts coordinators and tasks, one per slot (a pool process each).

    It advertises its slots with a heartbeat; the supervisor starts a runner
    only while the live workers have a slot free.
    """

    name = models.CharField(max_length=255, unique=True, help_text="Celery node name, e.g. connectors@host")
    hostname = models.CharField(max_length=255, blank=True, default="")
    slots = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class StackProcessState(models.TextChoices):
    RUNNING = "RUNNING"
    # Died; started again once its back-off is over.
    RESTARTING = "RESTARTING"
    STOPPED = "STOPPED"


class StackProcess(models.Model):
    """A child process of `make run` (``manage.py runstack``) on a host: the broker, the Spark Connect
    server, a Celery worker, beat or the web server; its deaths and restarts, as the stack heals
    (``sinkadmin.services.Restarted``). Shown beside the workers; ``seen_at`` is the stack's own beat."""

    host = models.CharField(max_length=255)
    name = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=StackProcessState.choices, default=StackProcessState.RUNNING)
    pid = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    last_exit_code = models.IntegerField(null=True, blank=True)
    last_exit_at = models.DateTimeField(null=True, blank=True)
    log_path = models.CharField(max_length=1024, blank=True, default="")
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["host", "id"]
        constraints = [models.UniqueConstraint(fields=["host", "name"], name="unique_stack_process_per_host")]

    def __str__(self) -> str:
        return f"{self.name}@{self.host}"


class CommitState(models.TextChoices):
    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


class CommitEnd(models.TextChoices):
    """What ended a commit's staging (DESIGN step 2)."""

    INTERVAL = "interval"
    MAX_RECORDS = "max-records", "max-records staged"
    STAGING_FULL = "staging-full", "a partition's staging full"
    # A task staged what its writer writes in sinkadmin.commit.write-target-ms.
    WRITE_TARGET = "write-target", "a write's worth staged"
    # After a commit that staging-full or write-target ended (a backlog),
    # every partition was read to its log end (workers.coordinator.BACKLOG_ENDS).
    CAUGHT_UP = "caught-up", "a backlog read to its end"
    # Not a commit of records: the ledger moved past offsets that retention
    # deleted before they were committed (sinkadmin.offsets.out-of-range=skip).
    SKIPPED = "skipped", "offsets below the log start skipped"


class Commit(models.Model):
    """One entry of the commit ledger: the files and offsets of one interval."""

    # The ledger outlives a deleted connector unless its deletion asks otherwise.
    connector = models.ForeignKey(Connector, on_delete=models.SET_NULL, null=True, related_name="commits")
    connector_name = models.CharField(max_length=255, db_index=True)
    commit_id = models.UUIDField(unique=True, default=uuid.uuid4)
    epoch = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=CommitState.choices)
    started_at = models.DateTimeField()
    prepared_at = models.DateTimeField(null=True, blank=True)
    committed_at = models.DateTimeField(null=True, blank=True)
    records = models.BigIntegerField(default=0)
    bytes = models.BigIntegerField(default=0)
    files_count = models.IntegerField(default=0)
    dead_lettered = models.BigIntegerField(default=0)
    # Offsets passed over without a record written: tombstones and records
    # the transforms dropped, or offsets whose records retention deleted
    # before they were committed (CommitEnd.SKIPPED: none were read).
    skipped = models.BigIntegerField(default=0)
    # [{"table", "path", "topic", "partition", "records", "bytes"}, ...]
    files = models.JSONField(default=list, blank=True)
    # {"db.table": snapshot_id}
    snapshot_ids = models.JSONField(default=dict, blank=True)
    # Every record with a timestamp below this has been committed (min over
    # the partitions of the max record timestamp), as the Iceberg sink's VTTS.
    watermark = models.DateTimeField(null=True, blank=True)
    # False when the write-status timeout left some partitions to the next commit.
    complete = models.BooleanField(default=True)
    ended_by = models.CharField(max_length=16, choices=CommitEnd.choices, default=CommitEnd.INTERVAL)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["connector", "state", "-started_at"])]
        constraints = [
            # At most one unfinished commit per connector: the next one may
            # only be prepared after this one is rolled forward (DESIGN I4).
            models.UniqueConstraint(
                fields=["connector"], condition=models.Q(state="PREPARED"), name="one_prepared_commit_per_connector"
            ),
        ]

    def __str__(self) -> str:
        return str(self.commit_id)

    @property
    def duration_seconds(self) -> float | None:
        if self.committed_at is None:
            return None
        return (self.committed_at - self.started_at).total_seconds()

    def offsets(self) -> dict[str, Any]:
        return {f"{p.topic}/{p.partition}": [p.start_offset, p.end_offset] for p in self.partitions.all()}


class CommitPartition(models.Model):
    """The offset range [start_offset, end_offset) of one partition in one commit."""

    commit = models.ForeignKey(Commit, on_delete=models.CASCADE, related_name="partitions")
    topic = models.CharField(max_length=249)
    partition = models.IntegerField()
    start_offset = models.BigIntegerField()
    end_offset = models.BigIntegerField()
    records = models.BigIntegerField(default=0)
    dead_lettered = models.BigIntegerField(default=0)
    skipped = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["topic", "partition"]
        constraints = [
            models.UniqueConstraint(fields=["commit", "topic", "partition"], name="unique_partition_per_commit"),
            models.CheckConstraint(
                condition=models.Q(end_offset__gte=models.F("start_offset")), name="range_not_reversed"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition} [{self.start_offset}, {self.end_offset})"


class PartitionOffset(models.Model):
    """One partition's two offsets in the ledger.

    ``next_offset``: where the next commit starts, the end of the last
    prepared commit. A PREPARED commit is always rolled forward (DESIGN I4),
    so the runtime resumes there and the next prepare continues from it (I1).

    ``committed_offset``: the end of the last COMMITTED commit, every record
    before it readable in the sink (I10). The offsets API, lag, the UI and
    ``/metrics`` report this one; between a commit's prepare and its commit
    the two differ, and the commit is shown being applied.
    """

    connector = models.ForeignKey(Connector, on_delete=models.CASCADE, related_name="offsets")
    topic = models.CharField(max_length=249)
    partition = models.IntegerField()
    next_offset = models.BigIntegerField()
    committed_offset = models.BigIntegerField()
    last_commit = models.ForeignKey(Commit, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["topic", "partition"]
        constraints = [
            models.UniqueConstraint(fields=["connector", "topic", "partition"], name="unique_offset_per_partition"),
        ]

    def __str__(self) -> str:
        return f"{self.connector.name} {self.topic}/{self.partition} @ {self.committed_offset}"


class MaintenanceOutcome(models.TextChoices):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    # The coordinator running it stopped or died before it ended; what it
    # had committed stands, what it had written and not committed is orphan
    # files that a later run removes.
    INTERRUPTED = "INTERRUPTED"


class MaintenanceRun(models.Model):
    """One maintenance run on one table (workers.maintenance): compaction, manifest rewrite, snapshot expiry,
    orphan removal (Hudi: clustering and cleaning)."""

    connector = models.ForeignKey(Connector, on_delete=models.SET_NULL, null=True, related_name="maintenance_runs")
    connector_name = models.CharField(max_length=255, db_index=True)
    table_name = models.CharField(max_length=512)
    # The coordinator epoch that ran it: a RUNNING run of an older epoch was interrupted.
    epoch = models.BigIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=MaintenanceOutcome.choices, default=MaintenanceOutcome.RUNNING)
    # Compaction: small files replaced by fewer, larger ones in one snapshot.
    rewritten_files = models.IntegerField(default=0)
    rewritten_bytes = models.BigIntegerField(default=0)
    added_files = models.IntegerField(default=0)
    added_bytes = models.BigIntegerField(default=0)
    replace_snapshot_id = models.BigIntegerField(null=True, blank=True)
    # Manifests rewritten into fewer (Iceberg's rewrite_manifests).
    rewritten_manifests = models.IntegerField(default=0)
    added_manifests = models.IntegerField(default=0)
    # Expiry: snapshots removed, and the files that only they referenced (Hudi: old file slices cleaned).
    expired_snapshots = models.IntegerField(default=0)
    expired_files = models.IntegerField(default=0)
    # Orphans: unreferenced files older than the window.
    orphan_files = models.IntegerField(default=0)
    # Bytes of the deleted files whose size is known: orphans, Hudi's cleaned
    # files (Iceberg's expiry reports how many files it deleted, not their size).
    removed_bytes = models.BigIntegerField(default=0)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["connector", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.connector_name} {self.table_name} {self.started_at:%Y-%m-%d %H:%M:%S}"

    @property
    def duration_seconds(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()
