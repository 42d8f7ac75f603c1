"""Runtime state: which worker runs what, heartbeats, failures.

Claims are conditional UPDATEs whose row count is checked, so any number of
supervisors and workers can race safely: a request is made once per
heartbeat timeout, and a task runs only under the epoch it was asked to run.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from connectors.config.secrets import storable
from connectors.models import (
    Connector,
    ConnectorTask,
    CoordinatorStatus,
    DesiredState,
    StackProcess,
    StackProcessState,
    TaskState,
    Worker,
)

TopicPartition = tuple[str, int]

# A runner (a coordinator or a task) that crashes is restarted with back-off; one that crashes MAX_CRASHES
# times within CRASH_WINDOW, for a reason that is not an outage of a service it needs (those are waited
# out), fails its connector with the last trace, as Kafka Connect fails a connector, instead of looping.
CRASH_WINDOW = timedelta(minutes=10)
MAX_CRASHES = 5


def _crash_count(crashes: int, since: datetime | None, now: datetime) -> tuple[int, datetime]:
    """The crashes within the window with this one, and when the window began."""
    if since is not None and now - since <= CRASH_WINDOW:
        return crashes + 1, since
    return 1, now


def _described(error: BaseException) -> tuple[str, str]:
    """What the UI and the API show of an exception: its message and its trace, passwords hidden."""
    return storable(f"{type(error).__name__}: {error}")[:10000], storable("".join(traceback.format_exception(error)))


def _stale_before(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.HEARTBEAT_TIMEOUT_SECONDS)


def _silent(now: datetime) -> Q:
    """Nobody has heartbeated, and nobody was asked to, within the timeout."""
    cutoff = _stale_before(now)
    return (Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=cutoff)) & (
        Q(requested_at__isnull=True) | Q(requested_at__lt=cutoff)
    )


def worker_heartbeat(name: str, hostname: str, slots: int, started_at: datetime) -> None:
    """A connectors worker advertises its slots (one per pool process), every few seconds while it runs."""
    Worker.objects.update_or_create(
        name=name,
        defaults={"hostname": hostname, "slots": slots, "started_at": started_at, "heartbeat_at": timezone.now()},
    )


def worker_left(name: str) -> None:
    """A worker that shuts down takes its slots with it at once (its runners free their rows as they leave)."""
    Worker.objects.filter(name=name).delete()


@dataclass(frozen=True)
class WorkerSlots:
    name: str
    hostname: str
    slots: int
    used: int
    heartbeat_at: datetime

    @property
    def free(self) -> int:
        return max(0, self.slots - self.used)


@dataclass
class Room:
    """The live workers' slots, as one supervisor step hands them out.

    A runner holds a slot from the moment it is requested (its Celery message
    waits for a free pool process) until it stops heartbeating. ``free`` is
    counted over all live workers together, because Celery gives a request
    to whichever worker's pool has a process free.
    """

    workers: list[WorkerSlots]
    held: int
    slots: int = field(init=False)
    free: int = field(init=False)

    def __post_init__(self) -> None:
        self.slots = sum(w.slots for w in self.workers)
        self.free = self.slots - self.held

    def take(self) -> None:
        self.held += 1
        self.free -= 1

    def no_room_reason(self, needed: int) -> str:
        if not self.workers:
            return "no connectors worker is running (none has advertised its slots lately)"
        asked = f" (this connector needs {needed}, {max(0, self.free)} free)" if needed > 1 else ""
        names = ", ".join(w.name for w in self.workers)
        return f"no worker has a free slot{asked}: {self.held}/{self.slots} used on {names}"


def worker_name(worker_id: str) -> str:
    """The worker a runner's ``worker_id`` (``name:pid``) belongs to."""
    return worker_id.rsplit(":", 1)[0]


def workers(now: datetime | None = None) -> list[WorkerSlots]:
    """Live workers with their slots and the runners they hold (a runner requested but not yet started holds none)."""
    now = now or timezone.now()
    live = list(Worker.objects.filter(heartbeat_at__gte=_stale_before(now)))
    held = Counter(
        worker_name(worker_id)
        for model in (CoordinatorStatus, ConnectorTask)
        for worker_id in model.objects.filter(heartbeat_at__gte=_stale_before(now))
        .exclude(worker_id="")
        .values_list("worker_id", flat=True)
    )
    return [WorkerSlots(w.name, w.hostname, w.slots, held.get(w.name, 0), w.heartbeat_at) for w in live]


