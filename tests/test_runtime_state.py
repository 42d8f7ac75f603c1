"""Claims and heartbeats of the runtime against real PostgreSQL: safe under races."""

from datetime import timedelta

import pytest
from django.utils import timezone

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.api.status import connector_status
from connectors.models import Connector, ConnectorTask, CoordinatorStatus, TaskState

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


def test_a_runner_that_ends_on_its_own_after_its_partitions_moved_is_not_released_but_hands_over() -> None:
    # (A mirror's task fenced by the supervisor ends without its heartbeat having said it was superseded.)
    task, epoch = claimed_task()
    runtime_state.task_alive(task.pk, epoch, partition_status={})
    connector = Connector.objects.get(name="c")
    runtime_state.assign_tasks(connector, [("alpha", 0), *PARTITIONS])  # task 0's share changes: a new epoch
    assert not runtime_state.task_released(task.pk, epoch, stopped=False)
    assert ConnectorTask.objects.get(pk=task.pk).state == TaskState.RESTARTING
    runtime_state.task_vacated(task.pk, "w1")
    task.refresh_from_db()
    assert runtime_state.request_task(task) is not None  # at once, not after the old heartbeat goes stale


def crash(message: str) -> ValueError:
    """An exception as a runner raises it: with its traceback."""
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


def test_a_crashed_coordinator_shows_why_waits_out_its_back_off_and_fails_the_connector_when_it_keeps_crashing() -> (
    None
):
    connector = actions.create_connector("c", CONFIG)
    runtime_state.coordinator_crashed(connector.pk, crash("Could not find field with name id"), outage=False)
    status = connector_status(Connector.objects.get(pk=connector.pk))
    assert status.connector.state == "UNASSIGNED"
    assert "the coordinator crashed at" in status.connector.trace
    assert "ValueError: Could not find field with name id" in status.connector.trace
    assert "Traceback" in status.connector.trace
    # In its back-off, it is not asked to run again.
    assert runtime_state.runners_to_start(connector.pk, [])[0] is False
    CoordinatorStatus.objects.filter(connector=connector).update(failed_at=timezone.now() - timedelta(minutes=5))
    assert runtime_state.runners_to_start(connector.pk, [])[0] is True
    for _ in range(runtime_state.MAX_CRASHES - 1):
        runtime_state.coordinator_crashed(connector.pk, crash("Could not find field with name id"), outage=False)
    failed = connector_status(Connector.objects.get(pk=connector.pk)).connector
    assert failed.state == "FAILED"
    assert f"the coordinator crashed {runtime_state.MAX_CRASHES} times" in failed.trace
    assert "Could not find field with name id" in failed.trace
    # A restart starts afresh: one more crash does not fail it again.
    actions.restart_connector("c")
    runtime_state.coordinator_crashed(connector.pk, crash("again"), outage=False)
    assert connector_status(Connector.objects.get(pk=connector.pk)).connector.state == "UNASSIGNED"


def test_crashes_that_are_outages_are_restarted_for_as_long_as_they_last() -> None:
    connector = actions.create_connector("c", CONFIG)
    for _ in range(runtime_state.MAX_CRASHES * 2):
        runtime_state.coordinator_crashed(connector.pk, crash("broker down"), outage=True)
    status = connector_status(Connector.objects.get(pk=connector.pk)).connector
    assert status.state == "UNASSIGNED" and "broker down" in status.trace


def test_crashes_are_counted_within_a_window() -> None:
    connector = actions.create_connector("c", CONFIG)
    for _ in range(runtime_state.MAX_CRASHES - 1):
        runtime_state.coordinator_crashed(connector.pk, crash("flaky"), outage=False)
    CoordinatorStatus.objects.filter(connector=connector).update(
        crashes_since=timezone.now() - runtime_state.CRASH_WINDOW - timedelta(seconds=1)
    )
    runtime_state.coordinator_crashed(connector.pk, crash("flaky"), outage=False)
    assert Connector.objects.get(pk=connector.pk).failed_at is None
    assert CoordinatorStatus.objects.get(connector=connector).crashes == 1


def test_a_task_that_keeps_failing_fails_its_connector() -> None:
    task, epoch = claimed_task()
    for _ in range(runtime_state.MAX_CRASHES):
        runtime_state.task_failed(task.pk, epoch, crash("table db.orders has no column id"))
        assert ConnectorTask.objects.get(pk=task.pk).state == TaskState.FAILED
    connector = Connector.objects.get(pk=task.connector_id)
    assert connector.failed_at is not None
    assert f"task 0 failed {runtime_state.MAX_CRASHES} times" in connector.failure_message


@pytest.mark.django_db(transaction=True)
def test_a_task_fails_while_its_connector_is_locked_without_waiting_for_it() -> None:
    """A task's failure locks its task's row only. Its model orders by its connector, a join that FOR UPDATE
    locked too, after the task's row: against the supervisor's order (the connector's row, then its tasks'),
    a deadlock, which PostgreSQL broke by failing the task's record of its own failure (seen on CI)."""
    import threading

    from django.db import connection, transaction

    connector = actions.create_connector("c", CONFIG)
    [task] = runtime_state.assign_tasks(connector, PARTITIONS[:1], coordinated=True)
    epoch = runtime_state.request_task(task)
    assert epoch is not None
    recorded = threading.Event()
    failed: list[BaseException] = []

    def fail() -> None:
        try:
            runtime_state.task_failed(task.pk, epoch, RuntimeError("boom"))
            recorded.set()
        except BaseException as exc:  # (reported below, with the thread's own connection closed)
            failed.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        Connector.objects.select_for_update().get(pk=connector.pk)  # (as the supervisor's assignment does)
        worker = threading.Thread(target=fail)
        worker.start()
        # The failure is recorded while the connector's row stays locked: it never waits for it.
        assert recorded.wait(30), "the task's failure waited for its connector's row"
    worker.join(30)
    assert not failed, failed
    assert ConnectorTask.objects.get(pk=task.pk).state == TaskState.FAILED


@pytest.mark.django_db(transaction=True)
def test_a_connector_deleted_while_its_tasks_are_assigned_goes_with_no_deadlock() -> None:
    """The supervisor assigns a connector's tasks (a changed share of an uncoordinated connector records the
    tasks to fence on the connector's row) while the API deletes it. Both take the connector's row before its
    tasks': the assignment waits for the delete, and finds the connector gone. (In the other order each waited
    for the other, and PostgreSQL failed the DELETE with "deadlock detected".)"""
    import threading

    from django.db import connection, transaction

    connector = actions.create_connector("c", CONFIG)
    runtime_state.assign_tasks(connector, PARTITIONS[:1], coordinated=False)
    assigned: list[list[ConnectorTask]] = []
    failed: list[BaseException] = []

    def assign() -> None:
        try:
            assigned.append(runtime_state.assign_tasks(connector, PARTITIONS, coordinated=False))
        except BaseException as exc:  # (reported below, with the thread's own connection closed)
            failed.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        # As delete_connector does: the connector's row first, then the delete, which takes its tasks' rows.
        Connector.objects.select_for_update().get(pk=connector.pk)
        supervisor = threading.Thread(target=assign)
        supervisor.start()
        with connection.cursor() as cursor:
            for _ in range(200):  # (until the assignment waits on a lock)
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
                threading.Event().wait(0.05)
        Connector.objects.get(pk=connector.pk).delete()
    supervisor.join(30)
    assert not failed, failed
    assert assigned == [[]]
    assert not Connector.objects.filter(pk=connector.pk).exists() and not ConnectorTask.objects.exists()
