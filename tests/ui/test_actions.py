"""Lifecycle buttons: each goes through the actions; destructive ones ask first."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client
from django.urls import reverse

from connectors.models import Commit, Connector, ConnectorTask, DesiredState, TaskState
from tests.ui.conftest import LedgerFor, runtime_task

pytestmark = pytest.mark.django_db


def test_pause_and_resume_return_to_the_page_they_came_from(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink")
    back = reverse("connector-list") + "?state=healthy"
    response = alice.post(reverse("connector-action", args=["orders-sink", "pause"]), {"next": back})
    assert response["Location"] == back
    assert Connector.objects.get().desired_state == DesiredState.PAUSED
    alice.post(reverse("connector-action", args=["orders-sink", "resume"]))
    assert Connector.objects.get().desired_state == DesiredState.RUNNING


def test_next_may_not_point_to_another_site(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    response = alice.post(reverse("connector-action", args=["orders-sink", "pause"]), {"next": "https://evil.example/"})
    assert response["Location"] == reverse("connector-detail", args=["orders-sink"])


def test_stop_and_delete_ask_for_confirmation_first(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    for action in ("stop", "delete"):
        page = alice.get(reverse("connector-action", args=["orders-sink", action]))
        assert page.status_code == 200
        assert f"Yes, {action} orders-sink" in page.content.decode()
    assert Connector.objects.get().desired_state == DesiredState.RUNNING
    alice.post(reverse("connector-action", args=["orders-sink", "stop"]))
    assert Connector.objects.get().desired_state == DesiredState.STOPPED


def test_the_list_links_destructive_actions_to_their_confirmation(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink")
    html = alice.get(reverse("connector-list")).content.decode()
    assert f'<a class="button quiet small" href="{reverse("connector-action", args=["orders-sink", "delete"])}"' in html
    assert f'action="{reverse("connector-action", args=["orders-sink", "delete"])}"' not in html


def test_delete_keeps_the_ledger_unless_asked(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    commit_ledger(make_connector("keep-sink"))({("orders", 0): 5})
    commit_ledger(make_connector("drop-sink"))({("orders", 0): 5})
    assert alice.post(reverse("connector-action", args=["keep-sink", "delete"]))["Location"] == reverse(
        "connector-list"
    )
    alice.post(reverse("connector-action", args=["drop-sink", "delete"]), {"delete_ledger": "on"})
    assert not Connector.objects.exists()
    assert list(Commit.objects.values_list("connector_name", flat=True)) == ["keep-sink"]


def test_restart_restarts_the_tasks(alice: Client, make_connector: Callable[..., Connector]) -> None:
    connector = make_connector("orders-sink")
    runtime_task(connector, 0, state=TaskState.FAILED, error_message="boom")
    epoch = connector.coordinator_epoch
    alice.post(reverse("connector-action", args=["orders-sink", "restart"]))
    connector.refresh_from_db()
    assert connector.coordinator_epoch == epoch + 1
    assert ConnectorTask.objects.get().state == TaskState.RESTARTING


def test_a_single_task_can_be_restarted(alice: Client, make_connector: Callable[..., Connector]) -> None:
    connector = make_connector("orders-sink")
    runtime_task(connector, 0)
    runtime_task(connector, 1, state=TaskState.FAILED, error_message="boom")
    response = alice.post(reverse("task-restart", args=["orders-sink", 1]))
    assert response["Location"] == reverse("connector-detail", args=["orders-sink"])
    states = dict(ConnectorTask.objects.values_list("task_index", "state"))
    assert states == {0: TaskState.RUNNING, 1: TaskState.RESTARTING}
    assert alice.post(reverse("task-restart", args=["orders-sink", 9])).status_code == 404


def test_unknown_actions_and_connectors_are_not_found(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    assert alice.post(reverse("connector-action", args=["orders-sink", "explode"])).status_code == 404
    assert alice.post(reverse("connector-action", args=["nope", "pause"])).status_code == 404
    assert alice.get(reverse("connector-detail", args=["nope"])).status_code == 404
