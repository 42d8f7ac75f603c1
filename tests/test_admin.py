import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from connectors import actions
from connectors.models import Connector

pytestmark = pytest.mark.django_db

CONFIG = {"connector.class": "iceberg", "topics": "orders", "iceberg.tables": "db.orders"}


@pytest.fixture
def alice(client: Client) -> Client:
    User.objects.create_superuser("alice", "alice@example.com", "pw-alice-1234")
    client.login(username="alice", password="pw-alice-1234")
    return client


def test_admin_lists_connectors_with_their_tables(alice: Client) -> None:
    actions.create_connector("orders-sink", CONFIG)
    response = alice.get(reverse("admin:connectors_connector_changelist"))
    assert response.status_code == 200
    assert b"orders-sink" in response.content and b"db.orders" in response.content


def test_admin_form_rejects_an_invalid_config_per_key(alice: Client) -> None:
    response = alice.post(
        reverse("admin:connectors_connector_add"),
        {
            "name": "bad",
            "config": '{"connector.class": "iceberg", "topics": "t", "iceberg.tables": "db.t", "tasks.max": "x"}',
            "desired_state": "RUNNING",
            "tasks-TOTAL_FORMS": "0",
            "tasks-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200
    assert b"tasks.max: Invalid value x" in response.content
    assert not Connector.objects.filter(name="bad").exists()


def test_admin_creates_through_the_actions(alice: Client) -> None:
    response = alice.post(
        reverse("admin:connectors_connector_add"),
        {
            "name": "good",
            "config": '{"connector.class": "iceberg", "topics": "t", "iceberg.tables": "db.t", "tasks.max": 2}',
            "desired_state": "PAUSED",
            "tasks-TOTAL_FORMS": "0",
            "tasks-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    connector = Connector.objects.get(name="good")
    assert connector.config["tasks.max"] == "2"
    assert connector.desired_state == "PAUSED"


def test_commit_history_is_read_only(alice: Client) -> None:
    assert alice.get(reverse("admin:connectors_commit_changelist")).status_code == 200
    assert alice.get(reverse("admin:connectors_commit_add")).status_code == 403


def test_pages_require_login(client: Client) -> None:
    response = client.get(reverse("connector-list"))
    assert response.status_code == 302 and reverse("login") in response["Location"]
    assert client.get(reverse("login")).status_code == 200
