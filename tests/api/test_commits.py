"""GET /connectors/{name}/commits and /commits/{commit_id}: the ledger, beyond Connect."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.actions.ledger import PartitionRange
from connectors.models import Commit, CommitState, Connector, CoordinatorStatus
from tests.api.conftest import BASE, commit, run_coordinator, seed_offsets

pytestmark = pytest.mark.django_db

URL = f"{BASE}/connectors/orders-sink/commits"


def test_it_lists_commits_newest_first_with_their_offsets(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    first = commit(connector, epoch, 0, 10)
    second = commit(connector, epoch, 10, 25)
    response = api.get(URL)
    assert response.status_code == 200
    body = response.json()
    assert body["next"] is None and body["previous"] is None
    assert [c["commit_id"] for c in body["commits"]] == [str(second.commit_id), str(first.commit_id)]
    newest = body["commits"][0]
    assert newest["state"] == "COMMITTED"
    assert newest["connector"] == "orders-sink"
    assert newest["epoch"] == epoch
    assert newest["records"] == 15 and newest["bytes"] == 100 and newest["files_count"] == 1
    assert newest["complete"] is True
    assert newest["ended_by"] == "interval"
    assert newest["committed_at"] is not None
    assert newest["offsets"] == [
        {
            "topic": "orders",
            "partition": 0,
            "start_offset": 10,
            "end_offset": 25,
            "records": 15,
            "dead_lettered": 0,
            "skipped": 0,
        }
    ]
    assert "files" not in newest


def test_it_pages_with_a_cursor(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    made = [commit(connector, epoch, n * 10, n * 10 + 10) for n in range(5)]
    seen: list[str] = []
    page = api.get(URL, {"limit": 2}).json()
    while True:
        assert len(page["commits"]) <= 2
        seen += [c["commit_id"] for c in page["commits"]]
        if page["next"] is None:
            break
        page = api.get(page["next"]).json()
    assert seen == [str(c.commit_id) for c in reversed(made)]


def test_it_filters_by_state(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    commit(connector, epoch, 0, 10)
    assert api.get(URL, {"state": "ABORTED"}).json()["commits"] == []
    assert len(api.get(URL, {"state": "COMMITTED"}).json()["commits"]) == 1
    response = api.get(URL, {"state": "DONE"})
    assert response.json() == {"error_code": 400, "message": "state must be one of PREPARED, COMMITTED, ABORTED"}


def test_a_bad_cursor_is_a_404(api: APIClient, connector: Connector) -> None:
    assert api.get(URL, {"cursor": "garbage"}).json() == {"error_code": 404, "message": "Invalid cursor"}


def test_commits_of_an_unknown_connector_is_a_404(api: APIClient) -> None:
    assert api.get(f"{BASE}/connectors/nope/commits").status_code == 404


def test_one_commit_shows_its_files_offsets_and_snapshots(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    made = commit(connector, epoch, 0, 10)
    response = api.get(f"{URL}/{made.commit_id}")
    assert response.status_code == 200
    body = response.json()
    assert body["commit_id"] == str(made.commit_id)
    assert body["snapshot_ids"] == {"db.orders": 7010}
    assert body["files"] == [
        {
            "table": "db.orders",
            "path": "/warehouse/db/orders/data/orders+0+0+10.parquet",
            "topic": "orders",
            "partition": 0,
            "records": 10,
            "bytes": 100,
        }
    ]
    assert body["offsets"][0]["start_offset"] == 0 and body["offsets"][0]["end_offset"] == 10


def test_a_commit_of_another_connector_is_not_found_here(
    api: APIClient, connector: Connector, make_connector: object
) -> None:
    other = actions.create_connector(
        "payments-sink", {"connector.class": "iceberg", "topics": "orders", "iceberg.tables": "db.p"}
    )
    made = commit(other, run_coordinator(other), 0, 10)
    response = api.get(f"{URL}/{made.commit_id}")
    assert response.json() == {
        "error_code": 404,
        "message": f"Commit {made.commit_id} of connector orders-sink not found",
    }


def test_an_unknown_commit_is_a_404(api: APIClient, connector: Connector) -> None:
    assert api.get(f"{URL}/{uuid.uuid4()}").status_code == 404
    assert api.get(f"{URL}/not-a-uuid").json() == {"error_code": 404, "message": "HTTP 404 Not Found"}


def abandon(api: APIClient, commit_id: object) -> Any:
    return api.post(f"{URL}/{commit_id}/abandon")


def stopped_without_a_coordinator(connector: Connector, epoch: int) -> None:
    actions.stop_connector(connector.name)
    runtime_state.coordinator_stopped(connector.pk, epoch)


def test_a_prepared_commit_is_abandoned_only_while_the_connector_is_stopped_and_no_coordinator_runs(
    api: APIClient, connector: Connector
) -> None:
    epoch = run_coordinator(connector)
    prepared = commit(connector, epoch, 0, 10, applied=False)
    response = abandon(api, prepared.commit_id)
    assert response.status_code == 400
    assert "must be STOPPED" in response.json()["message"]

    actions.stop_connector(connector.name)
    CoordinatorStatus.objects.filter(connector=connector).update(heartbeat_at=timezone.now())
    response = abandon(api, prepared.commit_id)
    assert response.status_code == 409
    assert "still running" in response.json()["message"]
    assert Commit.objects.get(pk=prepared.pk).state == CommitState.PREPARED


def test_only_a_prepared_commit_can_be_abandoned(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    applied = commit(connector, epoch, 0, 10)
    stopped_without_a_coordinator(connector, epoch)
    response = abandon(api, applied.commit_id)
    assert response.status_code == 409
    assert "is COMMITTED: only a prepared commit" in response.json()["message"]
    assert abandon(api, uuid.uuid4()).status_code == 404


def test_abandoning_needs_the_change_permission(reader: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    prepared = commit(connector, epoch, 0, 10, applied=False)
    stopped_without_a_coordinator(connector, epoch)
    assert abandon(reader, prepared.commit_id).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_a_commit_is_not_abandoned_while_the_sink_cannot_say_whether_it_holds_it(
    api: APIClient, connector: Connector
) -> None:
    epoch = run_coordinator(connector)
    prepared = commit(connector, epoch, 0, 10, applied=False)
    stopped_without_a_coordinator(connector, epoch)
    # The connector's catalog (iceberg.catalog.uri) names a host that does not resolve.
    response = abandon(api, prepared.commit_id)
    assert response.status_code == 409
    assert "cannot tell whether the sink holds commit" in response.json()["message"]
    assert Commit.objects.get(pk=prepared.pk).state == CommitState.PREPARED
    assert actions.next_offsets(connector.pk) == {("orders", 0): 10}


@pytest.mark.django_db(transaction=True)
def test_an_abandoned_commit_is_aborted_and_its_records_are_read_again(api: APIClient) -> None:
    # The project's own SQL catalog, where the table does not exist.
    connector = actions.create_connector(
        "orders-sink", {"connector.class": "iceberg", "topics": "orders", "iceberg.tables": "db.orders"}
    )
    epoch = run_coordinator(connector)
    commit(connector, epoch, 0, 10)
    prepared = commit(connector, epoch, 10, 25, applied=False)
    assert actions.next_offsets(connector.pk) == {("orders", 0): 25}
    stopped_without_a_coordinator(connector, epoch)
    epoch_before = Connector.objects.get(pk=connector.pk).coordinator_epoch

    # The sink holds none of it.
    response = abandon(api, prepared.commit_id)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "ABORTED" and body["error"].startswith("abandoned: by an operator")
    # The next commit starts where the abandoned one did; readers were never told more.
    assert actions.next_offsets(connector.pk) == {("orders", 0): 10}
    assert actions.committed_offsets(connector.pk) == {("orders", 0): 10}
    # A coordinator that still held it can prepare nothing more.
    assert Connector.objects.get(pk=connector.pk).coordinator_epoch == epoch_before + 1
    assert abandon(api, prepared.commit_id).status_code == 409


@pytest.mark.django_db(transaction=True)
def test_a_files_commit_some_of_whose_files_were_moved_is_not_abandoned(api: APIClient, tmp_path: Any) -> None:
    """The files sink applies a commit file by file (its moves): a commit stopped after moving some of them holds
    those records in the store already, so it is finished by a restart, never abandoned (its records would be
    written twice)."""
    connector = actions.create_connector(
        "orders-sink",
        {"connector.class": "files", "topics": "orders", "store.url": str(tmp_path), "format.class": "json"}
        | {"flush.size": "10"},
    )
    epoch = run_coordinator(connector)
    seed_offsets(connector.pk, epoch, {("orders", 0): 0})
    final = tmp_path / "topics" / "orders" / "partition=0"
    files = [
        {
            "table": "orders",
            "path": f"file://{final}/orders+0+{first:010d}+{first + 9:010d}.json",
            "staged_path": f"{tmp_path}/topics/+tmp/c/orders+0+{first:010d}-a.json",
            "topic": "orders",
            "partition": 0,
            "records": 10,
            "bytes": 100,
        }
        for first in (0, 10)
    ]
    prepared = actions.prepare_commit(
        connector.pk,
        epoch=epoch,
        commit_id=uuid.uuid4(),
        started_at=timezone.now(),
        ranges=[PartitionRange("orders", 0, 0, 20, records=20)],
        files=files,
        watermark=None,
        complete=True,
    )
    stopped_without_a_coordinator(connector, epoch)
    # The first file was moved to its name before the coordinator stopped.
    final.mkdir(parents=True)
    (final / "orders+0+0000000000+0000000009.json").write_text('{"id": 0}\n')
    response = abandon(api, prepared.commit_id)
    assert response.status_code == 409
    message = response.json()["message"]
    assert "already holds part of commit" in message and "orders+0+0000000000+0000000009.json" in message
    assert Commit.objects.get(pk=prepared.pk).state == CommitState.PREPARED
    # None moved: the commit is abandoned, and its records will be written again.
    (final / "orders+0+0000000000+0000000009.json").unlink()
    assert abandon(api, prepared.commit_id).status_code == 200
