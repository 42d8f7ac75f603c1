"""One health word per connector, honest about its tasks.

A connector that is asked to run but whose tasks fail, or whose workers went
silent, must not read as RUNNING: that is the most common complaint about
Kafka Connect UIs. The rollup starts from the Kafka Connect status the REST
API reports (``connectors.api.status``, so the UI and the API never disagree
on a state) and folds the tasks into it, naming the first reason found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from connectors.api.status import ConnectorStatus, State, TaskStatus, coordinator_outage
from connectors.models import Connector
from connectors.templatetags.sinkadmin_ui import period


class Health(StrEnum):
    FAILED = "failed"
    DEGRADED = "degraded"
    # Running, but something about its source needs a person (a topic that does not exist).
    WARNING = "warning"
    RESTARTING = "restarting"
    UNASSIGNED = "unassigned"
    PAUSED = "paused"
    STOPPED = "stopped"
    HEALTHY = "healthy"

    @property
    def rank(self) -> int:
        """Sort key: the states that need a person come first."""
        return list(Health).index(self)

    @property
    def label(self) -> str:
        return self.value.capitalize()


@dataclass(frozen=True)
class HealthRollup:
    health: Health
    reason: str


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def rollup(
    connector: Connector,
    status: ConnectorStatus,
    last_abort: str | None = None,
    dead_lettered: tuple[int, timedelta] | None = None,
    maintenance_failed: Sequence[str] = (),
) -> HealthRollup:
    """``last_abort``: the error of the connector's latest decided commit, if it was aborted;
    ``dead_lettered``: the records its commits dead-lettered in a recent window, and the window;
    ``maintenance_failed``: why the latest maintenance run of each of its tables failed, for those that did."""
    state = status.connector.state
    if state is State.STOPPED:
        return HealthRollup(Health.STOPPED, "stopped by a user")
    if state is State.FAILED:
        return HealthRollup(Health.FAILED, first_line(connector.failure_message) or "the connector failed")
    if state is State.PAUSED:
        return HealthRollup(Health.PAUSED, "paused by a user")
    if state is State.RESTARTING:
        return HealthRollup(Health.RESTARTING, "waiting for a coordinator at the new epoch")
    if state is State.UNASSIGNED:
        return HealthRollup(
            Health.UNASSIGNED, status.connector.trace or "no live coordinator: waiting for a worker to take it"
        )

    tasks = status.tasks
    failed = [t for t in tasks if t.state is State.FAILED]
    if failed and len(failed) == len(tasks):
        return HealthRollup(Health.FAILED, _task_reason(failed[0]))
    if failed:
        return HealthRollup(Health.DEGRADED, f"{len(failed)} of {len(tasks)} tasks failed; {_task_reason(failed[0])}")
    outage = coordinator_outage(connector)
    if outage:
        # Commits wait for the catalog (retried with a back-off); nothing is
        # lost meanwhile, and it recovers by itself: a warning, not a fault.
        return HealthRollup(Health.WARNING, f"commits are waiting: {first_line(outage)}")
    if last_abort is not None and not idle_tasks(tasks):
        # Every runner is up and yet nothing lands: a table, the catalog or
        # the data stops each commit (retried every interval).
        return HealthRollup(Health.DEGRADED, f"the last commit was aborted: {first_line(last_abort)}")
    if connector.source_warnings:
        more = len(connector.source_warnings) - 1
        return HealthRollup(Health.WARNING, connector.source_warnings[0] + (f" (and {more} more)" if more else ""))
    if not tasks:
        return HealthRollup(Health.UNASSIGNED, "no task has been assigned yet")
    restarting = [t for t in tasks if t.state is State.RESTARTING]
    if restarting:
        return HealthRollup(Health.RESTARTING, f"{len(restarting)} of {len(tasks)} tasks restarting")
    idle = idle_tasks(tasks)
    if idle and len(idle) == len(tasks):
        return HealthRollup(Health.UNASSIGNED, first_line(idle[0].trace) or "no task is running on a live worker")
    if idle:
        why = first_line(idle[0].trace) or "no live worker"
        return HealthRollup(
            Health.DEGRADED, f"{len(idle)} of {len(tasks)} tasks not running (task {idle[0].id}: {why})"
        )
    if maintenance_failed:
        # Commits land, but a table is not maintained (compaction, expiry): retried every maintenance
        # interval; a warning until a run succeeds.
        more = len(maintenance_failed) - 1
        return HealthRollup(
            Health.WARNING,
            first_line(maintenance_failed[0]) + (f" (and {more} more table{'s' if more > 1 else ''})" if more else ""),
        )
    warned = [t for t in tasks if t.trace]
    if warned:
        # Running, and something in it fails without failing it (a mirror's checkpoints): a warning.
        return HealthRollup(Health.WARNING, _task_reason(warned[0]))
    if dead_lettered is not None and dead_lettered[0]:
        # errors.tolerance=all goes on past bad records, but a run of them is worth a look (a transform's
        # config, a producer's change): a warning while recent commits dead-letter any.
        count, window = dead_lettered
        return HealthRollup(
            Health.WARNING,
            f"{count:,} record{'s' if count != 1 else ''} dead-lettered in the last {period(window)} "
            "(errors.tolerance=all): see the commits",
        )
    return HealthRollup(Health.HEALTHY, f"all {len(tasks)} tasks running")


def idle_tasks(tasks: tuple[TaskStatus, ...]) -> list[TaskStatus]:
    return [t for t in tasks if t.state is not State.RUNNING]


def _task_reason(task: TaskStatus) -> str:
    return f"task {task.id}: {first_line(task.trace) or 'failed, no reason recorded'}"
