"""Offsets mean "readers can see it" (DESIGN I10): the moment the offsets API reports a partition's end,
the sink's output holds every record before it, on every sink that commits through the ledger.

The coordinator is slowed between preparing the commit and applying it (a catalog, a Hudi timeline or a
store that takes its time), the window in which the ledger already knows the commit's offsets and no
reader can see its records: automation that waits for the offsets, then reads, must not read early.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from connectors import actions
from connectors.models import Commit, CommitState
from tests.conftest import sink_config
from tests.integration.helpers import (
    Processes,
    changes,
    create_topic,
    group_offsets,
    json_records,
    produce,
    table_rows,
    topic_ids,
    wait_until,
)
from tests.integration.test_files_sink import assert_files_hold_each_record_once, files_config
from tests.integration.test_hudi_sink import assert_table_equals_model, hudi_config, model_of_topic

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PARTITIONS = 2
COUNT = 600
# Long enough that a reader polling the offsets would read inside the window, were they moved at prepare.
APPLY_DELAY = "coordinator.after_prepare=delay:4"

Offsets = dict[tuple[str, int], int]


@pytest.fixture
def api(operator: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def offsets_api(api: APIClient, name: str) -> Offsets:
    answer = api.get(f"/api/connect/connectors/{name}/offsets")
    assert answer.status_code == 200, answer.content
    return {
        (o["partition"]["kafka_topic"], o["partition"]["kafka_partition"]): o["offset"]["kafka_offset"]
        for o in answer.json()["offsets"]
    }


def read_the_moment_offsets_reach(api: APIClient, name: str, ends: Offsets, read: Callable[[], Any]) -> Any:
    """Poll the offsets API; as soon as it reports ``ends``, read the output. Also proves the window was
    there: a prepared commit was seen while the offsets API still said less than the ends."""
    deadline = time.monotonic() + 240
    saw_window = False
    while time.monotonic() < deadline:
        reported = offsets_api(api, name)
        if reported == ends:
            result = read()
            assert saw_window, "no prepared commit was seen before the offsets moved: the test proves nothing"
            return result
        if Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists():
            saw_window = True
        time.sleep(0.05)
    raise AssertionError(f"the offsets API never reported {ends}: last {reported}")


def test_iceberg_rows_are_readable_when_the_offsets_say_so(
    procs: Processes, api: APIClient, kafka_bootstrap: str, topic_name: str
) -> None:
    name = "readable-iceberg"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, COUNT), PARTITIONS)
    actions.create_connector(name, sink_config(topic_name, "db.readable"))
    procs.task(name)
    procs.coordinator(name, failpoints=APPLY_DELAY)
    rows = read_the_moment_offsets_reach(api, name, ends, lambda: table_rows(name, "db.readable"))
    assert sorted(r["id"] for r in rows) == topic_ids(kafka_bootstrap, ends)
    # Kafka's lag tools read the connector's consumer group, as they read a Kafka Connect sink's.
    wait_until(
        lambda: group_offsets(kafka_bootstrap, f"connect-{name}", list(ends)) == ends,
        30,
        "the consumer group to hold the committed offsets",
    )


def test_files_are_readable_when_the_offsets_say_so(
    procs: Processes, api: APIClient, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "readable-files"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, COUNT), PARTITIONS)
    actions.create_connector(name, files_config(topic_name, tmp_path))
    procs.task(name)
    procs.coordinator(name, failpoints=APPLY_DELAY)
    read_the_moment_offsets_reach(
        api, name, ends, lambda: assert_files_hold_each_record_once(tmp_path, topic_name, ends, kafka_bootstrap)
    )


def test_hudi_rows_are_readable_when_the_offsets_say_so(
    procs: Processes, api: APIClient, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "readable-hudi"
    base = tmp_path / "hudi"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, changes(COUNT, 150, PARTITIONS, seed=7), PARTITIONS)
    actions.create_connector(name, hudi_config(topic_name, base))
    procs.task(name)
    procs.coordinator(name, failpoints=APPLY_DELAY)
    model = model_of_topic(kafka_bootstrap, ends)
    read_the_moment_offsets_reach(api, name, ends, lambda: assert_table_equals_model(base, model))