def room(now: datetime | None = None) -> Room:
    """The slots of the live workers and how many their runners hold.

    A runner running on a live worker holds one, and so does one asked to
    start that has not yet (its request waits for a pool process). A runner
    started by hand (``manage.py run_connector``) runs in a process of its
    own, on no worker's slot, and holds none.
    """
    now = now or timezone.now()
    live = workers(now)
    names = {w.name for w in live}
    cutoff = _stale_before(now)
    held = 0
    for model in (CoordinatorStatus, ConnectorTask):
        for runner, heartbeat_at in model.objects.exclude(_silent(now)).values_list("worker_id", "heartbeat_at"):
            running = heartbeat_at is not None and heartbeat_at >= cutoff
            held += 1 if not running or worker_name(runner) in names else 0
    return Room(live, held)


def runners_to_start(
    connector_id: int, tasks: Sequence[ConnectorTask], *, coordinated: bool = True
) -> tuple[bool, list[ConnectorTask], int]:
    """Whether the connector's coordinator (if its sink has one), and which of its tasks, nobody runs or
    was asked to run; and how many of its runners are running or asked to."""
    now = timezone.now()
    coordinator = coordinator_silent = False
    if coordinated:
        status, _ = CoordinatorStatus.objects.get_or_create(connector_id=connector_id)
        coordinator_silent = CoordinatorStatus.objects.filter(_silent(now), connector_id=connector_id).exists()
        # (One that crashed waits out its back-off, as a failed task does.)
        coordinator = coordinator_silent and not _coordinator_in_backoff(status, now)
    silent = set(ConnectorTask.objects.filter(_silent(now), pk__in=[t.pk for t in tasks]).values_list("pk", flat=True))
    waiting = [t for t in tasks if t.pk in silent and not _in_backoff(t, now)]
    held = int(coordinated and not coordinator_silent) + len(tasks) - len(silent)
    return coordinator, waiting, held


def waiting_for_room(connector_id: int, coordinator: bool, tasks: Sequence[ConnectorTask], reason: str) -> None:
    """Say why these runners were not started (shown as their UNASSIGNED status's trace)."""
    if coordinator:
        CoordinatorStatus.objects.filter(connector_id=connector_id).exclude(unassigned_reason=reason).update(
            unassigned_reason=reason
        )
    ConnectorTask.objects.filter(pk__in=[t.pk for t in tasks]).exclude(unassigned_reason=reason).update(
        unassigned_reason=reason
    )


def request_coordinator(connector_id: int) -> bool:
    """True if the caller should start a coordinator for the connector (nobody runs one)."""
    now = timezone.now()
    CoordinatorStatus.objects.get_or_create(connector_id=connector_id)
    requested = CoordinatorStatus.objects.filter(_silent(now), connector_id=connector_id)
    return requested.update(requested_at=now, unassigned_reason="") == 1


def coordinator_alive(connector_id: int, epoch: int) -> str | None:
    """Heartbeat of the coordinator at ``epoch``: the desired state, or None if it must stop."""
    now = timezone.now()
    with transaction.atomic():
        connector = (
            Connector.objects.filter(pk=connector_id).values("coordinator_epoch", "desired_state", "failed_at").first()
        )
        if connector is None or connector["coordinator_epoch"] != epoch or connector["failed_at"] is not None:
            return None
        if connector["desired_state"] == DesiredState.STOPPED:
            return None
        # (A running coordinator was started: why it once was not is past.
        # The supervisor may write that reason late, having found the
        # coordinator silent while it started slowly: its beats clear it.)
        CoordinatorStatus.objects.filter(connector_id=connector_id, epoch=epoch).update(
            heartbeat_at=now, unassigned_reason=""
        )
    return str(connector["desired_state"])


