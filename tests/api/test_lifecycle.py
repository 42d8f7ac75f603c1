"""PUT pause/resume/stop and POST restart."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.models import Connector, ConnectorTask, DesiredState, TaskState
from tests.api.conftest import BASE, add_task, run_coordinator

pytestmark = pytest.mark.django_db

URL = f"{BASE}/connectors/orders-sink"


@pytest.mark.parametrize(
    ("verb", "code", "desired"),
    [("pause", 202, DesiredState.PAUSED), ("resume", 202, DesiredState.RUNNING), ("stop", 204, DesiredState.STOPPED)],
)
def test_it_records_the_wanted_state(
    api: APIClient, make_connector: Callable[..., Connector], verb: str, code: int, desired: DesiredState
) -> None:
    connector = make_connector(initial_state="PAUSED" if verb == "resume" else "RUNNING")
    response = api.put(f"{URL}/{verb}")
    assert response.status_code == code
    assert response.content == b""
    connector.refresh_from_db()
    assert connector.desired_state == desired


@pytest.mark.parametrize("verb", ["pause", "resume", "stop"])
def test_changing_the_state_of_an_unknown_connector_is_a_404(api: APIClient, verb: str) -> None:
    response = api.put(f"{BASE}/connectors/nope/{verb}")
    assert response.json() == {"error_code": 404, "message": "Connector nope not found"}


def test_pause_is_idempotent(api: APIClient, connector: Connector) -> None:
    assert api.put(f"{URL}/pause").status_code == 202
    assert api.put(f"{URL}/pause").status_code == 202
    assert api.get(f"{URL}/status").json()["connector"]["state"] == "PAUSED"


def test_stop_then_resume_runs_the_connector_again(api: APIClient, connector: Connector) -> None:
    api.put(f"{URL}/stop")
    assert api.get(f"{URL}/status").json()["connector"]["state"] == "STOPPED"
    api.put(f"{URL}/resume")
    connector.refresh_from_db()
    assert connector.desired_state == DesiredState.RUNNING


def test_pause_is_a_put_only(api: APIClient, connector: Connector) -> None:
    response = api.post(f"{URL}/pause")
    assert response.status_code == 405
    assert response.json() == {"error_code": 405, "message": 'Method "POST" not allowed.'}


def test_a_plain_restart_answers_204_and_clears_the_failure(api: APIClient, connector: Connector) -> None:
    actions.fail_connector(connector.pk, "boom")
    add_task(connector, 0, TaskState.FAILED, error_message="bad")
    response = api.post(f"{URL}/restart")
    assert response.status_code == 204
    assert response.content == b""
    connector.refresh_from_db()
    assert connector.failed_at is None and connector.failure_message == ""
    # Without includeTasks, the tasks are left alone.
    assert ConnectorTask.objects.get(connector=connector).state == TaskState.FAILED


def test_restart_with_include_tasks_answers_202_with_what_restarts(api: APIClient, connector: Connector) -> None:
    run_coordinator(connector, "host-1:8083")
    add_task(connector, 0)
    add_task(connector, 1, TaskState.FAILED, error_message="bad")
    response = api.post(f"{URL}/restart?includeTasks=true")
    assert response.status_code == 202
    body = response.json()
    assert body["name"] == "orders-sink" and body["type"] == "sink"
    assert body["connector"] == {"state": "RESTARTING", "worker_id": "host-1:8083"}
    assert [(t["id"], t["state"]) for t in body["tasks"]] == [(0, "RESTARTING"), (1, "RESTARTING")]


def test_restart_of_only_failed_tasks_leaves_running_ones(api: APIClient, connector: Connector) -> None:
    run_coordinator(connector)
    add_task(connector, 0)
    add_task(connector, 1, TaskState.FAILED, error_message="bad")
    response = api.post(f"{URL}/restart?includeTasks=True&onlyFailed=TRUE")
    assert response.status_code == 202
    body = response.json()
    # The connector had not failed, so it is not restarted either.
    assert body["connector"]["state"] == "RUNNING"
    assert [(t["id"], t["state"]) for t in body["tasks"]] == [(0, "RUNNING"), (1, "RESTARTING")]


def test_restart_flags_other_than_true_are_false_as_in_java(api: APIClient, connector: Connector) -> None:
    add_task(connector, 0, TaskState.FAILED)
    response = api.post(f"{URL}/restart?includeTasks=yes&onlyFailed=1")
    assert response.status_code == 204
    assert ConnectorTask.objects.get(connector=connector).state == TaskState.FAILED


def test_restart_of_an_unknown_connector_is_a_404(api: APIClient) -> None:
    assert api.post(f"{BASE}/connectors/nope/restart?includeTasks=true").status_code == 404


def test_restart_of_a_failed_connector_answers_restarting_for_it_and_its_tasks(
    api: APIClient, connector: Connector
) -> None:
    epoch = run_coordinator(connector, "host-1:8083")
    add_task(connector, 0)
    add_task(connector, 1)
    actions.fail_connector(connector.pk, "record orders/0@3 cannot be converted", task_index=1)
    # The failed connector's coordinator has stopped (workers.runtime.run_coordinator_supervised).
    runtime_state.coordinator_stopped(connector.pk, epoch)
    response = api.post(f"{URL}/restart?includeTasks=true")
    assert response.status_code == 202
    body = response.json()
    assert body["connector"] == {"state": "RESTARTING", "worker_id": "host-1:8083"}
    assert [(t["id"], t["state"]) for t in body["tasks"]] == [(0, "RESTARTING"), (1, "RESTARTING")]
    # And the status says so until a coordinator takes over at the new epoch.
    assert api.get(f"{URL}/status").json()["connector"]["state"] == "RESTARTING"


def test_restart_of_only_failed_answers_restarting_for_what_it_restarts(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector, "host-1:8083")
    add_task(connector, 0)
    add_task(connector, 1)
    actions.fail_connector(connector.pk, "record orders/0@3 cannot be converted", task_index=1)
    runtime_state.coordinator_stopped(connector.pk, epoch)
    response = api.post(f"{URL}/restart?includeTasks=true&onlyFailed=true")
    assert response.status_code == 202
    body = response.json()
    assert body["connector"]["state"] == "RESTARTING"
    # Task 0, which the failure stopped, is not restarted by this call (the supervisor starts it with the
    # connector), and no longer says the connector failed.
    assert body["tasks"] == [
        {"id": 0, "state": "UNASSIGNED", "worker_id": "worker-0:8083"},
        {"id": 1, "state": "RESTARTING", "worker_id": "worker-1:8083"},
    ]


def test_restart_of_a_connector_no_coordinator_ran_for_answers_restarting(api: APIClient, connector: Connector) -> None:
    body = api.post(f"{URL}/restart?includeTasks=true").json()
    assert body["connector"] == {"state": "RESTARTING", "worker_id": None}
