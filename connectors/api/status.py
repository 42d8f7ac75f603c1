"""The Kafka Connect status of a connector and its tasks, derived from the rows
the runtime keeps: the desired state, the recorded failure, the coordinator's
heartbeat and epoch, and the task rows.

The REST API and the web UI both call ``connector_status`` so they never
disagree about what "RUNNING" means.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.utils import timezone

from connectors.actions.lifecycle import NOT_RUNNING_FAILED
from connectors.config.plugins import coordinated
from connectors.models import Connector, ConnectorTask, CoordinatorStatus, DesiredState, TaskState


class State(StrEnum):
    """The states Kafka Connect reports for connectors and tasks."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    UNASSIGNED = "UNASSIGNED"
    RESTARTING = "RESTARTING"


@dataclass(frozen=True)
class ComponentStatus:
    state: State
    worker_id: str | None
    trace: str = ""

    def to_connect(self) -> dict[str, Any]:
        body: dict[str, Any] = {"state": self.state.value, "worker_id": self.worker_id}
        # Connect leaves "trace" out unless there is one.
        if self.trace:
            body["trace"] = self.trace
        return body


@dataclass(frozen=True, kw_only=True)
class TaskStatus(ComponentStatus):
    id: int

    def to_connect(self) -> dict[str, Any]:
        return {"id": self.id, **super().to_connect()}


@dataclass(frozen=True)
class ConnectorStatus:
    name: str
    connector: ComponentStatus
    tasks: tuple[TaskStatus, ...]

    def to_connect(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "connector": self.connector.to_connect(),
            "tasks": [task.to_connect() for task in self.tasks],
            "type": "sink",
        }


def _trace(message: str, trace: str) -> str:
    if trace and message and message not in trace:
        return f"{message}\n{trace}"
    return trace or message


def _alive(heartbeat_at: datetime | None, now: datetime) -> bool:
    # A worker that stopped heartbeating has died or lost its connection: what
    # it ran is no longer running anywhere until the supervisor reassigns it.
    return heartbeat_at is not None and now - heartbeat_at <= timedelta(seconds=settings.HEARTBEAT_TIMEOUT_SECONDS)


def _coordinator(connector: Connector) -> CoordinatorStatus | None:
    try:
        return connector.coordinator
    except CoordinatorStatus.DoesNotExist:
        return None


def visible_tasks(connector: Connector) -> list[ConnectorTask]:
    """The tasks Connect would list: none for a stopped connector, and no stopped task rows."""
    if connector.desired_state == DesiredState.STOPPED:
        return []
    return sorted(
        (task for task in connector.tasks.all() if task.state != TaskState.STOPPED), key=lambda t: t.task_index
    )


def connector_component_status(connector: Connector, *, now: datetime | None = None) -> ComponentStatus:
    now = now or timezone.now()
    coordinator = _coordinator(connector)
    worker_id = (coordinator.worker_id or None) if coordinator else None
    if connector.desired_state == DesiredState.STOPPED:
        return ComponentStatus(State.STOPPED, worker_id)
    # A failure stays until a restart clears it; pausing does not.
    if connector.failed_at is not None:
        return ComponentStatus(State.FAILED, worker_id, _trace(connector.failure_message, connector.failure_trace))
    if connector.desired_state == DesiredState.PAUSED:
        return ComponentStatus(State.PAUSED, worker_id)
    if not coordinated(connector.connector_class):
        # No coordinator (the mirror): the connector runs where its tasks do, and they carry the state.
        worker_id = next((t.worker_id for t in visible_tasks(connector) if t.worker_id), None)
        return ComponentStatus(State.RUNNING, worker_id, "\n".join(connector.source_warnings))
    if coordinator is None:
        return ComponentStatus(State.UNASSIGNED, worker_id)
    # A restart, a config change or a stop/resume bumps the connector's epoch;
    # until a coordinator takes over at the new epoch the old one is fenced,
    # or (one that had stopped: a failed connector's) none runs yet. Unless
    # something keeps the new one from starting (a crash's back-off, no free
    # slot): then it is UNASSIGNED, saying why.
    why_not = "" if _alive(coordinator.heartbeat_at, now) else _why_not_running(coordinator)
    if coordinator.epoch < connector.coordinator_epoch and not why_not:
        return ComponentStatus(State.RESTARTING, worker_id)
    if not _alive(coordinator.heartbeat_at, now):
        return ComponentStatus(State.UNASSIGNED, worker_id, why_not)
    # Connect reports a trace for failures only; a running connector whose
    # source has a problem (a missing topic), or whose commits wait for a
    # catalog that cannot be reached, says so the same way.
    outage = coordinator_outage(connector)
    return ComponentStatus(
        State.RUNNING, worker_id, "\n".join([*([outage] if outage else []), *connector.source_warnings])
    )


