"""A catalog that cannot be reached is an outage to wait out, shown as such: the connector's
commits are retried with a back-off, the API status and the UI name the catalog (its password
hidden), the connector never fails for it, and once the catalog answers again every record is
committed once. The catalog is the real PostgreSQL behind a TCP proxy the test cuts."""

from __future__ import annotations

import getpass
import urllib.parse

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils.html import escape
from rest_framework.test import APIClient

from connectors import actions
from connectors.api.status import connector_status
from connectors.models import Commit, CommitState, Connector
from connectors.ui.health import Health, rollup
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    TcpProxy,
    caught_up,
    create_topic,
    json_records,
    produce,
    running_in_threads,
    table_rows,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_unreachable_catalog_is_a_warning_that_passes_with_every_record_committed_once(
    kafka_bootstrap: str, lake: dict[str, str], topic_name: str, signed_in: Client, operator_api: APIClient
) -> None:
    database = settings.DATABASES["default"]
    proxy = TcpProxy("127.0.0.1", int(database.get("PORT") or 5432))
    user = database.get("USER") or getpass.getuser()
    password = database.get("PASSWORD") or ""
    assert password, "the catalog's URI carries a password, which nothing may show"
    uri = (
        f"postgresql+psycopg://{user}:{urllib.parse.quote(password, safe='')}@127.0.0.1:{proxy.port}/{database['NAME']}"
    )
    create_topic(kafka_bootstrap, topic_name, 2)
    produce(kafka_bootstrap, topic_name, json_records(0, 40), partitions=2)
    warehouse = {"iceberg.catalog.type": "sql", "iceberg.catalog.warehouse": f"file://{lake['LAKE_WAREHOUSE']}"}
    config = sink_config(topic_name, "db.outage", **{"iceberg.catalog.uri": uri}, **warehouse)
    actions.create_connector("outage", config)
    try:
        with running_in_threads("outage", tasks=2):
            wait_until(caught_up("outage", {(topic_name, 0): 20, (topic_name, 1): 20}), 120, "the first records")

            proxy.cut()
            ends = produce(kafka_bootstrap, topic_name, json_records(40, 40), partitions=2)

            def waiting() -> bool:
                # The outage is met by the tasks' writes (their commits are
                # aborted, retried with a back-off) or, when the cut comes
                # after the writes, by the coordinator applying a prepared
                # commit (held, applied again with a back-off): either way
                # the connector says so and waits.
                commits = Commit.objects.filter(connector_name="outage")
                retried = (
                    commits.filter(state=CommitState.ABORTED).count() >= 2
                    or commits.filter(state=CommitState.PREPARED).exists()
                )
                return retried and bool(Connector.objects.get(name="outage").coordinator.sink_warning)

            wait_until(waiting, 60, "commits to wait for the catalog")
            connector = Connector.objects.get(name="outage")
            assert connector.failed_at is None
            health = rollup(connector, connector_status(connector))
            assert health.health is Health.WARNING
            where = f"cannot reach the catalog 'catalog-{topic_name}' at postgresql+psycopg://{user}:"
            assert health.reason.startswith("commits are waiting: task ") or health.reason.startswith(
                f"commits are waiting: {where}"
            )
            assert where in health.reason
            status = operator_api.get("/api/connect/connectors/outage/status").json()
            assert status["connector"]["state"] == "RUNNING" and where in status["connector"]["trace"]
            page = signed_in.get(reverse("connector-detail", args=["outage"])).content.decode()
            assert escape(health.reason) in page
            for shown in (health.reason, status["connector"]["trace"], page):
                assert password not in shown

            proxy.restore()
            wait_until(caught_up("outage", ends), 120, "the records of the outage")
            connector = Connector.objects.get(name="outage")
            assert connector.coordinator.sink_warning == "" and connector.failed_at is None
            assert rollup(connector, connector_status(connector)).health is not Health.WARNING
        ids = sorted(row["id"] for row in table_rows("outage", "db.outage"))
        assert ids == list(range(80))
    finally:
        proxy.cut()
