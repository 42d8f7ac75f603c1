"""A password written inside a URI (a catalog's, a store's) is a secret like a ``*.password`` key:
never in an API response, a page, the admin, an export, a task's error or a log line, and kept
when the config comes back with it hidden."""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions.runtime import task_failed
from connectors.config import validate_config
from connectors.config.secrets import HIDDEN, RedactCredentials, keep_hidden_secrets, redact
from connectors.models import Connector, ConnectorTask, TaskState

PASSWORD = "Pa55-in-uri"
URI = f"postgresql+psycopg://lake:{PASSWORD}@db.example:5432/catalog"
SHOWN = f"postgresql+psycopg://lake:{HIDDEN}@db.example:5432/catalog"
CONFIG = {
    "connector.class": "iceberg",
    "topics": "orders",
    "iceberg.tables": "db.orders",
    "iceberg.catalog.uri": URI,
    "iceberg.catalog.warehouse": "s3://lake/warehouse",
}
API = "/api/connect"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (URI, SHOWN),
        ("redis://:pw@cache:6379/0", f"redis://:{HIDDEN}@cache:6379/0"),
        ("s3://key:se/cret@bucket/path", f"s3://key:{HIDDEN}@bucket/path"),  # "/" ends the authority first
        ("postgresql://u:p@ss@h/db", f"postgresql://u:{HIDDEN}@h/db"),  # an unescaped "@" hides all of it
        (
            "jdbc:postgresql://h/db?user=u&password=s3cret&ssl=true",
            f"jdbc:postgresql://h/db?user=u&password={HIDDEN}&ssl=true",
        ),
        ("Server=h;Uid=u;Pwd=s3cret;", f"Server=h;Uid=u;Pwd={HIDDEN};"),
        (f"connecting to {URI} failed: timeout", f"connecting to {SHOWN} failed: timeout"),
    ],
)
def test_a_password_inside_a_uri_is_hidden_and_the_rest_kept(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    "text",
    ["http://host:8080/path", "sc://127.0.0.1:15002", "user@example.com", "postgresql://lake@db/catalog", "a=b"],
)
def test_text_without_a_password_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_a_uri_sent_back_hidden_keeps_the_stored_password_for_its_user_even_when_edited() -> None:
    stored = {"iceberg.catalog.uri": URI}
    edited = SHOWN.replace("db.example", "db2.example")
    assert keep_hidden_secrets({"iceberg.catalog.uri": edited}, stored) == {
        "iceberg.catalog.uri": URI.replace("db.example", "db2.example")
    }
    # Another user's password is not anyone's to take.
    other = SHOWN.replace("lake:", "admin:")
    assert keep_hidden_secrets({"iceberg.catalog.uri": other}, stored) == {"iceberg.catalog.uri": other}


def test_a_hidden_password_with_none_stored_is_refused_at_its_key() -> None:
    validation = validate_config({**CONFIG, "iceberg.catalog.uri": SHOWN})
    assert validation.errors["iceberg.catalog.uri"] == [
        "the password in this URI is shown as [hidden]: type the password itself"
    ]


@pytest.fixture
def connector(db: None) -> Connector:
    connector = actions.create_connector("orders-sink", CONFIG)
    ConnectorTask.objects.create(connector=connector, task_index=0, state=TaskState.RUNNING, worker_id="w:1")
    return connector


def test_no_api_response_holds_the_password(operator_api: APIClient, connector: Connector) -> None:
    responses = [
        operator_api.get(f"{API}/connectors/orders-sink/config"),
        operator_api.get(f"{API}/connectors/orders-sink"),
        operator_api.get(f"{API}/connectors?expand=info&expand=status"),
        operator_api.get(f"{API}/connectors/orders-sink/tasks"),
        operator_api.put(f"{API}/connector-plugins/iceberg/config/validate", CONFIG, format="json"),
        operator_api.put(f"{API}/connectors/orders-sink/config", CONFIG, format="json"),
        operator_api.patch(f"{API}/connectors/orders-sink/config", {"topics": "payments"}, format="json"),
    ]
    for response in responses:
        assert response.status_code < 300, response.content
        assert PASSWORD not in response.content.decode(), response.request["PATH_INFO"]
    assert operator_api.get(f"{API}/connectors/orders-sink/config").json()["iceberg.catalog.uri"] == SHOWN


def test_the_shown_config_put_back_keeps_the_password(operator_api: APIClient, connector: Connector) -> None:
    shown = operator_api.get(f"{API}/connectors/orders-sink/config").json()
    assert operator_api.put(f"{API}/connectors/orders-sink/config", shown, format="json").status_code == 200
    connector.refresh_from_db()
    assert connector.config["iceberg.catalog.uri"] == URI
    # Edited around the hidden password: the host changes, the password stays.
    edited = {**shown, "iceberg.catalog.uri": SHOWN.replace("5432", "6432")}
    operator_api.put(f"{API}/connectors/orders-sink/config", edited, format="json")
    connector.refresh_from_db()
    assert connector.config["iceberg.catalog.uri"] == URI.replace("5432", "6432")


def test_a_new_connector_with_a_hidden_password_is_refused_at_the_key(operator_api: APIClient, db: None) -> None:
    response = operator_api.put(
        f"{API}/connectors/copy/config", {**CONFIG, "iceberg.catalog.uri": SHOWN}, format="json"
    )
    assert response.status_code == 400
    assert "iceberg.catalog.uri" in response.json()["message"]
    assert not Connector.objects.filter(name="copy").exists()