def _why_not_running(coordinator: CoordinatorStatus | None) -> str:
    """Why no coordinator runs: its last crash, if it has not run since; or why none was started."""
    if coordinator is None:
        return ""
    crashed = coordinator.failed_at
    if crashed is not None and (coordinator.heartbeat_at is None or coordinator.heartbeat_at < crashed):
        since = coordinator.crashes_since
        times = f" ({coordinator.crashes} times since {since:%H:%M:%S})" if coordinator.crashes > 1 and since else ""
        message = (
            f"the coordinator crashed at {crashed:%Y-%m-%d %H:%M:%S %Z}{times} and is restarted after a back-off: "
            f"{coordinator.error_message}"
        )
        return _trace(message, coordinator.error_trace)
    return coordinator.unassigned_reason


def coordinator_outage(connector: Connector) -> str:
    """The service the connector's commits wait for (its catalog cannot be reached), if any."""
    coordinator = _coordinator(connector)
    return coordinator.sink_warning if coordinator is not None else ""


def task_status(task: ConnectorTask, *, now: datetime | None = None) -> TaskStatus:
    now = now or timezone.now()
    worker_id = task.worker_id or None
    if task.state == TaskState.FAILED:
        return TaskStatus(State.FAILED, worker_id, _trace(task.error_message, task.error_trace), id=task.task_index)
    if task.state in (TaskState.RUNNING, TaskState.PAUSED) and not _alive(task.heartbeat_at, now):
        return TaskStatus(State.UNASSIGNED, worker_id, task.unassigned_reason, id=task.task_index)
    if task.state in (TaskState.UNASSIGNED, TaskState.RESTARTING):
        reason = task.unassigned_reason
    else:
        # (A running task's trace says what fails in it without failing it, as a running connector's does.)
        reason = task.warning if task.state == TaskState.RUNNING else ""
    return TaskStatus(State(task.state), worker_id, reason, id=task.task_index)


def _of_failed_connector(task: TaskStatus) -> TaskStatus:
    """Nothing of a FAILED connector runs (``fail_connector`` stops its tasks): a task that still reads as
    running (a runner that has not yet seen the failure at its heartbeat) is UNASSIGNED, never healthy."""
    if task.state in (State.RUNNING, State.PAUSED, State.RESTARTING):
        return replace(task, state=State.UNASSIGNED, trace=NOT_RUNNING_FAILED)
    return task


def connector_status(connector: Connector, *, now: datetime | None = None) -> ConnectorStatus:
    """Status of the connector and its tasks.

    Reads ``connector.coordinator`` and ``connector.tasks``: select and
    prefetch them when building many statuses.
    """
    now = now or timezone.now()
    component = connector_component_status(connector, now=now)
    tasks = tuple(task_status(task, now=now) for task in visible_tasks(connector))
    if component.state is State.FAILED:
        tasks = tuple(_of_failed_connector(task) for task in tasks)
    return ConnectorStatus(name=connector.name, connector=component, tasks=tasks)


def restarting(status: ConnectorStatus, *, connector: bool, tasks: Iterable[int]) -> ConnectorStatus:
    """``status`` as Kafka Connect answers a restart: what is being restarted shows RESTARTING (the
    connector if ``connector``, and the tasks of these indexes), the rest as it is."""
    indexes = set(tasks)
    return replace(
        status,
        connector=replace(status.connector, state=State.RESTARTING, trace="") if connector else status.connector,
        tasks=tuple(
            replace(task, state=State.RESTARTING, trace="") if task.id in indexes else task for task in status.tasks
        ),
    )
