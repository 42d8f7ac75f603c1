"""A Hudi sink config that Hudi's writer refuses on the table already at its base path (another connector's,
created with another record key or partition field): refused before any commit of it is prepared (DESIGN I9),
the connector failed naming each conflicting key, the table as the first connector left it; and "Test
connection" reports the same conflicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from connectors import actions
from connectors.api.status import State, connector_status
from connectors.config import SinkConfig, validate_config
from connectors.config.definitions import CheckStatus
from connectors.models import Commit, CommitState, Connector
from sinks.hudi import timeline
from sinks.hudi.settings import probe
from tests.integration.helpers import caught_up, changes, create_topic, produce, running_in_threads, wait_until
from tests.integration.test_hudi_sink import (
    PARTITIONS,
    as_model,
    assert_timeline_matches_ledger,
    hudi_config,
    model_of_topic,
    read,
)
from workers.storage import StoragePath

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FIRST = "hudi-first"
# How the coordinator and Hudi name the conflicts (sinks.hudi.table_config).
RECORD_KEY = (
    "hoodie.datasource.write.recordkey.field is 'amount' here, 'id' in the table (hoodie.table.recordkey.fields)"
)
PARTITION = (
    "hoodie.datasource.write.partitionpath.field is 'op' here, 'region' in the table (hoodie.table.partition.fields)"
)
WAY_OUT = "Point target.base.path at another directory"


def first_table(kafka_bootstrap: str, topic: str, base: Path) -> dict[int, dict[str, Any]]:
    """A table created by a connector of one record key (id) partitioned by region, with every record of its
    topic: the model of its rows."""
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    ends = produce(kafka_bootstrap, topic, changes(600, 80, PARTITIONS, seed=31), PARTITIONS)
    actions.create_connector(FIRST, hudi_config(topic, base))
    with running_in_threads(FIRST):
        wait_until(caught_up(FIRST, ends), 240, f"{FIRST} to commit every record")
    model = model_of_topic(kafka_bootstrap, ends)
    assert as_model(read(base)) == model
    return model


def second_config(topic: str, first_topic: str, base: Path, **overrides: str) -> dict[str, str]:
    """Another topic's connector into the same table (its name, its base path), with ``overrides``."""
    same_table = {"target.table.name": first_topic.replace("-", "_"), "sinkadmin.control.topic": f"control-{topic}"}
    return hudi_config(topic, base, **{**same_table, **overrides})


@pytest.mark.parametrize(
    ("overrides", "conflict"),
    [
        ({"hoodie.datasource.write.recordkey.field": "amount"}, RECORD_KEY),
        ({"hoodie.datasource.write.partitionpath.field": "op"}, PARTITION),
    ],
    ids=["record-key", "partition-field"],
)
def test_a_connector_whose_config_conflicts_with_the_table_fails_before_preparing_a_commit(
    lake: dict[str, str],
    operator_api: Any,
    kafka_bootstrap: str,
    topic_name: str,
    tmp_path: Path,
    overrides: dict[str, str],
    conflict: str,
) -> None:
    base = tmp_path / "orders"
    model = first_table(kafka_bootstrap, topic_name, base)
    instants = [i.timestamp for i in timeline.completed_instants(StoragePath.parse(str(base)))]

    # Records of another topic, which a write would add to the table under other keys or partitions.
    second_topic = f"{topic_name}-second"
    create_topic(kafka_bootstrap, second_topic, PARTITIONS)
    produce(kafka_bootstrap, second_topic, changes(200, 500, PARTITIONS, seed=32, first_ts=10_000), PARTITIONS)
    name = "hudi-second"
    config = second_config(second_topic, topic_name, base, **overrides)
    # (A valid config: the conflict is with the table, found where the table is read.)
    assert validate_config(config).ok
    actions.create_connector(name, config)
    with running_in_threads(name):
        wait_until(
            lambda: operator_api.get(f"/api/connect/connectors/{name}/status").json()["connector"]["state"] == "FAILED",
            180,
            f"{name} to fail",
        )
    trace = operator_api.get(f"/api/connect/connectors/{name}/status").json()["connector"]["trace"]
    assert f"the Hudi table at {base} was created with other settings than this connector's" in trace
    assert conflict in trace and WAY_OUT in trace
    # One conflict, the one made: the table's name, its key generator and the rest agree. (The trace's first
    # line is the reason; the traceback of the refusal follows it.)
    assert trace.partition("\n")[0].count(" in the table (") == 1, trace
    connector = Connector.objects.get(name=name)
    assert connector_status(connector).connector.state is State.FAILED and conflict in connector.failure_message

    # Nothing of it was prepared, so nothing is left for a coordinator to apply; the table is the first
    # connector's, every row and instant.
    assert not Commit.objects.filter(connector_name=name, state__in=[CommitState.PREPARED, CommitState.COMMITTED])
    assert [i.timestamp for i in timeline.completed_instants(StoragePath.parse(str(base)))] == instants
    assert as_model(read(base)) == model
    assert_timeline_matches_ledger(FIRST, base)


def test_test_connection_reports_every_conflict_with_the_table(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    base = tmp_path / "orders"
    first_table(kafka_bootstrap, topic_name, base)
    other = f"{topic_name}-other"

    [same] = probe(SinkConfig.parse(second_config(other, topic_name, base)))
    assert same.status == CheckStatus.OK and "commits" in same.detail, same

    conflicting = second_config(
        other,
        topic_name,
        base,
        **{
            "hoodie.datasource.write.recordkey.field": "amount",
            "hoodie.datasource.write.partitionpath.field": "op",
            "target.table.name": "payments",
            "hoodie.datasource.write.hive_style_partitioning": "true",
        },
    )
    [found] = probe(SinkConfig.parse(conflicting))
    assert found.status == CheckStatus.ERROR, found
    for expected in (
        RECORD_KEY,
        PARTITION,
        "target.table.name (hoodie.table.name) is 'payments' here",
        "hoodie.datasource.write.hive_style_partitioning is 'true' here, 'false' in the table",
        WAY_OUT,
    ):
        assert expected in found.detail, found.detail
    assert found.detail.count(" in the table (") == 4, found.detail

    # Hudi writes the table as its own type says: a warning, not a conflict.
    [typed] = probe(SinkConfig.parse(second_config(other, topic_name, base, **{"hoodie.table.type": "MERGE_ON_READ"})))
    assert typed.status == CheckStatus.WARNING and "is COPY_ON_WRITE, not MERGE_ON_READ" in typed.detail, typed
