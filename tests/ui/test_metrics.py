"""/metrics, scraped as Prometheus scrapes it and parsed with the Prometheus client's own parser."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from connectors.actions import maintenance
from connectors.actions import runtime as runtime_state
from connectors.models import Connector, ConnectorTask, MaintenanceOutcome
from tests.ui.conftest import PASSWORD, LedgerFor, age_ledger, beat_coordinator, runtime_task

pytestmark = pytest.mark.django_db


def scrape(client: Client, authorization: str | None = None) -> dict[str, list[Sample]]:
    response = client.get("/metrics", headers={"Authorization": authorization} if authorization else {})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {family.name: family.samples for family in text_string_to_metric_families(response.content.decode())}


def value(samples: list[Sample], name: str, **labels: str) -> float:
    matching = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matching) == 1, (name, labels, samples)
    return matching[0]


def basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def test_the_ledger_tasks_lag_and_workers_as_prometheus_metrics(
    alice_user: User, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector)
    commit({("orders", 0): 10})
    commit({("orders", 0): 5})
    commit.abort("the catalog did not answer")  # type: ignore[attr-defined]
    beat_coordinator(connector)
    runtime_task(connector, 0, partitions=[("orders", 0)], partition_status={"orders/0": {"end_offset": 40}})
    runtime_task(connector, 1, state="FAILED")
    runtime_state.worker_heartbeat("connectors@test", "test", 64, timezone.now())
    maintenance.finish_maintenance(
        maintenance.start_maintenance(connector.pk, 1, "db.orders"), MaintenanceOutcome.SUCCEEDED
    )

    families = scrape(Client(), basic(alice_user.username, PASSWORD))

    ledger = {"connector": "orders-sink"}
    assert (
        value(
            families["sinkadmin_connector_committed_records"], "sinkadmin_connector_committed_records_total", **ledger
        )
        == 15
    )
    assert (
        value(families["sinkadmin_connector_committed_files"], "sinkadmin_connector_committed_files_total", **ledger)
        == 2
    )
    assert (
        value(families["sinkadmin_connector_committed_bytes"], "sinkadmin_connector_committed_bytes_total", **ledger)
        == 1500
    )
    commits = families["sinkadmin_connector_commits"]
    assert value(commits, "sinkadmin_connector_commits_total", outcome="committed", **ledger) == 2
    assert value(commits, "sinkadmin_connector_commits_total", outcome="aborted", **ledger) == 1
    duration = families["sinkadmin_connector_commit_duration_seconds"]
    assert value(duration, "sinkadmin_connector_commit_duration_seconds_count", **ledger) == 2
    assert value(duration, "sinkadmin_connector_commit_duration_seconds_bucket", le="+Inf", **ledger) == 2
    lag = families["sinkadmin_partition_lag_records"]
    assert value(lag, "sinkadmin_partition_lag_records", topic="orders", partition="0", **ledger) == 25
    tasks = families["sinkadmin_connector_tasks"]
    assert value(tasks, "sinkadmin_connector_tasks", state="RUNNING", **ledger) == 1
    assert value(tasks, "sinkadmin_connector_tasks", state="FAILED", **ledger) == 1
    health = families["sinkadmin_connector_health"]
    assert value(health, "sinkadmin_connector_health", health="degraded", **ledger) == 1
    assert value(health, "sinkadmin_connector_health", health="healthy", **ledger) == 0
    assert (
        value(
            families["sinkadmin_connector_last_commit_age_seconds"],
            "sinkadmin_connector_last_commit_age_seconds",
            **ledger,
        )
        >= 0
    )
    worker = {"worker": "connectors@test"}
    assert value(families["sinkadmin_worker_slots"], "sinkadmin_worker_slots", **worker) == 64
    assert value(families["sinkadmin_worker_slots_used"], "sinkadmin_worker_slots_used", **worker) == 0
    assert value(families["sinkadmin_worker_slots_free"], "sinkadmin_worker_slots_free", **worker) == 64
    assert ConnectorTask.objects.count() == 2

    # The example Grafana dashboard (docs/) asks only for what is served.
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    asked = {n for p in dashboard["panels"] for t in p["targets"] for n in re.findall(r"sinkadmin_\w+", t["expr"])}
    served = {sample.name for samples in families.values() for sample in samples}
    assert asked and asked <= served, asked - served


def test_metrics_need_credentials_a_token_or_to_be_made_public(alice_user: User, settings: object, db: None) -> None:
    client = Client()
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == 'Basic realm="sinkadmin metrics"'
    assert client.get("/metrics", headers={"Authorization": basic(alice_user.username, "wrong")}).status_code == 401
    scrape(client, basic(alice_user.username, PASSWORD))

    settings.METRICS_TOKEN = "s3cret-token"  # type: ignore[attr-defined]
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": basic(alice_user.username, PASSWORD)}).status_code == 401
    scrape(client, "Bearer s3cret-token")

    settings.METRICS_TOKEN = ""  # type: ignore[attr-defined]
    settings.METRICS_PUBLIC = True  # type: ignore[attr-defined]
    scrape(client)


def test_maintenance_runs_as_prometheus_counters(alice_user: User, make_connector: Callable[..., Connector]) -> None:
    connector = make_connector("orders-sink")
    for rewritten, outcome in ((1000, MaintenanceOutcome.SUCCEEDED), (0, MaintenanceOutcome.FAILED)):
        run = maintenance.start_maintenance(connector.pk, 1, "db.orders")
        maintenance.record_maintenance(
            run, rewritten_files=rewritten, added_files=rewritten // 500, expired_snapshots=3, expired_files=4
        )
        maintenance.record_maintenance(run, orphan_files=1, removed_bytes=2048)
        maintenance.finish_maintenance(run, outcome)

    families = scrape(Client(), basic(alice_user.username, PASSWORD))

    table = {"connector": "orders-sink", "table": "db.orders"}
    runs = families["sinkadmin_maintenance_runs"]
    assert value(runs, "sinkadmin_maintenance_runs_total", outcome="SUCCEEDED", **table) == 1
    assert value(runs, "sinkadmin_maintenance_runs_total", outcome="FAILED", **table) == 1
    counted = {
        "sinkadmin_maintenance_rewritten_files": 1000,
        "sinkadmin_maintenance_added_files": 2,
        "sinkadmin_maintenance_expired_snapshots": 6,
        "sinkadmin_maintenance_deleted_files": 10,
        "sinkadmin_maintenance_removed_bytes": 4096,
    }
    for family, expected in counted.items():
        assert value(families[family], f"{family}_total", **table) == expected


def test_committed_records_are_a_counter_for_rate_not_a_windowed_figure(
    alice_user: User, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector)
    commit({("orders", 0): 10})
    response = Client().get("/metrics", headers={"Authorization": basic(alice_user.username, PASSWORD)})
    types = {family.name: family.type for family in text_string_to_metric_families(response.content.decode())}
    # Rates are Prometheus's rate() over counters: nothing served is a rate computed here.
    assert types["sinkadmin_connector_committed_records"] == "counter"
    assert not [name for name in types if "rate" in name or "per_second" in name]

    # A total: commits long past the UI's rate window still count, and each new one adds to it.
    age_ledger(connector, timedelta(hours=1))
    commit({("orders", 0): 5})
    families = scrape(Client(), basic(alice_user.username, PASSWORD))
    total = value(
        families["sinkadmin_connector_committed_records"],
        "sinkadmin_connector_committed_records_total",
        connector="orders-sink",
    )
    assert total == 15
