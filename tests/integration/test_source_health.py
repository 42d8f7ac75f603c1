"""A connector whose source has nothing to read never shows as healthy: a topic that does not
exist, one deleted under the connector, a regex that matches nothing. The supervisor finds them
in the real broker's metadata; the API status and the UI say which and why."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.api.status import connector_status
from connectors.models import Connector
from connectors.ui.health import Health, rollup
from tests.integration.conftest import sink_config
from tests.integration.helpers import create_topic, wait_until
from workers.supervisor import Supervisor

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def supervise() -> None:
    """One supervisor step; the coordinator it asks for is taken as a live one takes it (tasks do not matter here)."""
    runtime_state.worker_heartbeat("connectors@test", "localhost", 16, timezone.now())

    def take_lease(connector_id: int) -> None:
        actions.take_coordinator_lease(connector_id, "worker-0:8083")

    Supervisor(start_coordinator=take_lease, start_task=lambda _t, _e: None).step()


def shown(name: str, signed_in: Client, operator_api: APIClient) -> tuple[Health, str, str]:
    """The health and reason the connector's page shows, and the API status's connector trace."""
    connector = Connector.objects.get(name=name)
    health = rollup(connector, connector_status(connector))
    page = signed_in.get(reverse("connector-detail", args=[name])).content.decode()
    assert health.reason.replace("'", "&#x27;") in page
    trace = operator_api.get(f"/api/connect/connectors/{name}/status").json()["connector"].get("trace", "")
    return health.health, health.reason, trace


def test_a_topic_that_does_not_exist_is_a_warning_until_it_is_created(
    kafka_bootstrap: str, topic_name: str, signed_in: Client, operator_api: APIClient
) -> None:
    actions.create_connector("missing", sink_config(topic_name, "db.missing"))
    supervise()
    health, reason, trace = shown("missing", signed_in, operator_api)
    assert health is Health.WARNING
    assert reason == f"topic '{topic_name}' does not exist (or was deleted): nothing to read from it"
    assert trace == reason

    create_topic(kafka_bootstrap, topic_name, 2)
    supervise()
    assert Connector.objects.get(name="missing").source_warnings == []
    assert shown("missing", signed_in, operator_api)[0] is not Health.WARNING


def test_a_topic_deleted_under_a_connector_is_a_warning(
    kafka_bootstrap: str, topic_name: str, signed_in: Client, operator_api: APIClient
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    actions.create_connector("deleted", sink_config(topic_name, "db.deleted"))
    supervise()
    assert Connector.objects.get(name="deleted").source_warnings == []

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # (kept until the delete is answered)
    admin.delete_topics([topic_name])[topic_name].result(30)

    def warned() -> bool:
        supervise()  # (the broker's metadata may lag its delete)
        return bool(Connector.objects.get(name="deleted").source_warnings)

    wait_until(warned, 30, "the supervisor to see the topic gone")
    health, reason, trace = shown("deleted", signed_in, operator_api)
    assert health is Health.WARNING and f"topic '{topic_name}' does not exist" in reason and reason in trace


def test_a_regex_that_matches_no_topic_is_a_warning(
    kafka_bootstrap: str, topic_name: str, signed_in: Client, operator_api: APIClient
) -> None:
    config = sink_config(topic_name, "db.regex")
    del config["topics"]
    actions.create_connector("regex", {**config, "topics.regex": f"{topic_name}-.*"})
    supervise()
    health, reason, _ = shown("regex", signed_in, operator_api)
    assert (health, reason) == (Health.WARNING, f"topics.regex '{topic_name}-.*' matches no topic")
