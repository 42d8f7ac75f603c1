"""GET /connectors/{name}/status and the state derivation behind it (connectors.api.status)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.actions.lifecycle import NOT_RUNNING_FAILED
from connectors.api.status import State, connector_status
from connectors.models import Connector, ConnectorTask, CoordinatorStatus, TaskState
from tests.api.conftest import BASE, add_task, run_coordinator

pytestmark = pytest.mark.django_db

URL = f"{BASE}/connectors/orders-sink/status"


def _state(connector: Connector) -> State:
    return connector_status(Connector.objects.get(pk=connector.pk)).connector.state


def test_a_connector_with_a_live_coordinator_is_running(api: APIClient, connector: Connector) -> None:
    run_coordinator(connector, "host-1:8083")
    add_task(connector, 0)
    add_task(connector, 1, worker_id="host-2:8083")
    response = api.get(URL)
    assert response.status_code == 200
    assert response.json() == {
        "name": "orders-sink",
        "connector": {"state": "RUNNING", "worker_id": "host-1:8083"},
        "tasks": [
            {"id": 0, "state": "RUNNING", "worker_id": "worker-0:8083"},
            {"id": 1, "state": "RUNNING", "worker_id": "host-2:8083"},
        ],
        "type": "sink",
    }


def test_a_new_connector_without_a_coordinator_is_unassigned(api: APIClient, connector: Connector) -> None:
    assert api.get(URL).json()["connector"] == {"state": "UNASSIGNED", "worker_id": None}


def test_a_connector_whose_coordinator_stopped_heartbeating_is_unassigned(connector: Connector) -> None:
    run_coordinator(connector)
    CoordinatorStatus.objects.filter(connector=connector).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert _state(connector) == State.UNASSIGNED


def test_a_fenced_coordinator_means_the_connector_is_restarting(connector: Connector) -> None:
    run_coordinator(connector)
    actions.restart_connector("orders-sink")
    assert _state(connector) == State.RESTARTING
    run_coordinator(connector)
    assert _state(connector) == State.RUNNING


def test_a_paused_connector_is_paused(connector: Connector) -> None:
    run_coordinator(connector)
    actions.pause_connector("orders-sink")
    assert _state(connector) == State.PAUSED


def test_a_stopped_connector_is_stopped_and_has_no_tasks(api: APIClient, connector: Connector) -> None:
    run_coordinator(connector, "host-1:8083")
    add_task(connector, 0)
    actions.stop_connector("orders-sink")
    body = api.get(URL).json()
    assert body["connector"] == {"state": "STOPPED", "worker_id": "host-1:8083"}
    assert body["tasks"] == []


def test_a_failed_connector_reports_its_trace(api: APIClient, connector: Connector) -> None:
    run_coordinator(connector)
    actions.fail_connector(connector.pk, "catalog unreachable", "Traceback (most recent call last):\n  ...")
    body = api.get(URL).json()
    assert body["connector"]["state"] == "FAILED"
    assert body["connector"]["trace"] == "catalog unreachable\nTraceback (most recent call last):\n  ..."


def test_a_failed_connector_stays_failed_when_paused(connector: Connector) -> None:
    actions.fail_connector(connector.pk, "boom")
    actions.pause_connector("orders-sink")
    assert _state(connector) == State.FAILED


def test_a_failed_task_reports_its_trace_and_others_do_not(api: APIClient, connector: Connector) -> None:
    run_coordinator(connector)
    add_task(connector, 0)
    add_task(connector, 1, TaskState.FAILED, error_message="bad record", error_trace="ValueError: bad record")
    tasks = api.get(URL).json()["tasks"]
    assert "trace" not in tasks[0]
    assert tasks[1] == {"id": 1, "state": "FAILED", "worker_id": "worker-1:8083", "trace": "ValueError: bad record"}


def test_a_task_whose_worker_stopped_heartbeating_is_unassigned(connector: Connector) -> None:
    add_task(connector, 0, heartbeat_at=timezone.now() - timedelta(minutes=5))
    add_task(connector, 1, TaskState.UNASSIGNED, worker_id="")
    tasks = connector_status(Connector.objects.get(pk=connector.pk)).tasks
    assert [(t.state, t.worker_id) for t in tasks] == [
        (State.UNASSIGNED, "worker-0:8083"),
        (State.UNASSIGNED, None),
    ]


def test_stopped_task_rows_are_not_listed(connector: Connector) -> None:
    add_task(connector, 0)
    add_task(connector, 1, TaskState.STOPPED)
    assert [t.id for t in connector_status(Connector.objects.get(pk=connector.pk)).tasks] == [0]


def test_status_of_an_unknown_connector_is_a_404(api: APIClient) -> None:
    assert api.get(f"{BASE}/connectors/nope/status").json() == {
        "error_code": 404,
        "message": "Connector nope not found",
    }


def running_tasks(connector: Connector, count: int) -> list[tuple[int, int]]:
    """``count`` tasks started and heartbeating, through the runtime_state functions the supervisor and a
    task runner call; (row id, epoch) of each runner."""
    partitions = [("orders", p) for p in range(count)]
    runners = []
    for task in runtime_state.assign_tasks(Connector.objects.get(pk=connector.pk), partitions):
        epoch = runtime_state.request_task(task)
        assert epoch is not None
        assert runtime_state.claim_task(task.pk, epoch, f"worker-{task.task_index}:1", "localhost") is not None
        assert runtime_state.task_alive(task.pk, epoch, partition_status={}) == "RUNNING"
        runners.append((task.pk, epoch))
    return runners


NOT_JSON = "record orders/1@10 cannot be converted: the value is not JSON: 'x' (errors.tolerance=none)"


def test_a_record_a_task_cannot_convert_fails_that_task_and_stops_the_others(
    api: APIClient, make_connector: Callable[..., Connector]
) -> None:
    connector = make_connector(**{"tasks.max": "2"})
    run_coordinator(connector, "host-1:8083")
    runners = running_tasks(connector, 2)
    # What the coordinator's ledger does (workers.runtime.DjangoLedger.failed) when task 1's WRITE_STATUS
    # says a record cannot be converted.
    actions.fail_connector(connector.pk, NOT_JSON, task_index=1)
    body = api.get(URL).json()
    assert body["connector"]["state"] == "FAILED"
    assert body["connector"]["trace"] == f"task 1: {NOT_JSON}"
    # As in Kafka Connect, the task that met the record is FAILED with the reason; the other does not run.
    assert body["tasks"] == [
        {"id": 0, "state": "UNASSIGNED", "worker_id": "worker-0:1", "trace": NOT_RUNNING_FAILED},
        {"id": 1, "state": "FAILED", "worker_id": "worker-1:1", "trace": NOT_JSON},
    ]
    # Their runners find their epochs superseded at the next heartbeat, and leave; rows and status stay.
    for index, (task_id, epoch) in enumerate(runners):
        assert runtime_state.task_alive(task_id, epoch, partition_status={}) is None
        runtime_state.task_vacated(task_id, f"worker-{index}:1")
    assert not ConnectorTask.objects.filter(connector=connector, heartbeat_at__isnull=False).exists()
    assert [t["state"] for t in api.get(URL).json()["tasks"]] == ["UNASSIGNED", "FAILED"]


def test_a_failure_not_of_one_task_leaves_no_task_running(make_connector: Callable[..., Connector]) -> None:
    connector = make_connector(**{"tasks.max": "2"})
    run_coordinator(connector)
    running_tasks(connector, 2)
    actions.fail_connector(connector.pk, "the coordinator crashed 5 times: boom")
    tasks = connector_status(Connector.objects.get(pk=connector.pk)).tasks
    assert [(t.state, t.trace) for t in tasks] == [(State.UNASSIGNED, NOT_RUNNING_FAILED)] * 2


def test_tasks_of_a_failed_connector_never_read_as_running(connector: Connector) -> None:
    # Rows a runner wrote before it learnt of the failure (its beat raced fail_connector) read as not running.
    add_task(connector, 0)
    add_task(connector, 1, TaskState.PAUSED)
    add_task(connector, 2, TaskState.FAILED, error_message="bad record", error_trace="ValueError: bad record")
    Connector.objects.filter(pk=connector.pk).update(failed_at=timezone.now(), failure_message="boom")
    tasks = connector_status(Connector.objects.get(pk=connector.pk)).tasks
    assert [(t.state, t.trace) for t in tasks] == [
        (State.UNASSIGNED, NOT_RUNNING_FAILED),
        (State.UNASSIGNED, NOT_RUNNING_FAILED),
        (State.FAILED, "ValueError: bad record"),
    ]


def test_a_task_of_a_failed_connector_is_told_to_stop_at_its_heartbeat(connector: Connector) -> None:
    [(task_id, epoch)] = running_tasks(connector, 1)
    # (A beat that raced the failure: the epoch is still the runner's.)
    Connector.objects.filter(pk=connector.pk).update(failed_at=timezone.now())
    assert runtime_state.task_alive(task_id, epoch, partition_status={}) is None


def test_a_restarted_connector_whose_coordinator_had_stopped_is_restarting(connector: Connector) -> None:
    epoch = run_coordinator(connector)
    actions.fail_connector(connector.pk, "boom")
    # The failed connector's coordinator stopped (workers.runtime.run_coordinator_supervised).
    runtime_state.coordinator_stopped(connector.pk, epoch)
    assert _state(connector) == State.FAILED
    actions.restart_connector("orders-sink")
    assert _state(connector) == State.RESTARTING
    run_coordinator(connector)
    assert _state(connector) == State.RUNNING


def test_a_restart_waiting_for_a_slot_is_unassigned_saying_why(connector: Connector) -> None:
    epoch = run_coordinator(connector)
    runtime_state.coordinator_stopped(connector.pk, epoch)
    actions.restart_connector("orders-sink")
    runtime_state.waiting_for_room(connector.pk, True, [], "no worker has a free slot: 4/4 used on w")
    status = connector_status(Connector.objects.get(pk=connector.pk)).connector
    assert (status.state, status.trace) == (State.UNASSIGNED, "no worker has a free slot: 4/4 used on w")
