"""Claims and heartbeats of the runtime against real PostgreSQL: safe under races."""

from datetime import timedelta

import pytest
from django.utils import timezone

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.models import ConnectorTask, TaskState

pytestmark = pytest.mark.django_db

CONFIG = {"connector.class": "iceberg", "topics": "orders", "iceberg.tables": "db.orders", "tasks.max": "2"}
PARTITIONS = [("orders", 0), ("orders", 1), ("orders", 2)]


def claimed_task() -> tuple[ConnectorTask, int]:
    """Task 0 of a new connector, claimed by worker "w1"."""
    connector = actions.create_connector("c", CONFIG)
    task = runtime_state.assign_tasks(connector, PARTITIONS)[0]
    epoch = runtime_state.request_task(task)
    assert epoch is not None
    runtime_state.claim_task(task.pk, epoch, "w1", "h")
    return task, epoch


def test_partitions_are_spread_round_robin_over_the_tasks() -> None:
    connector = actions.create_connector("c", CONFIG)
    tasks = runtime_state.assign_tasks(connector, PARTITIONS)
    assert [t.assigned_partitions for t in tasks] == [[["orders", 0], ["orders", 2]], [["orders", 1]]]


def test_a_task_is_requested_once_until_its_heartbeat_goes_stale() -> None:
    connector = actions.create_connector("c", CONFIG)
    task = runtime_state.assign_tasks(connector, PARTITIONS)[0]
    epoch = runtime_state.request_task(task)
    assert epoch == task.epoch + 1
    task.refresh_from_db()
    assert runtime_state.request_task(task) is None
    ConnectorTask.objects.filter(pk=task.pk).update(requested_at=timezone.now() - timedelta(hours=1))
    task.refresh_from_db()
    assert runtime_state.request_task(task) == epoch + 1


def test_a_superseded_runner_cannot_claim_or_heartbeat() -> None:
    connector = actions.create_connector("c", CONFIG)
    task = runtime_state.assign_tasks(connector, PARTITIONS)[0]
    first = runtime_state.request_task(task)
    assert first is not None
    assert runtime_state.claim_task(task.pk, first, "w1", "h") is not None
    ConnectorTask.objects.filter(pk=task.pk).update(heartbeat_at=None, requested_at=None)
    task.refresh_from_db()
    second = runtime_state.request_task(task)
    assert second == first + 1
    assert runtime_state.task_alive(task.pk, first, partition_status={}) is None
    assert runtime_state.claim_task(task.pk, first, "w1", "h") is None
    assert runtime_state.claim_task(task.pk, second, "w2", "h") is not None
    assert runtime_state.task_alive(task.pk, second, partition_status={"orders/0": {}}) == "RUNNING"


def test_a_config_change_stops_the_running_task_generation() -> None:
    task, epoch = claimed_task()
    actions.update_config("c", {**CONFIG, "iceberg.control.commit.interval-ms": "1000"})
    assert runtime_state.task_alive(task.pk, epoch, partition_status={}) is None


def test_crashing_tasks_back_off_exponentially() -> None:
    task, epoch = claimed_task()
    for _ in range(4):
        runtime_state.task_failed(task.pk, epoch, RuntimeError("boom"))
    task.refresh_from_db()
    assert (
        task.state == TaskState.FAILED
        and "RuntimeError: boom" in task.error_message
        and "Traceback" not in task.error_message
    )
    assert runtime_state.backoff_seconds(task.failure_count) == 8
    assert runtime_state.request_task(task) is None
    ConnectorTask.objects.filter(pk=task.pk).update(failed_at=timezone.now() - timedelta(seconds=9))
    task.refresh_from_db()
    assert runtime_state.request_task(task) == epoch + 1


def test_one_coordinator_is_requested_at_a_time() -> None:
    connector = actions.create_connector("c", CONFIG)
    assert runtime_state.request_coordinator(connector.pk)
    assert not runtime_state.request_coordinator(connector.pk)


def test_a_paused_connector_shows_its_tasks_paused() -> None:
    task, epoch = claimed_task()
    actions.pause_connector("c")
    assert runtime_state.task_alive(task.pk, epoch, partition_status={}) == "PAUSED"
    assert ConnectorTask.objects.get(pk=task.pk).state == TaskState.PAUSED


def test_a_superseded_runner_hands_over_at_once_but_never_disturbs_its_successor() -> None:
    task, epoch = claimed_task()
    runtime_state.task_alive(task.pk, epoch, partition_status={})
    actions.restart_task("c", 0)  # new epoch, RESTARTING, old heartbeat still fresh
    task.refresh_from_db()
    assert runtime_state.request_task(task) is None
    runtime_state.task_vacated(task.pk, "w1")
    task.refresh_from_db()
    new_epoch = runtime_state.request_task(task)
    assert new_epoch is not None
    runtime_state.claim_task(task.pk, new_epoch, "w2", "h")
    runtime_state.task_vacated(task.pk, "w1")  # a late exit of the old runner
    assert ConnectorTask.objects.get(pk=task.pk).heartbeat_at is not None
