"""GET /connectors/{name}/status and the state derivation behind it (connectors.api.status)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from connectors import actions
from connectors.api.status import State, connector_status
from connectors.models import Connector, CoordinatorStatus, TaskState
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