def coordinator_crashed(connector_id: int, error: BaseException, *, outage: bool) -> None:
    """The connector's coordinator raised ``error``: shown as the connector's trace, restarted after its
    back-off; the MAX_CRASHES-th crash within CRASH_WINDOW that is not an ``outage`` fails the connector."""
    from connectors.actions.lifecycle import fail_connector

    now = timezone.now()
    message, trace = _described(error)
    with transaction.atomic():
        status, _ = CoordinatorStatus.objects.select_for_update().get_or_create(connector_id=connector_id)
        if not outage:
            status.crashes, status.crashes_since = _crash_count(status.crashes, status.crashes_since, now)
        status.error_message, status.error_trace, status.failed_at = message, trace, now
        status.heartbeat_at = status.requested_at = None
        status.save(
            update_fields=[
                "crashes",
                "crashes_since",
                "error_message",
                "error_trace",
                "failed_at",
                "heartbeat_at",
                "requested_at",
                "updated_at",
            ]
        )
    if not outage and status.crashes >= MAX_CRASHES:
        fail_connector(
            connector_id, f"the coordinator crashed {status.crashes} times in {CRASH_WINDOW}: {message}", trace
        )


def _coordinator_in_backoff(status: CoordinatorStatus | None, now: datetime) -> bool:
    """A coordinator that crashed waits out its restart delay before it is asked to run again."""
    return (
        status is not None
        and status.failed_at is not None
        and (status.heartbeat_at is None or status.heartbeat_at < status.failed_at)
        and now - status.failed_at < timedelta(seconds=backoff_seconds(max(1, status.crashes)))
    )


def coordinator_stopped(connector_id: int, epoch: int) -> None:
    """A coordinator that exits cleanly lets the supervisor replace it at once."""
    CoordinatorStatus.objects.filter(connector_id=connector_id, epoch=epoch).update(
        heartbeat_at=None, requested_at=None
    )


def assign_tasks(
    connector: Connector, partitions: Sequence[TopicPartition], *, coordinated: bool = True
) -> list[ConnectorTask]:
    """Spread partitions round-robin over the connector's tasks; restart tasks whose share changed.

    A changed share, or a new config generation, bumps the task's epoch: the
    process running the old epoch stops at its next heartbeat, and a
    partition is written by one live participant at a time (its old owner's
    unreported writes are never committed: the coordinator takes the first
    status per partition, with the ledger's start offset).

    Without a coordinator (``coordinated=False``: the mirror, whose tasks
    commit on their own) nothing refuses an old owner's last writes, so the
    tasks that lose partitions are recorded in ``fence_pending``, in the
    same transaction: no task of the connector starts before they are fenced.
    None are assigned to a connector deleted meanwhile (an empty list).
    """
    count = max(1, min(connector.tasks_max, len(partitions)))
    shares = [[list(tp) for tp in sorted(partitions)[i::count]] for i in range(count)]
    with transaction.atomic():
        # The connector's row before its tasks', the order in which deleting it (its tasks go with it) and
        # failing it take them: in the other order, a connector deleted while its tasks were assigned was a
        # deadlock, and the DELETE failed with it.
        locked = Connector.objects.select_for_update().filter(pk=connector.pk).values_list("fence_pending", flat=True)
        found = list(locked)
        if not found:
            return []  # (deleted meanwhile)
        existing = {
            t.task_index: t for t in ConnectorTask.objects.select_for_update(of=("self",)).filter(connector=connector)
        }
        changed = {i for i, t in existing.items() if i >= count or t.assigned_partitions != shares[i]}
        if changed and not coordinated:
            Connector.objects.filter(pk=connector.pk).update(fence_pending=sorted(changed | set(found[0])))
        for index, task in existing.items():
            if index >= count:
                task.delete()
        tasks = []
        for index in range(count):
            task = existing.get(index) or ConnectorTask(
                connector=connector, task_index=index, generation=connector.generation
            )
            if task.pk is None or task.assigned_partitions != shares[index] or task.generation != connector.generation:
                task.assigned_partitions = shares[index]
                task.generation = connector.generation
                if task.pk is not None:
                    task.epoch = F("epoch") + 1
                    if task.state != TaskState.FAILED:
                        task.state = TaskState.RESTARTING
                task.requested_at = None
                task.save()
                task.refresh_from_db()
            tasks.append(task)
    return tasks


def fence_pending(connector_id: int) -> list[int]:
    """The task indexes to fence before the connector's tasks may start (see ``assign_tasks``)."""
    return list(Connector.objects.values_list("fence_pending", flat=True).get(pk=connector_id))


def fenced(connector_id: int, indexes: Sequence[int]) -> None:
    """These tasks' producers were fenced: their old runners can write nothing more."""
    with transaction.atomic():
        pending = Connector.objects.select_for_update().values_list("fence_pending", flat=True).get(pk=connector_id)
        Connector.objects.filter(pk=connector_id).update(fence_pending=[i for i in pending if i not in indexes])


