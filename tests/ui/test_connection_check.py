"""'Test connection' against the real embedded broker and the project's SQL catalog."""

from __future__ import annotations

import socket

import pytest
from django.test import Client
from django.urls import reverse

from connectors.ui.connection_check import ERROR, OK, WARNING, check_connection

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def existing_topic(kafka_bootstrap: str, topic_name: str) -> str:
    from connectors.config.kafka_clients import admin_client
    from workers.kafka import ensure_topic

    ensure_topic(admin_client(kafka_bootstrap, {}), topic_name, partitions=3)
    return topic_name


def by_name(results: list) -> dict[str, tuple[str, str]]:  # type: ignore[type-arg]
    return {r.name: (r.status, r.detail) for r in results}


def test_it_finds_brokers_topics_and_the_catalog(kafka_bootstrap: str, existing_topic: str) -> None:
    config = {
        "connector.class": "iceberg",
        "topics": existing_topic,
        "iceberg.tables": "ui_check.orders",
        "iceberg.tables.auto-create-enabled": "true",
    }
    results = by_name(check_connection(config, kafka_bootstrap))
    assert results["Kafka brokers"][0] == OK
    assert results["Topics"] == (OK, "1 topic(s), 3 partition(s)")
    assert results["Iceberg catalog"][0] == OK
    assert results["Tables"] == (OK, "will be created on first records: ui_check.orders")


def test_it_names_missing_topics_and_tables(kafka_bootstrap: str, existing_topic: str) -> None:
    config = {
        "connector.class": "iceberg",
        "topics": f"{existing_topic},no-such-topic",
        "iceberg.tables": "ui_check.none",
    }
    results = by_name(check_connection(config, kafka_bootstrap))
    assert results["Topics"] == (ERROR, "missing: no-such-topic")
    assert results["Tables"][0] == ERROR and "ui_check.none" in results["Tables"][1]


def test_a_regex_matching_nothing_is_a_warning(kafka_bootstrap: str) -> None:
    config = {"connector.class": "iceberg", "topics.regex": "nothing-matches-[0-9]+", "iceberg.tables": "db.t"}
    assert by_name(check_connection(config, kafka_bootstrap))["Topics"][0] == WARNING


def test_unreachable_brokers_and_catalog_fail_fast_with_a_reason() -> None:
    config = {
        "connector.class": "iceberg",
        "topics": "orders",
        "iceberg.tables": "db.orders",
        "iceberg.catalog.type": "rest",
        "iceberg.catalog.uri": f"http://127.0.0.1:{closed_port()}",
    }
    results = by_name(check_connection(config, f"127.0.0.1:{closed_port()}"))
    assert results["Kafka brokers"][0] == ERROR
    assert results["Topics"][0] == "skipped"
    assert results["Iceberg catalog"][0] == ERROR and results["Iceberg catalog"][1]


def test_the_view_refuses_to_test_an_invalid_config(alice: Client) -> None:
    response = alice.post(reverse("connection-test"), {"cfg:connector.class": "iceberg", "cfg:topics": "t"})
    assert "Fix the problems listed under Validation first" in response.content.decode()


def test_the_view_reports_each_check(alice: Client, kafka_bootstrap: str, existing_topic: str) -> None:
    response = alice.post(
        reverse("connection-test"),
        {
            "cfg:connector.class": "iceberg",
            "cfg:topics": existing_topic,
            "cfg:iceberg.tables": "ui_check.view",
            "cfg:iceberg.tables.auto-create-enabled": "true",
        },
    )
    html = response.content.decode()
    assert '<li class="check-ok"><strong>Kafka brokers</strong>' in html
    assert '<li class="check-ok"><strong>Topics</strong>' in html


def files_config(topic: str, store: str) -> dict[str, str]:
    return {
        "connector.class": "files",
        "topics": topic,
        "store.url": store,
        "flush.size": "100",
        "format.class": "parquet",
    }


def test_a_files_sink_writes_and_deletes_a_probe_file(kafka_bootstrap: str, existing_topic: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    results = by_name(check_connection(files_config(existing_topic, f"file://{tmp_path}/out"), kafka_bootstrap))
    assert results["Topics"][0] == OK
    assert results["Store"] == (OK, f"wrote and deleted a file under file://{tmp_path}/out/topics")
    assert "Iceberg catalog" not in results
    # The probe leaves nothing behind for a reader of the layout to trip on.
    assert [p.name for p in (tmp_path / "out" / "topics").iterdir()] == []


def test_a_files_store_that_cannot_be_written_is_an_error(kafka_bootstrap: str, existing_topic: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    results = by_name(check_connection(files_config(existing_topic, f"file://{blocker}"), kafka_bootstrap))
    status, detail = results["Store"]
    assert status == ERROR and detail