def test_no_page_export_or_admin_form_holds_the_password(signed_in: Client, connector: Connector) -> None:
    pages = [
        reverse("connector-list"),
        reverse("connector-detail", args=["orders-sink"]),
        reverse("connector-live", args=["orders-sink"]),
        reverse("connector-edit", args=["orders-sink"]),
        reverse("connector-config-export", args=["orders-sink", "json"]),
        reverse("connector-config-export", args=["orders-sink", "properties"]),
        reverse("admin:connectors_connector_change", args=[connector.pk]),
    ]
    for page in pages:
        response = signed_in.get(page)
        assert response.status_code == 200, page
        body = response.content.decode()
        assert PASSWORD not in body, page
    exported = json.loads(signed_in.get(reverse("connector-config-export", args=["orders-sink", "json"])).content)
    assert exported["iceberg.catalog.uri"] == SHOWN


def test_an_edit_in_the_form_keeps_the_password(signed_in: Client, connector: Connector) -> None:
    url = reverse("connector-edit", args=["orders-sink"])
    form = signed_in.get(url).content.decode()
    assert SHOWN in form
    catalog = {"iceberg.catalog.uri": SHOWN, "iceberg.catalog.warehouse": CONFIG["iceberg.catalog.warehouse"]}
    posted: dict[str, Any] = {
        **{f"cfg:{k}": v for k, v in CONFIG.items() if k not in catalog},
        "cfg:tasks.max": "2",
        # (Keys under a prefix are rows of key and value in the form.)
        "extra-key": list(catalog),
        "extra-value": list(catalog.values()),
    }
    review = signed_in.post(url, {**posted, "step": "review"}).content.decode()
    assert PASSWORD not in review
    assert re.findall(r'data-key="([^"]+)"', review) == ["tasks.max"]  # the URI is unchanged
    proposed = re.search(r'name="raw" value="([^"]*)"', review).group(1).replace("&quot;", '"')  # type: ignore[union-attr]
    fingerprint = re.search(r'name="fingerprint" value="(\w+)"', review).group(1)  # type: ignore[union-attr]
    signed_in.post(url, {"mode": "raw", "raw": proposed, "fingerprint": fingerprint, "step": "apply"})
    connector.refresh_from_db()
    assert (connector.config["iceberg.catalog.uri"], connector.config["tasks.max"]) == (URI, "2")


def test_an_edit_in_the_admin_keeps_the_password(signed_in: Client, connector: Connector) -> None:
    url = reverse("admin:connectors_connector_change", args=[connector.pk])
    shown = {**connector.config, "iceberg.catalog.uri": SHOWN, "tasks.max": "3"}
    task = connector.tasks.get()
    response = signed_in.post(
        url,
        {
            "name": "orders-sink",
            "config": json.dumps(shown),
            "desired_state": "RUNNING",
            "tasks-TOTAL_FORMS": "1",
            "tasks-INITIAL_FORMS": "1",
            "tasks-0-id": str(task.pk),
            "tasks-0-connector": str(connector.pk),
        },
    )
    assert response.status_code == 302, response.content.decode()
    connector.refresh_from_db()
    assert (connector.config["iceberg.catalog.uri"], connector.config["tasks.max"]) == (URI, "3")


def test_a_task_error_that_quotes_the_uri_is_recorded_without_the_password(
    operator_api: APIClient, signed_in: Client, connector: Connector
) -> None:
    task = connector.tasks.get()
    try:
        raise ConnectionError(f"could not reach the catalog at {URI}")
    except ConnectionError as exc:
        task_failed(task.pk, task.epoch, exc)
    task.refresh_from_db()
    assert SHOWN in task.error_message and SHOWN in task.error_trace
    status = operator_api.get(f"{API}/connectors/orders-sink/status").content.decode()
    page = signed_in.get(reverse("connector-detail", args=["orders-sink"])).content.decode()
    assert "could not reach the catalog" in status and PASSWORD not in status
    assert PASSWORD not in page


def test_log_lines_never_hold_the_password(settings: Any) -> None:
    """Django's handlers (and the Celery worker's, sinkadmin.celery) carry the filter."""
    assert settings.LOGGING["handlers"]["console"]["filters"] == ["redact_credentials"]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactCredentials())
    logger = logging.getLogger("tests.credentials")
    logger.addHandler(handler)
    try:
        logger.warning("catalog %s unreachable", URI)
        try:
            raise ConnectionError(URI)
        except ConnectionError:
            logger.exception("the task failed")
    finally:
        logger.removeHandler(handler)
    assert PASSWORD not in out.getvalue()
    assert f"catalog {SHOWN} unreachable" in out.getvalue() and f"ConnectionError: {SHOWN}" in out.getvalue()


def test_the_celery_workers_handlers_get_the_filter() -> None:
    from sinkadmin.celery import _redact_credentials

    logger = logging.getLogger("tests.celery-worker")
    handler = logging.StreamHandler(io.StringIO())
    logger.addHandler(handler)
    try:
        _redact_credentials(logger)
        _redact_credentials(logger)  # (signals may fire again: one filter is enough)
        assert [type(f) for f in handler.filters] == [RedactCredentials]
    finally:
        logger.removeHandler(handler)
