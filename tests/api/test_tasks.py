"""GET /connectors/{name}/tasks, GET .../tasks/{id}/status, POST .../tasks/{id}/restart."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from connectors import actions
from connectors.models import Connector, ConnectorTask, TaskState
from tests.api.conftest import BASE, add_task

pytestmark = pytest.mark.django_db

URL = f"{BASE}/connectors/orders-sink/tasks"


def test_it_lists_tasks_with_their_config_and_secrets_hidden(api: APIClient, connector: Connector) -> None:
    add_task(connector, 1)
    add_task(connector, 0)
    response = api.get(URL)
    assert response.status_code == 200
    body = response.json()
    assert [t["id"] for t in body] == [{"connector": "orders-sink", "task": 0}, {"connector": "orders-sink", "task": 1}]
    assert body[0]["config"]["topics"] == "orders"
    assert body[0]["config"]["name"] == "orders-sink"
    assert body[0]["config"]["iceberg.catalog.s3.secret-access-key"] == "[hidden]"


def test_a_connector_without_tasks_lists_none(api: APIClient, connector: Connector) -> None:
    assert api.get(URL).json() == []


def test_tasks_of_an_unknown_connector_is_a_404(api: APIClient) -> None:
    assert api.get(f"{BASE}/connectors/nope/tasks").status_code == 404


def test_it_gives_one_tasks_status(api: APIClient, connector: Connector) -> None:
    add_task(connector, 0, TaskState.FAILED, error_message="bad record", error_trace="")
    response = api.get(f"{URL}/0/status")
    assert response.status_code == 200
    assert response.json() == {"id": 0, "state": "FAILED", "worker_id": "worker-0:8083", "trace": "bad record"}


def test_status_of_an_unknown_task_is_a_404(api: APIClient, connector: Connector) -> None:
    response = api.get(f"{URL}/3/status")
    assert response.json() == {"error_code": 404, "message": "No status found for task orders-sink-3"}


def test_a_task_id_too_large_for_any_task_is_a_404(api: APIClient, connector: Connector) -> None:
    assert api.get(f"{URL}/99999999999999999999999/status").status_code == 404
    assert api.post(f"{URL}/99999999999999999999999/restart").status_code == 404


def test_a_task_id_that_is_not_a_number_is_an_unknown_route(api: APIClient, connector: Connector) -> None:
    assert api.get(f"{URL}/first/status").json() == {"error_code": 404, "message": "HTTP 404 Not Found"}


def test_restarting_a_task_answers_204_and_marks_it_restarting(api: APIClient, connector: Connector) -> None:
    task = add_task(connector, 0, TaskState.FAILED, error_message="bad")
    response = api.post(f"{URL}/0/restart")
    assert response.status_code == 204
    task.refresh_from_db()
    assert task.state == TaskState.RESTARTING and task.error_message == "" and task.epoch == 1


def test_restarting_an_unknown_task_is_a_404(api: APIClient, connector: Connector) -> None:
    response = api.post(f"{URL}/5/restart")
    assert response.json() == {"error_code": 404, "message": "Unknown task: orders-sink-5"}


def test_restarting_a_task_of_an_unknown_connector_is_a_404(api: APIClient) -> None:
    response = api.post(f"{BASE}/connectors/nope/tasks/0/restart")
    assert response.json() == {"error_code": 404, "message": "Connector nope not found"}


def test_a_stopped_connector_has_no_tasks(api: APIClient, connector: Connector) -> None:
    add_task(connector, 0)
    actions.stop_connector("orders-sink")
    assert api.get(URL).json() == []
    assert api.get(f"{URL}/0/status").status_code == 404
    assert ConnectorTask.objects.filter(connector=connector).count() == 1