def backoff_seconds(failures: int) -> float:
    """Restart delay after repeated crashes: 1 s, 2 s, 4 s ... up to 5 minutes."""
    return float(min(300, 2 ** max(0, failures - 1)))


def request_task(task: ConnectorTask) -> int | None:
    """The epoch to start ``task`` at, if nobody runs it; None otherwise.

    Every request is a new epoch: a worker still running an earlier one
    (slow to start, or paused) finds itself superseded at its next
    heartbeat, so two runners of one task never overlap for long, and the
    later one's staging never collides with the earlier one's.
    """
    now = timezone.now()
    if _in_backoff(task, now):
        return None
    claimed = ConnectorTask.objects.filter(_silent(now), pk=task.pk, epoch=task.epoch).update(
        requested_at=now, epoch=F("epoch") + 1, unassigned_reason=""
    )
    return task.epoch + 1 if claimed else None


def _in_backoff(task: ConnectorTask, now: datetime) -> bool:
    """A failed task waits out its restart delay before it is asked to run again."""
    return (
        task.state == TaskState.FAILED
        and task.failed_at is not None
        and now - task.failed_at < timedelta(seconds=backoff_seconds(task.failure_count))
    )


# A claimed task's warning until its runner's first heartbeat.
STARTING = "starting"


def claim_task(task_id: int, epoch: int, worker_id: str, worker_host: str) -> ConnectorTask | None:
    now = timezone.now()
    claimed = ConnectorTask.objects.filter(pk=task_id, epoch=epoch).update(
        state=TaskState.RUNNING,
        worker_id=worker_id,
        worker_host=worker_host,
        heartbeat_at=now,
        started_at=now,
        error_message="",
        error_trace="",
        unassigned_reason="",
        # (Until the runner's first heartbeat says how it is: a start that hangs, or fails, never reads as
        # healthy meanwhile.)
        warning=STARTING,
    )
    return ConnectorTask.objects.select_related("connector").get(pk=task_id) if claimed else None


def task_alive(task_id: int, epoch: int, *, partition_status: dict[str, Any], warning: str = "") -> str | None:
    """Heartbeat of a running task: the connector's desired state, or None if this epoch was superseded.
    ``warning``: what fails in the task without failing it, shown in its status ("" when nothing does).

    A STOPPED answer means the task must stop; the caller releases it.
    """
    now = timezone.now()
    task = (
        ConnectorTask.objects.filter(pk=task_id, epoch=epoch)
        .values("connector__desired_state", "connector__generation", "connector__failed_at", "generation")
        .first()
    )
    if task is None or task["connector__generation"] != task["generation"]:
        return None
    if task["connector__failed_at"] is not None:
        # Nothing of a failed connector runs (``fail_connector`` moved its tasks' epochs on; this is for a
        # beat that raced it): the runner leaves, and its row says why.
        return None
    desired = str(task["connector__desired_state"])
    if desired != DesiredState.STOPPED:
        ConnectorTask.objects.filter(pk=task_id, epoch=epoch).update(
            heartbeat_at=now,
            state=TaskState.PAUSED if desired == DesiredState.PAUSED else TaskState.RUNNING,
            partition_status=partition_status,
            warning=storable(warning),
            # Why it was not started is past once it runs (see coordinator_alive).
            unassigned_reason="",
        )
    return desired


def task_vacated(task_id: int, worker_id: str) -> None:
    """A runner that found its epoch superseded has left: the new epoch may start now.

    Only while the row still waits for its new runner (RESTARTING, last
    heartbeat ours) is the heartbeat cleared, so a runner that already took
    over is never disturbed. So is a row its connector's failure left
    FAILED or UNASSIGNED (``fail_connector``): a restart starts it at once.
    """
    ConnectorTask.objects.filter(
        pk=task_id,
        worker_id=worker_id,
        state__in=[TaskState.RESTARTING, TaskState.FAILED, TaskState.UNASSIGNED],
    ).update(heartbeat_at=None, requested_at=None)


def report_source_warnings(connector_id: int, warnings: list[str]) -> None:
    """What the supervisor found wrong with the connector's source; written only when it changed."""
    shown = [storable(w) for w in warnings]
    Connector.objects.filter(pk=connector_id).exclude(source_warnings=shown).update(source_warnings=shown)


