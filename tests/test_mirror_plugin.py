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


def test_mirrormaker_keys_for_what_the_mirror_does_not_do_are_refused_unless_they_ask_for_what_it_does() -> None:
    asked = {
        "sync.topic.acls.enabled": "true",
        "refresh.topics.enabled": "false",
        "refresh.groups.enabled": "false",
        "topic.filter.class": "com.example.MyTopicFilter",
        "group.filter.class": "com.example.MyGroupFilter",
        "config.property.filter.class": "com.example.MyConfigFilter",
        "forwarding.admin.class": "com.example.MyAdmin",
    }
    errors = validate_config({**BASE, **asked}).errors
    assert sorted(errors) == sorted(asked)
    assert "copies no ACLs" in errors["sync.topic.acls.enabled"][0]
    assert "topics.regex" in errors["topic.filter.class"][0]
    # MirrorMaker 2's configs often say what the mirror does anyway: accepted.
    as_it_does = {
        "sync.topic.acls.enabled": "false",
        "refresh.topics.enabled": "True",
        "topic.filter.class": "org.apache.kafka.connect.mirror.DefaultTopicFilter",
        "forwarding.admin.class": "org.apache.kafka.clients.admin.ForwardingAdmin",
    }
    accepted = validate_config({**BASE, **as_it_does})
    assert accepted.errors == {}
    # (Ignored, with a note saying why, as the other sinks' keys of the connector they replace are.)
    assert sorted(accepted.notes) == sorted(as_it_does)


def test_mirrormakers_other_keys_are_ignored_where_they_ask_for_what_the_mirror_does_and_refused_otherwise() -> None:
    as_it_does = {
        "heartbeats.topic.location": "source",
        "checkpoints.topic.location": "target",
        "exactly.once.source.support": "enabled",
        "exactly.once.support": "required",
        "heartbeats.replication.enabled": "true",
        "enabled": "true",
        "sync.topic.acls.interval.seconds": "600",
        "consumer.poll.timeout.ms": "1000",
        "admin.timeout.ms": "60000",
        "metric.reporters": "org.apache.kafka.common.metrics.JmxReporter",
    }
    accepted = validate_config({**BASE, **as_it_does})
    assert accepted.errors == {} and sorted(accepted.notes) == sorted(as_it_does)
    assert "exactly once (transaction.producer=true)" in accepted.notes["exactly.once.source.support"][0]
    asked = {
        "heartbeats.topic.location": "target",
        "checkpoints.topic.location": "source",
        "exactly.once.source.support": "disabled",
        "heartbeats.replication.enabled": "false",
        "enabled": "false",
        "sync.topic.configs.interval.seconds": "600",
        "topics.blacklist": "private.*",
        "groups.blacklist": "audit.*",
    }
    errors = validate_config({**BASE, **asked}).errors
    assert sorted(errors) == sorted(asked)
    assert "heartbeats on the source cluster" in errors["heartbeats.topic.location"][0]
    assert "on the target cluster" in errors["checkpoints.topic.location"][0]
    assert "transaction.producer" in errors["exactly.once.source.support"][0]
    assert "write topics.exclude" in errors["topics.blacklist"][0]
    assert "does not sync them again" in errors["sync.topic.configs.interval.seconds"][0]
    # At least once, exactly-once keys ask for what the mirror does not do, and MM2's "preparing" (not yet
    # exactly once) for what it does.
    at_least_once = {**BASE, "transaction.producer": "false"}
    assert "exactly.once.support" in validate_config({**at_least_once, "exactly.once.support": "required"}).errors
    assert (
        "exactly.once.source.support"
        in validate_config({**at_least_once, "exactly.once.source.support": "enabled"}).errors
    )
    prepared = validate_config({**at_least_once, "exactly.once.source.support": "preparing"})
    assert prepared.ok and "at least once" in prepared.notes["exactly.once.source.support"][0]
    # Without topic settings synced at all, their interval changes nothing.
    unsynced = validate_config(
        {**BASE, "sync.topic.configs.enabled": "false", "sync.topic.configs.interval.seconds": "60"}
    )
    assert unsynced.ok and "sync.topic.configs.interval.seconds" in unsynced.notes


def test_a_typo_of_a_mirror_or_mirrormaker_key_is_refused_with_the_key_it_is_near() -> None:
    typos = {
        "emit.checkpoint.enabled": "emit.checkpoints.enabled",
        "sync.group.offset.enabled": "sync.group.offsets.enabled",
        "sync.group.ofsets.interval.seconds": "sync.group.offsets.interval.seconds",
        "emit.hearbteats.enabled": "emit.heartbeats.enabled",
        "task.max": "tasks.max",
        "group": "groups",
        "refresh.topic.enabled": "refresh.topics.enabled",  # (a MirrorMaker 2 key the mirror has a rule for)
        "replication.policy.seperator": "replication.policy.separator",
    }
    errors = validate_config({**BASE, **dict.fromkeys(typos, "true")}).errors
    assert errors == {typo: [f"not a key of the mirror: did you mean {key}?"] for typo, key in typos.items()}
    # Keys near none of them pass, as Kafka Connect passes them: its own, and anyone's.
    passed = {
        "name": "m",
        "header.converter": "x",
        "errors.log.enable": "true",
        "offset.flush.interval.ms": "10",
        "my.tag": "x",
    }
    assert validate_config({**BASE, **passed}).ok
    [why] = validate_config({**BASE, "source.cluster.bootstrap.server": "s:9092"}).errors[
        "source.cluster.bootstrap.server"
    ]
    assert why.endswith("did you mean source.cluster.bootstrap.servers?")


def test_replicas_take_their_source_topics_settings_but_mirrormakers_excluded_ones() -> None:
    settings = SinkConfig.parse(BASE).settings
    assert settings.copies_setting("retention.ms") and settings.copies_setting("cleanup.policy")
    assert not settings.copies_setting("min.insync.replicas")
    assert not settings.copies_setting("leader.replication.throttled.replicas")
    mine = SinkConfig.parse({**BASE, "config.properties.exclude": "retention\\..*"}).settings
    assert not mine.copies_setting("retention.ms") and mine.copies_setting("min.insync.replicas")
    assert (
        "not a valid regular expression"
        in validate_config({**BASE, "config.properties.exclude": "("}).errors["config.properties.exclude"][0]
    )


def test_the_replicas_replication_factor_is_mirrormakers_key_with_the_clusters_default_by_default() -> None:
    assert SinkConfig.parse(BASE).settings.replication_factor == -1
    assert SinkConfig.parse({**BASE, "replication.factor": "3"}).settings.replication_factor == 3
    for key in ("replication.factor", "offset-syncs.topic.replication.factor", "heartbeats.topic.replication.factor"):
        assert "at least 1, or -1" in validate_config({**BASE, key: "0"}).errors[key][0]


@pytest.mark.parametrize(
    "connector_class",
    [
        "org.apache.kafka.connect.mirror.MirrorSourceConnector",
        "MirrorCheckpointConnector",
        "org.apache.kafka.connect.mirror.MirrorHeartbeatConnector",
    ],
)
def test_mirrormakers_own_connector_classes_are_refused_with_the_one_that_does_their_job(connector_class: str) -> None:
    [message] = validate_config({**BASE, "connector.class": connector_class}).errors["connector.class"]
    assert "org.apache.kafka.connect.mirror.MirrorSinkConnector" in message and "topics.regex" in message


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
