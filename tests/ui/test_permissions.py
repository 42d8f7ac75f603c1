"""Every page needs a login, and every form that writes needs a CSRF token."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from connectors.models import Connector, DesiredState

pytestmark = pytest.mark.django_db


def page_urls(name: str) -> list[str]:
    return [
        reverse("connector-list"),
        reverse("connector-create"),
        reverse("connector-detail", args=[name]),
        reverse("connector-live", args=[name]),
        reverse("connector-edit", args=[name]),
        reverse("connector-config-export", args=[name, "json"]),
        reverse("commit-history", args=[name]),
        reverse("commit-detail", args=[name, uuid.uuid4()]),
        reverse("connector-action", args=[name, "delete"]),
    ]


def test_anonymous_visitors_are_sent_to_the_login_page(
    client: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink")
    login = reverse("login")
    for url in page_urls("orders-sink"):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(f"{login}?next="), url


def test_anonymous_posts_change_nothing(client: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    for url in [
        reverse("connector-action", args=["orders-sink", "pause"]),
        reverse("connector-action", args=["orders-sink", "delete"]),
        reverse("config-validate"),
        reverse("connection-test"),
        reverse("connector-create"),
    ]:
        response = client.post(url, {"name": "x", "cfg:connector.class": "iceberg"})
        assert response.status_code == 302, url
    connector = Connector.objects.get(name="orders-sink")
    assert connector.desired_state == DesiredState.RUNNING
    assert not Connector.objects.filter(name="x").exists()


def test_the_login_page_logs_in_and_returns_to_the_page_asked_for(
    client: Client, alice_user: User, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink")
    target = reverse("connector-detail", args=["orders-sink"])
    page = client.get(reverse("login") + f"?next={target}")
    assert b'name="csrfmiddlewaretoken"' in page.content
    response = client.post(
        reverse("login"), {"username": "alice", "password": "pw-alice-1234-ui", "next": target}, follow=True
    )
    assert response.redirect_chain[-1][0] == target
    assert b"orders-sink" in response.content


@pytest.fixture
def csrf_client(alice_user: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice_user)
    return client


def test_an_action_without_a_csrf_token_is_refused(
    csrf_client: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink")
    response = csrf_client.post(reverse("connector-action", args=["orders-sink", "pause"]))
    assert response.status_code == 403
    assert Connector.objects.get(name="orders-sink").desired_state == DesiredState.RUNNING


def test_create_without_a_csrf_token_is_refused(csrf_client: Client) -> None:
    response = csrf_client.post(
        reverse("connector-create"),
        {"name": "new-sink", "cfg:connector.class": "iceberg", "cfg:topics": "t", "cfg:iceberg.tables": "db.t"},
    )
    assert response.status_code == 403
    assert not Connector.objects.filter(name="new-sink").exists()


def test_edit_and_validate_without_a_csrf_token_are_refused(
    csrf_client: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink")
    edit = csrf_client.post(
        reverse("connector-edit", args=["orders-sink"]),
        {
            "mode": "raw",
            "raw": '{"connector.class": "iceberg", "topics": "x", "iceberg.tables": "db.x"}',
            "step": "apply",
        },
    )
    assert edit.status_code == 403
    assert Connector.objects.get(name="orders-sink").config["topics"] == "orders"
    assert csrf_client.post(reverse("config-validate"), {"cfg:connector.class": "iceberg"}).status_code == 403


def test_the_same_action_with_the_token_from_the_page_is_accepted(
    csrf_client: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink")
    page = csrf_client.get(reverse("connector-detail", args=["orders-sink"]))
    token = page.context["csrf_token"]
    response = csrf_client.post(
        reverse("connector-action", args=["orders-sink", "pause"]), {"csrfmiddlewaretoken": str(token)}
    )
    assert response.status_code == 302
    assert Connector.objects.get(name="orders-sink").desired_state == DesiredState.PAUSED


def test_htmx_requests_carry_the_token_in_a_header(
    csrf_client: Client, make_connector: Callable[..., Connector]
) -> None:
    # base.html puts the token in hx-headers, so the live validation's POSTs pass the check.
    page = csrf_client.get(reverse("connector-create"))
    token = str(page.context["csrf_token"])
    assert f'"X-CSRFToken": "{token}"' in page.content.decode()
    response = csrf_client.post(
        reverse("config-validate"), {"cfg:connector.class": "iceberg"}, headers={"X-CSRFToken": token}
    )
    assert response.status_code == 200