def task_failed(task_id: int, epoch: int, error: BaseException, *, outage: bool = False) -> None:
    """The task raised ``error``: FAILED with its trace, restarted after its back-off; the MAX_CRASHES-th
    failure within CRASH_WINDOW that is not an ``outage`` fails the connector."""
    from connectors.actions.lifecycle import fail_connector

    now = timezone.now()
    # Shown in the UI and the API: a password inside a URI is hidden.
    message, trace = _described(error)
    with transaction.atomic():
        # (The task's row only: its model orders by its connector, a join that FOR UPDATE would lock too, the
        # connector's row after the task's, against assign_tasks' order: a deadlock, seen on CI.)
        task = ConnectorTask.objects.select_for_update(of=("self",)).filter(pk=task_id, epoch=epoch).first()
        if task is None:
            return
        if not outage:
            task.crashes, task.crashes_since = _crash_count(task.crashes, task.crashes_since, now)
        task.first_failed_at = task.first_failed_at or now
        task.state, task.error_message, task.error_trace, task.failed_at = TaskState.FAILED, message, trace, now
        task.failure_count += 1
        task.heartbeat_at = task.requested_at = None
        task.save()
    if not outage and task.crashes >= MAX_CRASHES:
        fail_connector(
            task.connector_id, f"task {task.task_index} failed {task.crashes} times in {CRASH_WINDOW}: {message}", trace
        )


def task_released(task_id: int, epoch: int, *, stopped: bool) -> bool:
    """A task that exits cleanly (shutdown, stop) frees its slot at once; False if its epoch was
    superseded meanwhile (the row is the new epoch's: see ``task_vacated``)."""
    return (
        ConnectorTask.objects.filter(pk=task_id, epoch=epoch).update(
            state=TaskState.STOPPED if stopped else TaskState.UNASSIGNED,
            heartbeat_at=None,
            requested_at=None,
        )
        == 1
    )


def stop_tasks(connector: Connector) -> None:
    ConnectorTask.objects.filter(connector=connector).exclude(state=TaskState.STOPPED).filter(
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=_stale_before(timezone.now()))
    ).update(state=TaskState.STOPPED)


@dataclass(frozen=True)
class Stack:
    """A `make run` on a host, as its last beat left it: its children, and whether it still beats."""

    host: str
    seen_at: datetime
    current: bool
    processes: list[StackProcess]


def stacks(now: datetime | None = None) -> list[Stack]:
    """Every host's `make run` that recorded its processes (none where the stack runs otherwise)."""
    now = now or timezone.now()
    by_host: dict[str, list[StackProcess]] = {}
    for process in StackProcess.objects.all():
        by_host.setdefault(process.host, []).append(process)
    found = []
    for host, processes in by_host.items():
        seen_at = max(p.seen_at for p in processes)
        found.append(Stack(host, seen_at, seen_at >= _stale_before(now), processes))
    return found


def stack_started(host: str) -> None:
    """A `make run` starts on ``host``: what an earlier one there left is forgotten."""
    StackProcess.objects.filter(host=host).delete()


def stack_process_started(host: str, name: str, pid: int, log_path: str) -> None:
    """A child of the stack started, or started again after it died (a restart)."""
    now = timezone.now()
    restarted = StackProcess.objects.filter(host=host, name=name).update(
        state=StackProcessState.RUNNING,
        pid=pid,
        started_at=now,
        restarts=F("restarts") + 1,
        log_path=log_path,
        seen_at=now,
    )
    if not restarted:
        StackProcess.objects.create(host=host, name=name, pid=pid, started_at=now, log_path=log_path, seen_at=now)


def stack_process_exited(host: str, name: str, exit_code: int | None) -> None:
    """A child of the stack died; it is started again after its back-off."""
    now = timezone.now()
    StackProcess.objects.filter(host=host, name=name).update(
        state=StackProcessState.RESTARTING, pid=None, last_exit_code=exit_code, last_exit_at=now, seen_at=now
    )


def stack_seen(host: str) -> None:
    """The stack on ``host`` is alive (its processes' rows are current)."""
    StackProcess.objects.filter(host=host).update(seen_at=timezone.now())


def stack_stopped(host: str) -> None:
    StackProcess.objects.filter(host=host).update(state=StackProcessState.STOPPED, pid=None, seen_at=timezone.now())
