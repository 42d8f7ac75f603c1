"""The mirror as a plugin, without servers: its keys checked one by one, its typed settings, and the fencing
that keeps two runners of a partition apart when its tasks' shares change."""

from __future__ import annotations

import pytest
from django.utils import timezone

from connectors.actions import ledger
from connectors.actions import runtime as runtime_state
from connectors.config import SinkConfig, validate_config
from connectors.models import CommitState, Connector
from sinks.mirror.settings import MirrorSettings

BASE = {
    "connector.class": "mirror",
    "source.cluster.alias": "east",
    "source.cluster.bootstrap.servers": "s:9092",
    "target.cluster.bootstrap.servers": "t:9092",
    "topics.regex": "orders.*",
}


def test_the_mirror_keys_are_checked_one_by_one() -> None:
    errors = validate_config(
        {
            "connector.class": "org.apache.kafka.connect.mirror.MirrorSinkConnector",
            "topics": "a",
            "replication.policy.class": "x.Custom",
            "transaction.producer": "maybe",
            "emit.heartbeats.enabled": "maybe",
            "topics.exclude": "(",
            "source.cluster.compression.type": "zstd",
            "target.cluster.sasl.mechanism": "PLAIN",
        }
    ).errors
    assert "source.cluster.bootstrap.servers" in errors and "target.cluster.bootstrap.servers" in errors
    assert "DefaultReplicationPolicy" in errors["replication.policy.class"][0]
    assert "true or false" in errors["transaction.producer"][0]
    assert "true or false" in errors["emit.heartbeats.enabled"][0]
    assert "not a valid regular expression" in errors["topics.exclude"][0]
    assert "not a client setting" in errors["source.cluster.compression.type"][0]
    assert "target.cluster.sasl.mechanism" not in errors
    # No control topic: the mirror has no coordinator.
    assert not any("control" in key for key in errors)


def test_identity_into_the_same_cluster_is_refused() -> None:
    errors = validate_config(
        {
            **BASE,
            "target.cluster.bootstrap.servers": "s:9092",
            "replication.policy.class": "IdentityReplicationPolicy",
        }
    ).errors
    assert errors == {
        "replication.policy.class": [
            "IdentityReplicationPolicy into the same cluster would write each topic into itself"
        ]
    }


def test_settings_name_replicas_and_select_topics() -> None:
    config = SinkConfig.parse({**BASE, "source.cluster.security.protocol": "SSL"})
    settings: MirrorSettings = config.settings
    assert config.commit_interval_ms == 1000 and config.control_topic == ""
    assert settings.target_topic("orders") == "east.orders" and settings.exactly_once
    assert settings.source_client == {"security.protocol": "SSL"} and settings.target_client == {}
    assert settings.selects("orders-1") and not settings.selects("__consumer_offsets")
    assert not settings.selects("orders.internal") and not settings.selects("payments")
    identity = SinkConfig.parse({**BASE, "replication.policy.class": "IdentityReplicationPolicy"}).settings
    assert identity.target_topic("orders") == "orders"
    # Into the same cluster, the mirror's own replicas are never mirrored again.
    same = SinkConfig.parse({**BASE, "topics.regex": ".*", "target.cluster.bootstrap.servers": "s:9092"}).settings
    assert same.selects("orders") and not same.selects("east.orders")


@pytest.mark.django_db
def test_tasks_that_lose_partitions_are_fenced_before_any_task_starts() -> None:
    connector = Connector.objects.create(name="m", config={**BASE, "tasks.max": "2"})
    partitions = [("orders", 0), ("orders", 1), ("orders", 2), ("orders", 3)]
    runtime_state.assign_tasks(connector, partitions, coordinated=False)
    assert runtime_state.fence_pending(connector.pk) == []  # new tasks: nothing ran before them
    # A new topic sorted last: task 0 gains a partition nobody had, task 1 keeps its share.
    runtime_state.assign_tasks(connector, [*partitions, ("orders-b", 0)], coordinated=False)
    assert runtime_state.fence_pending(connector.pk) == [0]
    # One sorted first: every partition moves, so both tasks' earlier runners may still write what moved.
    partitions = [("alpha", 0), *partitions]
    runtime_state.assign_tasks(connector, [*partitions, ("orders-b", 0)], coordinated=False)
    assert runtime_state.fence_pending(connector.pk) == [0, 1]
    # Down to one task: task 1 goes (its runner must be fenced too), task 0's share changes again.
    connector.config = {**connector.config, "tasks.max": "1"}
    connector.save()
    runtime_state.fenced(connector.pk, [0])
    runtime_state.assign_tasks(connector, [*partitions, ("orders-b", 0)], coordinated=False)
    assert runtime_state.fence_pending(connector.pk) == [0, 1]
    runtime_state.fenced(connector.pk, [0, 1])
    assert runtime_state.fence_pending(connector.pk) == []
    # The same shares again: nothing to fence. Table sinks never fence (their coordinator refuses old writers).
    runtime_state.assign_tasks(connector, [*partitions, ("orders-b", 0)], coordinated=False)
    assert runtime_state.fence_pending(connector.pk) == []
    runtime_state.assign_tasks(connector, partitions, coordinated=True)
    assert runtime_state.fence_pending(connector.pk) == []


@pytest.mark.django_db
def test_transactions_are_entered_as_committed_and_offsets_never_move_back() -> None:
    connector = Connector.objects.create(name="m", config={**BASE})
    now = timezone.now()
    later = ledger.record_transaction(
        connector.pk, epoch=3, started_at=now, ranges=[ledger.PartitionRange("orders", 0, 10, 20, 10)], size=1000
    )
    # A fenced runner's last transaction, entered late: it did commit, so it is in the ledger, but the
    # partition's offset stays where the later one left it.
    earlier = ledger.record_transaction(
        connector.pk,
        epoch=2,
        started_at=now,
        ranges=[ledger.PartitionRange("orders", 0, 0, 10, 10), ledger.PartitionRange("orders", 1, 0, 5, 5)],
        size=1500,
    )
    assert later.state == earlier.state == CommitState.COMMITTED
    assert (earlier.records, earlier.bytes, earlier.offsets()) == (15, 1500, {"orders/0": [0, 10], "orders/1": [0, 5]})
    assert ledger.committed_offsets(connector.pk) == {("orders", 0): 20, ("orders", 1): 5}
    # A task's start (or the offsets API) sets them from the target group, the truth: back as well as forth.
    ledger.set_offsets(connector.pk, {("orders", 0): 0, ("orders", 2): 7})
    assert ledger.committed_offsets(connector.pk) == {("orders", 0): 0, ("orders", 1): 5, ("orders", 2): 7}
