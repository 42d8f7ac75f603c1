"""Authentication on every endpoint, write permissions, and Connect's error shape for
401/403/404/405/415 and malformed JSON."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from connectors.models import Connector
from tests.api.conftest import BASE, CONFIG, basic

pytestmark = pytest.mark.django_db

COMMIT = uuid.UUID(int=1)
# Every Connect endpoint: (method, path, body). Checked against the OpenAPI
# document below, so a new endpoint without an auth test fails.
ENDPOINTS: list[tuple[str, str, Any]] = [
    ("get", "/", None),
    ("get", "/connectors", None),
    ("post", "/connectors", {"name": "x", "config": CONFIG}),
    ("get", "/connectors/orders-sink", None),
    ("delete", "/connectors/orders-sink", None),
    ("get", "/connectors/orders-sink/config", None),
    ("put", "/connectors/orders-sink/config", CONFIG),
    ("patch", "/connectors/orders-sink/config", {"topics": "x"}),
    ("get", "/connectors/orders-sink/status", None),
    ("get", "/connectors/orders-sink/topics", None),
    ("put", "/connectors/orders-sink/topics/reset", None),
    ("put", "/connectors/orders-sink/pause", None),
    ("put", "/connectors/orders-sink/resume", None),
    ("put", "/connectors/orders-sink/stop", None),
    ("post", "/connectors/orders-sink/restart", None),
    ("get", "/connectors/orders-sink/tasks", None),
    ("get", "/connectors/orders-sink/tasks/0/status", None),
    ("post", "/connectors/orders-sink/tasks/0/restart", None),
    ("get", "/connectors/orders-sink/offsets", None),
    ("patch", "/connectors/orders-sink/offsets", {"offsets": []}),
    ("delete", "/connectors/orders-sink/offsets", None),
    ("get", "/connectors/orders-sink/groups/billing/translated", None),
    ("get", "/connectors/orders-sink/commits", None),
    ("get", f"/connectors/orders-sink/commits/{COMMIT}", None),
    ("post", f"/connectors/orders-sink/commits/{COMMIT}/abandon", None),
    ("get", "/connectors/orders-sink/maintenance", None),
    ("get", "/connector-plugins", None),
    ("get", "/connector-plugins/iceberg/config", None),
    ("put", "/connector-plugins/iceberg/config/validate", CONFIG),
    ("get", "/workers", None),
]
WRITES = [e for e in ENDPOINTS if e[0] != "get" and not e[1].endswith("/validate")]
# Served without credentials, as probes call it (tests/api/test_health.py): it says nothing else.
PUBLIC: list[tuple[str, str, Any]] = [("get", "/health", None)]


def _call(client: APIClient, method: str, path: str, body: Any) -> Any:
    return getattr(client, method)(f"{BASE}{path}", body, format="json")


def test_the_endpoint_list_covers_every_documented_connect_operation() -> None:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    documented = {
        (method, path.removeprefix(BASE))
        for path, operations in schema["paths"].items()
        if path.startswith(BASE)
        for method in operations
    }
    listed = {
        (method, path.replace(str(COMMIT), "{commit_id}").replace("orders-sink", "{name}").replace("/0/", "/{task}/"))
        for method, path, _ in [*ENDPOINTS, *PUBLIC]
    }
    listed = {(m, p.replace("iceberg", "{plugin}").replace("/billing/", "/{group}/")) for m, p in listed}
    assert documented == listed


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_every_endpoint_requires_credentials(
    anonymous: APIClient, connector: Connector, method: str, path: str, body: Any
) -> None:
    response = _call(anonymous, method, path, body)
    assert response.status_code == 401
    assert response.json() == {"error_code": 401, "message": "Authentication credentials were not provided."}
    assert response["WWW-Authenticate"] == 'Basic realm="api"'
    assert Connector.objects.filter(name="orders-sink").exists()


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_every_endpoint_refuses_a_wrong_password(
    anonymous: APIClient, alice: object, connector: Connector, method: str, path: str, body: Any
) -> None:
    anonymous.credentials(HTTP_AUTHORIZATION=basic("alice", "wrong"))
    response = _call(anonymous, method, path, body)
    assert response.status_code == 401
    assert response.json() == {"error_code": 401, "message": "Invalid username/password."}


def test_a_token_authenticates_too(token_api: APIClient, connector: Connector) -> None:
    assert token_api.get(f"{BASE}/connectors").json() == ["orders-sink"]
    assert token_api.put(f"{BASE}/connectors/orders-sink/pause").status_code == 202


def test_a_bad_token_is_refused(anonymous: APIClient) -> None:
    anonymous.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert anonymous.get(f"{BASE}/connectors").json() == {"error_code": 401, "message": "Invalid token."}


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_a_user_without_connector_permissions_may_not_write(
    reader: APIClient, connector: Connector, method: str, path: str, body: Any
) -> None:
    response = _call(reader, method, path, body)
    assert response.status_code == 403
    assert response.json()["error_code"] == 403
    connector.refresh_from_db()
    assert connector.desired_state == "RUNNING" and connector.config == CONFIG


def test_a_user_without_connector_permissions_may_read_and_validate(reader: APIClient, connector: Connector) -> None:
    for method, path, body in ENDPOINTS:
        if method == "get" or path.endswith("/validate"):
            assert _call(reader, method, path, body).status_code in (200, 404), path


def test_changing_a_connector_does_not_allow_creating_or_deleting(changer: APIClient, connector: Connector) -> None:
    assert changer.put(f"{BASE}/connectors/orders-sink/pause").status_code == 202
    assert changer.put(f"{BASE}/connectors/orders-sink/config", CONFIG, format="json").status_code == 200
    created = changer.put(f"{BASE}/connectors/new-sink/config", CONFIG, format="json")
    assert created.json() == {"error_code": 403, "message": "You do not have permission to create connectors."}
    assert changer.post(f"{BASE}/connectors", {"name": "n", "config": CONFIG}, format="json").status_code == 403
    assert changer.delete(f"{BASE}/connectors/orders-sink").status_code == 403
    assert list(Connector.objects.values_list("name", flat=True)) == ["orders-sink"]


def test_an_unknown_route_is_a_404_in_connects_shape(api: APIClient) -> None:
    for path in ("/nope", "/connectors/orders-sink/nope", "/admin/loggers"):
        response = api.get(f"{BASE}{path}")
        assert response.status_code == 404
        assert response.json() == {"error_code": 404, "message": "HTTP 404 Not Found"}
    assert api.post(f"{BASE}/nope").status_code == 404


def test_an_unknown_route_still_requires_credentials(anonymous: APIClient) -> None:
    assert anonymous.get(f"{BASE}/nope").status_code == 401


def test_paths_with_a_trailing_slash_work_as_in_connect(api: APIClient, connector: Connector) -> None:
    assert api.get(f"{BASE}/connectors/").json() == ["orders-sink"]
    assert api.get(f"{BASE}/connectors/orders-sink/status/").json()["name"] == "orders-sink"
    assert api.put(f"{BASE}/connectors/orders-sink/pause/").status_code == 202


def test_a_method_the_path_does_not_have_is_a_405(api: APIClient, connector: Connector) -> None:
    response = api.delete(f"{BASE}/connectors/orders-sink/status")
    assert response.status_code == 405
    assert response.json() == {"error_code": 405, "message": 'Method "DELETE" not allowed.'}


def test_malformed_json_is_a_400(api: APIClient) -> None:
    response = api.post(f"{BASE}/connectors", '{"name": "x", "config": {', content_type="application/json")
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == 400
    assert body["message"].startswith("JSON parse error")


def test_a_body_that_is_not_json_is_a_415(api: APIClient) -> None:
    response = api.post(f"{BASE}/connectors", "name=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json() == {
        "error_code": 415,
        "message": 'Unsupported media type "application/x-www-form-urlencoded" in request.',
    }


def test_it_answers_json_whatever_the_client_accepts(api: APIClient) -> None:
    response = api.get(f"{BASE}/connectors", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"


def test_session_users_need_a_csrf_token_to_write(alice: Any, connector: Connector) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get(f"{BASE}/connectors").status_code == 200
    response = client.put(f"{BASE}/connectors/orders-sink/pause")
    assert response.status_code == 403
    assert "CSRF" in response.json()["message"]
