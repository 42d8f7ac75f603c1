"""GET /connectors/{name}/maintenance, and the ledger actions behind it: runs recorded as
they go, interrupted when their coordinator is gone, prepared commits' files protected."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions import maintenance
from connectors.actions.ledger import PartitionRange, seed_offsets
from connectors.models import Connector, MaintenanceOutcome, MaintenanceRun
from tests.api.conftest import BASE, run_coordinator

pytestmark = pytest.mark.django_db

URL = f"{BASE}/connectors/orders-sink/maintenance"


def test_runs_are_listed_newest_first_with_what_each_step_did(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    first = maintenance.start_maintenance(connector.pk, epoch, "db.orders")
    maintenance.record_maintenance(
        first, rewritten_files=1000, rewritten_bytes=4_000_000, added_files=2, added_bytes=3_900_000
    )
    maintenance.record_maintenance(first, replace_snapshot_id=77, expired_snapshots=12, expired_files=1012)
    maintenance.finish_maintenance(first, MaintenanceOutcome.SUCCEEDED)
    second = maintenance.start_maintenance(connector.pk, epoch, "db.orders")
    maintenance.finish_maintenance(second, MaintenanceOutcome.FAILED, "Spark job failed: postgresql://u:pw@db/x")

    response = api.get(URL)
    assert response.status_code == 200
    runs = response.json()["runs"]
    assert [r["id"] for r in runs] == [second, first]
    assert runs[0]["outcome"] == "FAILED" and "pw@" not in runs[0]["error"]
    done = runs[1]
    assert done["outcome"] == "SUCCEEDED" and done["table"] == "db.orders" and done["epoch"] == epoch
    assert (done["rewritten_files"], done["added_files"], done["replace_snapshot_id"]) == (1000, 2, 77)
    assert (done["expired_snapshots"], done["expired_files"], done["orphan_files"]) == (12, 1012, 0)
    assert done["ended_at"] is not None
    assert [r["id"] for r in api.get(URL, {"limit": 1}).json()["runs"]] == [second]


def test_a_bad_limit_and_an_unknown_connector_are_refused(api: APIClient, connector: Connector) -> None:
    for limit in ("0", "501", "ten"):
        response = api.get(URL, {"limit": limit})
        assert response.status_code == 400 and "limit" in response.json()["message"]
    assert api.get(f"{BASE}/connectors/nope/maintenance").status_code == 404


def test_a_run_of_a_coordinator_that_is_gone_is_interrupted_by_the_next(connector: Connector) -> None:
    old = run_coordinator(connector)
    left = maintenance.start_maintenance(connector.pk, old, "db.orders")
    maintenance.record_maintenance(left, rewritten_files=10, added_files=1)
    new = run_coordinator(connector)
    assert maintenance.interrupt_maintenance(connector.pk, new) == 1
    run = MaintenanceRun.objects.get(pk=left)
    assert run.outcome == MaintenanceOutcome.INTERRUPTED and run.ended_at is not None
    assert run.rewritten_files == 10  # what it had done stays recorded
    # Its own runs are not touched, and a late finish of the old one changes nothing.
    mine = maintenance.start_maintenance(connector.pk, new, "db.orders")
    assert maintenance.interrupt_maintenance(connector.pk, new) == 0
    maintenance.finish_maintenance(left, MaintenanceOutcome.SUCCEEDED)
    assert MaintenanceRun.objects.get(pk=left).outcome == MaintenanceOutcome.INTERRUPTED
    assert MaintenanceRun.objects.get(pk=mine).outcome == MaintenanceOutcome.RUNNING
    assert maintenance.last_maintenance(connector.pk) is not None


def test_unknown_figures_are_refused(connector: Connector) -> None:
    run = maintenance.start_maintenance(connector.pk, run_coordinator(connector), "db.orders")
    with pytest.raises(ValueError, match="unknown maintenance figures"):
        maintenance.record_maintenance(run, outcome="SUCCEEDED")


def test_files_of_a_prepared_commit_are_protected_from_orphan_removal(connector: Connector) -> None:
    epoch = run_coordinator(connector)
    seed_offsets(connector.pk, epoch, {("orders", 0): 0})
    path = "/warehouse/db/orders/data/orders+0+0+5.parquet"
    actions.prepare_commit(
        connector.pk,
        epoch=epoch,
        commit_id=uuid.uuid4(),
        started_at=timezone.now(),
        ranges=[PartitionRange("orders", 0, 0, 5, records=5)],
        files=[{"table": "db.orders", "path": path, "records": 5, "bytes": 10}],
        watermark=None,
        complete=True,
    )
    assert maintenance.prepared_files(["db.orders"]) == {path}
    assert maintenance.prepared_files(["db.other"]) == set()
