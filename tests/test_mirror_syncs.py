"""MirrorMaker 2's offset syncs and checkpoints without servers: their bytes as MM2's Java classes lay them
out, which records get a sync, how a source offset translates (never past a record not yet read), and the
mirror's config keys for them."""

from __future__ import annotations

import struct

from connectors.config import validate_config
from sinks.mirror.settings import MirrorSettings
from sinks.mirror.syncs import (
    Checkpoint,
    Heartbeat,
    OffsetSync,
    OffsetSyncStore,
    checkpoints_topic,
    offset_syncs_topic,
    syncs_for,
)

MIRROR = {
    "connector.class": "org.apache.kafka.connect.mirror.MirrorSinkConnector",
    "source.cluster.alias": "east",
    "source.cluster.bootstrap.servers": "east:9092",
    "target.cluster.bootstrap.servers": "west:9092",
    "topics": "orders",
}


def test_records_are_laid_out_as_mirrormakers_classes_write_them() -> None:
    # Kafka's protocol types: STRING is an int16 length and UTF-8; INT16/32/64 big-endian.
    sync = OffsetSync("orders", 3, 41, 57)
    assert sync.key() == b"\x00\x06orders" + b"\x00\x00\x00\x03"
    assert sync.value() == struct.pack(">qq", 41, 57)
    assert OffsetSync.parse(sync.key(), sync.value()) == sync
    checkpoint = Checkpoint("billing", "east.orders", 3, 41, 57, "meta")
    assert checkpoint.key() == b"\x00\x07billing" + b"\x00\x0beast.orders" + b"\x00\x00\x00\x03"
    # The version header (0), then upstreamOffset, offset, metadata.
    assert checkpoint.value() == b"\x00\x00" + struct.pack(">qq", 41, 57) + b"\x00\x04meta"
    assert Checkpoint.parse(checkpoint.key(), checkpoint.value()) == checkpoint
    heartbeat = Heartbeat("east", "west", 1_795_000_000_123)
    assert heartbeat.key() == b"\x00\x04east" + b"\x00\x04west"
    assert heartbeat.value() == b"\x00\x00" + struct.pack(">q", 1_795_000_000_123)
    assert Heartbeat.parse(heartbeat.key(), heartbeat.value()) == heartbeat
    assert offset_syncs_topic("east") == "mm2-offset-syncs.east.internal"
    assert checkpoints_topic("east") == "east.checkpoints.internal"


def test_each_run_of_alike_offsets_is_synced_at_both_ends_and_every_lag_max_records() -> None:
    # A transaction's records: source 10-14 at target 20-24, then a source gap (compaction) before 17-18.
    pairs = [(10, 20), (11, 21), (12, 22), (13, 23), (14, 24), (17, 25), (18, 26)]
    chosen, last = syncs_for(pairs, None, lag_max=100)
    assert chosen == [(10, 20), (14, 24), (17, 25), (18, 26)]
    assert last == (18, 26)
    # The next transaction starts past its commit marker (target 27): a new run.
    chosen, _ = syncs_for([(19, 28), (20, 29)], last, lag_max=100)
    assert chosen == [(19, 28), (20, 29)]
    # A long run gets a sync every lag_max records.
    chosen, _ = syncs_for([(n, n + 5) for n in range(10)], None, lag_max=4)
    assert chosen == [(0, 5), (4, 9), (8, 13), (9, 14)]


def test_offsets_translate_exactly_inside_a_run_and_never_past_an_unread_record() -> None:
    store = OffsetSyncStore()
    # Two transactions of partition 0: source 0-99 at target 0-99, then source 100-199 at 101-200.
    store.add(OffsetSync("orders", 0, u, d) for u, d in [(0, 0), (99, 99), (100, 101), (199, 200)])
    assert store.translate("orders", 0, 0) == 0
    assert store.translate("orders", 0, 50) == 50  # (inside the first run: exact)
    assert store.translate("orders", 0, 100) == 101
    assert store.translate("orders", 0, 150) == 151
    # Past everything copied: one past the last copy, where the next will be.
    assert store.translate("orders", 0, 200) == 201
    assert store.translate("orders", 0, 900) == 201
    assert store.translate("orders", 1, 5) is None  # (nothing of that partition copied)
    # A gap between syncs that do not advance alike: one past the sync before, MM2's rule.
    gapped = OffsetSyncStore()
    gapped.add([OffsetSync("t", 0, 10, 10), OffsetSync("t", 0, 20, 12)])
    assert gapped.translate("t", 0, 15) == 11
    assert gapped.translate("t", 0, 5) is None
    # Copied again at least once (a task killed before its offsets): the later copy replaces the pair.
    store.add([OffsetSync("orders", 0, 100, 301), OffsetSync("orders", 0, 199, 400)])
    assert store.translate("orders", 0, 150) == 351


def test_checkpoint_keys_have_mirrormakers_defaults_and_refuse_what_cannot_be() -> None:
    settings = MirrorSettings.parse(MIRROR)
    assert settings.emit_offset_syncs and settings.emit_checkpoints and not settings.sync_group_offsets
    assert settings.checkpoints_interval_s == 60 and settings.offset_lag_max == 100
    assert settings.selects_group("billing") and not settings.selects_group("console-consumer-123")
    # Heartbeats topics are mirrored whatever is selected, but not back where they came from.
    assert settings.selects("heartbeats") and settings.selects("south.heartbeats")
    assert not settings.selects("target.heartbeats") and not settings.selects("stocks")
    # Internal topics never, whatever topics.exclude says.
    everything = MirrorSettings.parse({**MIRROR, "topics": "", "topics.regex": ".*", "topics.exclude": ""})
    assert everything.selects("orders") and not everything.selects("__consumer_offsets")
    assert not everything.selects("mm2-offset-syncs.east.internal")
    identity = MirrorSettings.parse({**MIRROR, "replication.policy.class": "IdentityReplicationPolicy"})
    assert identity.target_topic("orders") == "orders" and identity.target_topic("heartbeats") == "east.heartbeats"
    assert validate_config({**MIRROR, "sync.group.offsets.enabled": "true"}).ok
    refused = validate_config({**MIRROR, "offset-syncs.topic.location": "source"})
    assert "in the transaction" in refused.errors["offset-syncs.topic.location"][0]
    no_syncs = validate_config({**MIRROR, "emit.offset-syncs.enabled": "false"})
    assert "needs emit.offset-syncs.enabled=true" in no_syncs.errors["emit.checkpoints.enabled"][0]
    no_checkpoints = validate_config(
        {**MIRROR, "emit.checkpoints.enabled": "false", "sync.group.offsets.enabled": "true"}
    )
    assert "needs emit.checkpoints.enabled=true" in no_checkpoints.errors["sync.group.offsets.enabled"][0]
    bad = validate_config({**MIRROR, "groups": "billing, (unclosed"})
    assert "not a valid regular expression" in bad.errors["groups"][0]


def test_internal_topics_are_named_with_the_separator_as_mirrormakers_default_replication_policy_names_them() -> None:
    # DefaultReplicationPolicy (Kafka 3.1+, KIP-690): "mm2-offset-syncs" + sep + alias + sep + "internal" and
    # alias + sep + "checkpoints" + sep + "internal"; IdentityReplicationPolicy inherits both.
    for policy in ("DefaultReplicationPolicy", "IdentityReplicationPolicy"):
        underscored = MirrorSettings.parse(
            {
                **MIRROR,
                "source.cluster.alias": "sep",
                "replication.policy.separator": "_",
                "replication.policy.class": policy,
            }
        )
        assert underscored.offset_syncs_topic == "mm2-offset-syncs_sep_internal"
        assert underscored.checkpoints_topic == "sep_checkpoints_internal"
    # replication.policy.internal.topic.separator.enabled=false keeps the dots of MirrorMaker 2 before 3.1, for
    # the internal topics only: replicas keep the separator.
    dotted = MirrorSettings.parse(
        {
            **MIRROR,
            "source.cluster.alias": "sep",
            "replication.policy.separator": "__",
            "replication.policy.internal.topic.separator.enabled": "false",
        }
    )
    assert (dotted.offset_syncs_topic, dotted.checkpoints_topic) == (
        "mm2-offset-syncs.sep.internal",
        "sep.checkpoints.internal",
    )
    assert dotted.target_topic("orders") == "sep__orders"
    default = MirrorSettings.parse(MIRROR)
    assert (default.offset_syncs_topic, default.checkpoints_topic) == (
        "mm2-offset-syncs.east.internal",
        "east.checkpoints.internal",
    )
    assert offset_syncs_topic("sep", "-") == "mm2-offset-syncs-sep-internal"
    assert checkpoints_topic("sep", "-") == "sep-checkpoints-internal"


def test_internal_and_heartbeats_topics_follow_the_separator_when_topics_are_selected() -> None:
    everything = MirrorSettings.parse(
        {**MIRROR, "topics": "", "topics.regex": ".*", "topics.exclude": "", "replication.policy.separator": "_"}
    )
    # MirrorMaker 2's own internal topics, named with the separator, are never mirrored (isInternalTopic).
    assert not everything.selects("mm2-offset-syncs_south_internal") and not everything.selects(
        "south_checkpoints_internal"
    )
    assert not everything.selects("mm2-offset-syncs.south.internal")
    assert everything.selects("orders") and everything.selects("orders.internals")
    # The heartbeats topic is "heartbeats" whatever the separator; its replicas take the separator.
    assert everything.selects("heartbeats") and everything.selects("south_heartbeats")
    assert everything.target_topic("heartbeats") == "east_heartbeats"
    assert not everything.selects("target_heartbeats")  # (it came from the target: a cycle)


def test_a_separator_that_cannot_be_in_a_topics_name_is_refused() -> None:
    # Blank values fall back to defaults elsewhere; an empty separator would have become "." in silence.
    for blank in ("", "  "):
        [why] = validate_config({**MIRROR, "replication.policy.separator": blank}).errors[
            "replication.policy.separator"
        ]
        assert "<source alias><topic>" in why and "leave the key out" in why
    [why] = validate_config({**MIRROR, "replication.policy.separator": "/"}).errors["replication.policy.separator"]
    assert "'/' is not made of a topic name's characters" in why
    for separator in (".", "_", "__", "-"):
        assert validate_config({**MIRROR, "replication.policy.separator": separator}).ok, separator
    assert (
        "true or false"
        in validate_config({**MIRROR, "replication.policy.internal.topic.separator.enabled": "no"}).errors[
            "replication.policy.internal.topic.separator.enabled"
        ][0]
    )
