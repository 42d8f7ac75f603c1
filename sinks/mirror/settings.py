"""The Kafka mirror's settings, as MirrorMaker 2 names them where the meaning is the same: checked per key,
then typed for the mirror's engine (``sinks.mirror.engine``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from connectors.config.definitions import CheckResult, CheckStatus, SourceCluster
from connectors.config.kafka_clients import (
    property_clients,
    property_name,
    shared_properties,
    unusable_client_settings,
)
from connectors.config.validation import (
    IDEMPOTENT_ACKS,
    KeyRule,
    apply_key_rules,
    closest,
    rule_for,
    unusable_override,
)
from sinks.mirror import syncs
from sinks.mirror.plugin import DEFAULT_POLICY, IDENTITY_POLICY, MIRROR

if TYPE_CHECKING:
    from connectors.config.validation import ConfigValidation, SinkConfig

POLICIES = {
    "DefaultReplicationPolicy": DEFAULT_POLICY,
    "IdentityReplicationPolicy": IDENTITY_POLICY,
    DEFAULT_POLICY: DEFAULT_POLICY,
    IDENTITY_POLICY: IDENTITY_POLICY,
}
# Client settings each cluster's clients take, under source.cluster. / target.cluster. (as MM2 names them).
CLIENT_PREFIXES = ("security.protocol", "sasl.", "ssl.")
# What a topic's name is made of (Kafka's Topic.LEGAL_CHARS), and so a replication policy's separator.
TOPIC_NAME_CHARACTERS = re.compile(r"[a-zA-Z0-9._-]+")


# Keys that turn something on, and the key each needs on too.
ENABLING = {
    "emit.offset-syncs.enabled": None,
    "emit.checkpoints.enabled": "emit.offset-syncs.enabled",
    "sync.group.offsets.enabled": "emit.checkpoints.enabled",
}
ENABLING_WHY = {
    "emit.checkpoints.enabled": "checkpoints translate the groups' offsets through the offset syncs",
    "sync.group.offsets.enabled": "the offsets synced to the target's groups are the checkpoints' (set "
    "emit.checkpoints.enabled=true)",
}


def _get(config: Mapping[str, str], name: str) -> str:
    value = config.get(name)
    if value is not None and str(value).strip():
        return str(value).strip()
    key = MIRROR.key(name)
    return (key.default if key else None) or ""


def _client_settings(config: Mapping[str, str], side: str) -> dict[str, str]:
    """One cluster's client settings, without their ``<side>.cluster.`` prefix."""
    prefix = f"{side}.cluster."
    return {
        k[len(prefix) :]: str(v)
        for k, v in config.items()
        if k.startswith(prefix) and k[len(prefix) :].startswith(CLIENT_PREFIXES)
    }


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


# The replication factors of the topics the mirror creates.
REPLICATION_FACTORS = (
    "replication.factor",
    "offset-syncs.topic.replication.factor",
    "checkpoints.topic.replication.factor",
    "heartbeats.topic.replication.factor",
)

# MirrorMaker 2's keys for what the mirror does not do: ignored, with a note, where their value asks for what it
# does; refused with why otherwise, where Kafka Connect would pass them to a connector that reads them.
FILTER_CLASS_DEFAULT = "the mirror loads no filter class, and this is MirrorMaker 2's default"
KEY_RULES: dict[str, KeyRule] = {
    "sync.topic.acls.enabled": KeyRule(
        ignored="the mirror copies no ACLs, as with false",
        refused="the mirror copies no ACLs (MirrorMaker 2's default, true, copies the topics' read ACLs): set false, "
        "and grant the replicas' ACLs on the target cluster",
        harmless=("false",),
    ),
    "refresh.topics.enabled": KeyRule(
        ignored="the mirror always looks for new source topics and partitions, as with true",
        refused="the mirror always looks for new source topics and partitions",
        harmless=("true",),
    ),
    "refresh.groups.enabled": KeyRule(
        ignored="the mirror always looks for new source groups to checkpoint, as with true",
        refused="the mirror always looks for new source groups to checkpoint",
        harmless=("true",),
    ),
    "topic.filter.class": KeyRule(
        ignored=FILTER_CLASS_DEFAULT,
        refused="the mirror loads no filter class: select topics with topics, topics.regex and topics.exclude",
        harmless=("org.apache.kafka.connect.mirror.DefaultTopicFilter",),
    ),
    "group.filter.class": KeyRule(
        ignored=FILTER_CLASS_DEFAULT,
        refused="the mirror loads no filter class: select groups with groups and groups.exclude",
        harmless=("org.apache.kafka.connect.mirror.DefaultGroupFilter",),
    ),
    "config.property.filter.class": KeyRule(
        ignored=FILTER_CLASS_DEFAULT,
        refused="the mirror loads no filter class: a replica takes its source topic's own settings but those "
        "config.properties.exclude names",
        harmless=("org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter",),
    ),
    "forwarding.admin.class": KeyRule(
        ignored="the mirror creates and alters topics with Kafka's own admin client, MirrorMaker 2's default",
        refused="the mirror creates and alters topics with Kafka's own admin client; it loads no admin class",
        harmless=("org.apache.kafka.clients.admin.ForwardingAdmin",),
    ),
    "heartbeats.replication.enabled": KeyRule(
        ignored="the mirror always replicates heartbeats topics, as with true",
        refused="the mirror always replicates heartbeats topics: their copies show the whole path works",
        harmless=("true",),
    ),
    "enabled": KeyRule(
        ignored="the mirror copies while it runs, as with true",
        refused="to stop a mirror, stop or pause the connector",
        harmless=("true",),
    ),
    "sync.topic.acls.interval.seconds": KeyRule(ignored="the mirror copies no ACLs"),
    # How long a client waits changes nothing copied.
    "consumer.poll.timeout.ms": KeyRule(ignored="the mirror's consumers poll at intervals of their own"),
    "admin.timeout.ms": KeyRule(ignored="the mirror's admin requests take timeouts of their own"),
    "metric.reporters": KeyRule(
        ignored="the mirror loads no metrics reporter: its figures are on the connector's page and in the API"
    ),
    # Not MirrorMaker 2's keys (its heartbeats and checkpoints topics have no location key), but a config that
    # names a location gets it said where they are.
    "heartbeats.topic.location": KeyRule(
        ignored="the mirror emits heartbeats on the source cluster, as with source",
        refused="the mirror emits heartbeats on the source cluster and replicates them to the target, where their "
        "copies show the whole path works",
        harmless=("source",),
    ),
    "checkpoints.topic.location": KeyRule(
        ignored="the checkpoints are written on the target cluster, as with target",
        refused="the checkpoints are written on the target cluster, where the consumers that fail over to it "
        "read them (as MirrorMaker 2 writes them)",
        harmless=("target",),
    ),
    # MirrorMaker 2's names before Kafka 2.8 (KIP-629; removed in 4.0).
    **{
        f"{kind}.blacklist": KeyRule(refused=f"MirrorMaker 2's former name of {kind}.exclude: write {kind}.exclude")
        for kind in ("topics", "groups", "config.properties")
    },
}

# MirrorMaker 2's per-client key prefixes, and Kafka Connect's client overrides (KIP-458), with the clusters whose
# clients each reaches and the kind of client, in the order they apply: for the same property a later one wins
# (MirrorMaker 2's order: <side>.<client>.* over <client>.*). A sink's consumer reads the source cluster; its
# producers and admin client work on the target here, where the mirror writes.
CLIENT_OVERRIDES: dict[str, tuple[tuple[str, ...], str]] = {
    "consumer.": (("source", "target"), "consumer"),
    "producer.": (("source", "target"), "producer"),
    "admin.": (("source", "target"), "admin"),
    "consumer.override.": (("source",), "consumer"),
    "producer.override.": (("target",), "producer"),
    "admin.override.": (("target",), "admin"),
    **{
        f"{side}.{client}.": ((side,), client)
        for side in ("source", "target")
        for client in ("consumer", "producer", "admin")
    },
}

# Client settings the mirror makes itself, by librdkafka's name: a key setting one is ignored where its value
# asks for what the mirror does, and refused otherwise (the mirror's own value would win in silence).
OWN_CLIENT_SETTINGS: dict[str, dict[str, KeyRule]] = {
    "consumer": {
        "group.id": KeyRule(
            refused="the mirror names its consumers' groups itself: its offsets are in the group "
            "sinkadmin-mirror-<connector> on the target cluster, and it commits none on the source"
        ),
        "enable.auto.commit": KeyRule(
            ignored="the mirror commits offsets itself, as with false",
            refused="the mirror commits its offsets itself: in each transaction (exactly once), or after each batch",
            harmless=("false",),
        ),
        "isolation.level": KeyRule(
            ignored="the mirror's consumers read committed records only, as with read_committed",
            refused="the mirror reads committed records only: the records of aborted transactions are never copied, "
            "and an offset sync is read only once its records committed",
            harmless=("read_committed",),
        ),
        "auto.offset.reset": KeyRule(
            refused="where a partition with no offset in the mirror's group starts is consumer.auto.offset.reset"
        ),
        "enable.partition.eof": KeyRule(refused="the mirror sets it on the consumers that read a topic to its end"),
        "max.poll.records": KeyRule(
            refused="librdkafka's max.poll.records bounds a share consumer's poll only: a transaction's records are "
            "bounded by sinkadmin.commit.max-records"
        ),
    },
    "producer": {
        "enable.idempotence": KeyRule(
            ignored="the mirror's producers are idempotent, as with true",
            refused="the mirror's producers are idempotent: exactly once needs it, and at least once keeps each "
            "partition's order with it",
            harmless=("true",),
        ),
        "transactional.id": KeyRule(
            refused="each task's transactional id is the mirror's (sinkadmin-mirror-<connector>-<task>): a new "
            "runner fences the runners before it by that id"
        ),
        "request.required.acks": IDEMPOTENT_ACKS,
        "queue.buffering.max.ms": KeyRule(
            refused="the mirror's producers linger 5 ms: how long a transaction gathers records is "
            "sinkadmin.commit.interval-ms"
        ),
        "delivery.report.only.error": KeyRule(
            ignored="the mirror reads every record's delivery report, as with false",
            refused="the mirror reads every record's delivery report: where its copy landed is in the offset syncs",
            harmless=("false",),
        ),
    },
    "admin": {},
}
CLIENT_NAMES = {"consumer": "consumers", "producer": "producers", "admin": "admin clients"}
# The Java clients' (de)serializers: the mirror copies keys and values as bytes.
SERIALIZERS = {
    "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
    "value.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
    "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
    "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
}


@dataclass(frozen=True)
class ClientOverride:
    """A key of one of CLIENT_OVERRIDES's prefixes: ``setting`` of the ``client`` clients of ``sides``."""

    prefix: str
    sides: tuple[str, ...]
    client: str
    setting: str


def client_override(key: str) -> ClientOverride | None:
    """What a per-client key sets, under its longest prefix (consumer.override.* is not consumer.*); None for
    another key, and for the mirror's own keys and MirrorMaker 2's under those prefixes
    (consumer.auto.offset.reset, consumer.poll.timeout.ms, admin.timeout.ms)."""
    if MIRROR.key(key) is not None or rule_for(KEY_RULES, key) is not None:
        return None
    prefix = max((p for p in CLIENT_OVERRIDES if key.startswith(p)), key=len, default=None)
    if prefix is None or key == prefix:
        return None
    sides, client = CLIENT_OVERRIDES[prefix]
    return ClientOverride(prefix, sides, client, key[len(prefix) :])


def client_override_rule(override: ClientOverride) -> KeyRule | None:
    """Why a per-client key is refused, or ignored with a note; None when its clients take it."""
    setting, client = override.setting, override.client
    clusters = " and ".join(f"the {side} cluster" for side in override.sides)
    own = OWN_CLIENT_SETTINGS[client].get(property_name(setting))
    if own is not None:
        return own
    if property_name(setting) == "metadata.broker.list":
        brokers = " and ".join(f"{side}.cluster.bootstrap.servers" for side in override.sides)
        return KeyRule(refused=f"a cluster's brokers are {brokers}, for every client of it")
    if setting.startswith(CLIENT_PREFIXES):
        where = " and ".join(f"{side}.cluster.{setting}" for side in override.sides)
        return KeyRule(refused=f"a cluster's TLS and SASL settings are for every client of it: write {where}")
    if setting in SERIALIZERS:
        return KeyRule(
            ignored="the mirror copies keys and values as bytes, as this class does",
            refused="the mirror copies keys and values as bytes: records are not deserialized nor serialized",
            harmless=(SERIALIZERS[setting],),
        )
    unusable = unusable_override(override.prefix, setting, client)
    if unusable is not None:
        return unusable
    if property_clients(setting) == "every client":
        return KeyRule(
            refused=f"librdkafka applies {setting} to every client, and the mirror's clients of {clusters} share one "
            f"configuration: it would reach them all, not only its {CLIENT_NAMES[client]}"
        )
    return None


def _client_overrides(raw: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The librdkafka properties the per-client keys give each cluster's clients (those no rule refuses or
    ignores), in CLIENT_OVERRIDES's order: a consumer takes the consumer properties and a producer the producer
    ones (every client of a cluster is configured with them all: librdkafka keeps a property to its kind of
    client, and the mirror's own settings go after them)."""
    found = [(o, v.strip()) for k, v in raw.items() if (o := client_override(k)) is not None and str(v).strip()]
    overrides: dict[str, dict[str, str]] = {"source": {}, "target": {}}
    for prefix in CLIENT_OVERRIDES:
        for override, value in found:
            if override.prefix == prefix and client_override_rule(override) is None:
                for side in override.sides:
                    overrides[side][override.setting] = value
    return overrides


def _delivery_rules(config: Mapping[str, str]) -> dict[str, KeyRule]:
    """The keys whose meaning depends on the mirror's own keys: MirrorMaker 2's and Kafka Connect's exactly-once
    keys, ignored where they ask for the delivery transaction.producer gives (exactly.once.source.support:
    enabled is exactly once; disabled, and preparing, a cluster's first step towards it, at least once), refused
    otherwise; and MirrorMaker 2's interval of syncing topic settings."""
    exactly_once = _get(config, "transaction.producer").lower() == "true"
    delivery = (
        "exactly once (transaction.producer=true)" if exactly_once else "at least once (transaction.producer=false)"
    )
    refused = (
        f"this config is {delivery}: the mirror's delivery is transaction.producer's, true (its default) exactly "
        "once and false at least once, so set that key for the delivery this value asks"
    )
    return {
        "exactly.once.source.support": KeyRule(
            ignored=f"the mirror is {delivery}, as this value asks",
            refused=refused,
            harmless=("enabled",) if exactly_once else ("disabled", "preparing"),
        ),
        "exactly.once.support": KeyRule(
            ignored=f"the mirror is {delivery}, as this value asks",
            refused=refused,
            harmless=("requested", "required") if exactly_once else (),
        ),
        # (MirrorMaker 2 syncs a replica's settings again at this interval; the mirror only when it creates one.)
        "sync.topic.configs.interval.seconds": KeyRule(
            refused="the mirror gives a replica its source topic's settings when it creates the replica, and does "
            "not sync them again: leave this key out"
        )
        if _get(config, "sync.topic.configs.enabled").lower() == "true"
        else KeyRule(ignored="replicas take no settings of their source topics (sync.topic.configs.enabled=false)"),
    }


def check(result: ConfigValidation, config: dict[str, str]) -> None:
    """Per-key errors of a mirror config, beside the checks every plugin shares (required keys, types, topics)."""
    for pattern in _split(_get(config, "topics.exclude")):
        try:
            re.compile(pattern)
        except re.error as exc:
            result.add("topics.exclude", f"{pattern!r} is not a valid regular expression: {exc}")
    for side in ("source", "target"):
        prefix = f"{side}.cluster."
        for key in config:
            setting = key[len(prefix) :] if key.startswith(prefix) else None
            if setting not in (None, "alias", "bootstrap.servers") and not setting.startswith(CLIENT_PREFIXES):
                guess = closest(key, (f"{prefix}alias", f"{prefix}bootstrap.servers"))
                result.add(
                    key,
                    "not a client setting the mirror passes on (security.protocol, sasl.*, ssl.*)"
                    + (f": did you mean {guess}?" if guess else ""),
                )
        for setting, why in unusable_client_settings(_client_settings(config, side)).items():
            result.add(f"{prefix}{setting}", why)
    for key in ("groups", "groups.exclude", "config.properties.exclude"):
        for pattern in _split(_get(config, key)):
            try:
                re.compile(pattern)
            except re.error as exc:
                result.add(key, f"{pattern!r} is not a valid regular expression: {exc}")
    for key in REPLICATION_FACTORS:
        if (config.get(key) or "").strip() == "0":
            result.add(key, "a replication factor is at least 1, or -1 for the target cluster's default")
    separator = config.get("replication.policy.separator")
    if separator is not None and not TOPIC_NAME_CHARACTERS.fullmatch(separator.strip()):
        result.add(
            "replication.policy.separator",
            "an empty separator would name replicas <source alias><topic>, which neither MirrorMaker 2's tools nor "
            "the mirror can split back into the alias and the topic: leave the key out for '.'"
            if not separator.strip()
            else f"{separator.strip()!r} is not made of a topic name's characters (letters, digits, '.', '_', '-'): "
            "the replicas' names, and the offset syncs and checkpoints topics', would be invalid",
        )
    named_rules = {**KEY_RULES, **_delivery_rules(config)}
    rules = dict(named_rules)
    for key in config:
        override = client_override(key)
        rule = client_override_rule(override) if override is not None else None
        if rule is not None:
            rules[key] = rule
    apply_key_rules(result, config, rules)
    if _get(config, "offset-syncs.topic.location") == "source":
        result.add(
            "offset-syncs.topic.location",
            "the offset syncs are written on the target cluster, in the transaction of the records they describe "
            "(a sync on the source could not be), and survive the source cluster's loss: set target",
        )
    enabled = {key: _get(config, key).lower() == "true" for key in ENABLING}
    for key, needs in ENABLING.items():
        if enabled[key] and needs and not enabled[needs]:
            result.add(key, f"needs {needs}=true: {ENABLING_WHY[key]}")
    same_cluster = _get(config, "source.cluster.bootstrap.servers") == _get(config, "target.cluster.bootstrap.servers")
    if POLICIES.get(_get(config, "replication.policy.class")) == IDENTITY_POLICY and same_cluster:
        result.add(
            "replication.policy.class",
            "IdentityReplicationPolicy into the same cluster would write each topic into itself",
        )
    _refuse_typos(result, config, named_rules)


def _refuse_typos(result: ConfigValidation, config: Mapping[str, str], rules: Mapping[str, KeyRule]) -> None:
    """Refuse a key of no meaning here that is a typo of one of the mirror's keys or of MirrorMaker 2's that it
    knows (emit.checkpoint.enabled): Kafka Connect would pass it, and its setting would be lost in silence.
    Other unknown keys pass, as there."""
    known = {key.name for key in MIRROR.keys} | {name for name in rules if not name.endswith("*")}
    for key in config:
        if (
            key in known
            or key in result.errors
            or key in result.notes
            or client_override(key) is not None
            or key.startswith(("source.cluster.", "target.cluster."))
        ):
            continue
        guess = closest(key, known)
        if guess is not None:
            result.add(key, f"not a key of the mirror: did you mean {guess}?")


@dataclass(frozen=True)
class MirrorSettings:
    source_alias: str
    target_alias: str
    source_bootstrap: str
    target_bootstrap: str
    source_client: dict[str, str]
    target_client: dict[str, str]
    topics: tuple[str, ...]
    topics_regex: str | None
    topics_exclude: tuple[str, ...]
    identity: bool
    separator: str
    exactly_once: bool
    sync_topic_configs: bool
    refresh_topics_s: int
    auto_offset_reset: str
    commit_interval_ms: int
    max_records: int
    emit_offset_syncs: bool = True
    offset_syncs_replication_factor: int = -1
    replication_factor: int = -1
    config_properties_exclude: tuple[str, ...] = ()
    offset_lag_max: int = 100
    emit_checkpoints: bool = True
    checkpoints_interval_s: int = 60
    groups: tuple[str, ...] = (".*",)
    groups_exclude: tuple[str, ...] = ()
    refresh_groups_s: int = 600
    checkpoints_replication_factor: int = -1
    sync_group_offsets: bool = False
    sync_group_offsets_interval_s: int = 60
    emit_heartbeats: bool = True
    heartbeats_interval_s: int = 1
    heartbeats_replication_factor: int = -1
    # The separator in the names of the offset syncs and checkpoints topics (syncs.internal_separator).
    internal_separator: str = "."
    # The librdkafka properties MirrorMaker 2's per-client keys give each cluster's clients (CLIENT_OVERRIDES).
    source_overrides: dict[str, str] = field(default_factory=dict)
    target_overrides: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> MirrorSettings:
        """The typed settings of a config that passed validation (``SinkConfig.parse`` checks it first)."""

        def client(side: str) -> dict[str, str]:
            # The Java client's names (sasl.jaas.config, ssl.truststore.location) as librdkafka takes them,
            # as for every connector's clients.
            return shared_properties(_client_settings(raw, side))

        separator = _get(raw, "replication.policy.separator")
        overrides = _client_overrides(raw)
        return cls(
            source_alias=_get(raw, "source.cluster.alias"),
            target_alias=_get(raw, "target.cluster.alias"),
            source_bootstrap=_get(raw, "source.cluster.bootstrap.servers"),
            target_bootstrap=_get(raw, "target.cluster.bootstrap.servers"),
            source_client=client("source"),
            target_client=client("target"),
            topics=tuple(_split(_get(raw, "topics"))),
            topics_regex=_get(raw, "topics.regex") or None,
            topics_exclude=tuple(_split(_get(raw, "topics.exclude"))),
            identity=POLICIES.get(_get(raw, "replication.policy.class")) == IDENTITY_POLICY,
            separator=separator,
            internal_separator=syncs.internal_separator(
                separator, _get(raw, "replication.policy.internal.topic.separator.enabled").lower() == "true"
            ),
            source_overrides=overrides["source"],
            target_overrides=overrides["target"],
            exactly_once=_get(raw, "transaction.producer").lower() == "true",
            sync_topic_configs=_get(raw, "sync.topic.configs.enabled").lower() == "true",
            refresh_topics_s=int(_get(raw, "refresh.topics.interval.seconds")),
            auto_offset_reset=_get(raw, "consumer.auto.offset.reset"),
            commit_interval_ms=int(_get(raw, "sinkadmin.commit.interval-ms")),
            max_records=int(_get(raw, "sinkadmin.commit.max-records")),
            emit_offset_syncs=_get(raw, "emit.offset-syncs.enabled").lower() == "true",
            offset_syncs_replication_factor=int(_get(raw, "offset-syncs.topic.replication.factor")),
            replication_factor=int(_get(raw, "replication.factor")),
            config_properties_exclude=tuple(_split(_get(raw, "config.properties.exclude"))),
            offset_lag_max=int(_get(raw, "offset.lag.max")),
            emit_checkpoints=_get(raw, "emit.checkpoints.enabled").lower() == "true",
            checkpoints_interval_s=int(_get(raw, "emit.checkpoints.interval.seconds")),
            groups=tuple(_split(_get(raw, "groups"))),
            groups_exclude=tuple(_split(_get(raw, "groups.exclude"))),
            refresh_groups_s=int(_get(raw, "refresh.groups.interval.seconds")),
            checkpoints_replication_factor=int(_get(raw, "checkpoints.topic.replication.factor")),
            sync_group_offsets=_get(raw, "sync.group.offsets.enabled").lower() == "true",
            sync_group_offsets_interval_s=int(_get(raw, "sync.group.offsets.interval.seconds")),
            emit_heartbeats=_get(raw, "emit.heartbeats.enabled").lower() == "true",
            heartbeats_interval_s=int(_get(raw, "emit.heartbeats.interval.seconds")),
            heartbeats_replication_factor=int(_get(raw, "heartbeats.topic.replication.factor")),
        )

    def clients(self, side: str) -> dict[str, str | int | float | bool]:
        """What every client of one cluster (``source`` or ``target``) is configured with: its brokers, its
        client settings, and the consumer and producer properties of MirrorMaker 2's per-client keys (librdkafka
        applies each to its kind of client only)."""
        if side == "source":
            return {"bootstrap.servers": self.source_bootstrap, **self.source_client, **self.source_overrides}
        return {"bootstrap.servers": self.target_bootstrap, **self.target_client, **self.target_overrides}

    @property
    def offset_syncs_topic(self) -> str:
        """The offset syncs' topic on the target cluster, as MirrorMaker 2's replication policy names it."""
        return syncs.offset_syncs_topic(self.source_alias, self.internal_separator)

    @property
    def checkpoints_topic(self) -> str:
        """The checkpoints' topic on the target cluster, as MirrorMaker 2's replication policy names it."""
        return syncs.checkpoints_topic(self.source_alias, self.internal_separator)

    def target_topic(self, source_topic: str) -> str:
        """The replica's name: the source alias and the separator before it (DefaultReplicationPolicy), or the
        same name (IdentityReplicationPolicy; but heartbeats topics are prefixed all the same, as MirrorMaker
        2's does, or they would land in the target's own)."""
        if self.identity and not syncs.is_heartbeats_topic(source_topic, self.separator):
            return source_topic
        return f"{self.source_alias}{self.separator}{source_topic}"

    def selects_group(self, group: str) -> bool:
        """Whether a source consumer group is checkpointed: matching groups, and not groups.exclude."""
        return any(re.fullmatch(p, group) for p in self.groups) and not any(
            re.fullmatch(p, group) for p in self.groups_exclude
        )

    def copies_setting(self, name: str) -> bool:
        """Whether a replica takes this setting of its source topic (not in config.properties.exclude)."""
        return not any(re.fullmatch(p, name) for p in self.config_properties_exclude)

    def selects(self, topic: str) -> bool:
        """Whether a source topic is mirrored: named in topics or matching topics.regex, and not excluded; and
        heartbeats topics always (as MirrorMaker 2), but not those that came from the target (a cycle)."""
        if syncs.is_internal_topic(topic, self.internal_separator):
            return False  # (as MirrorMaker 2's isInternalTopic: never, whatever topics.exclude says)
        # Into the same cluster, this mirror's own replicas are never mirrored again (east.east.orders...).
        own_replica = self.source_bootstrap == self.target_bootstrap and topic.startswith(self.target_topic(""))
        if syncs.is_heartbeats_topic(topic, self.separator):
            came_from = topic.split(self.separator)[:-1]
            return not own_replica and self.target_alias not in came_from
        chosen = topic in self.topics or bool(self.topics_regex and re.fullmatch(self.topics_regex, topic))
        return chosen and not own_replica and not any(re.fullmatch(p, topic) for p in self.topics_exclude)


def source(config: SinkConfig) -> SourceCluster:
    """The source cluster: where the supervisor lists the mirrored topics and their partitions."""
    settings: MirrorSettings = config.settings
    return SourceCluster(settings.source_bootstrap, settings.source_client, settings.selects)


def probe(config: SinkConfig) -> list[CheckResult]:
    """Reach the target cluster and say which replicas are there already."""
    from confluent_kafka.admin import AdminClient

    settings: MirrorSettings = config.settings
    admin = AdminClient(settings.clients("target"))
    metadata = admin.list_topics(timeout=5)
    replicas = sorted(t for t in metadata.topics if not settings.identity and t.startswith(settings.target_topic("")))
    found = f"{len(replicas)} replica topic(s) there already" if replicas else "replicas are created by the tasks"
    detail = f"{len(metadata.brokers)} broker(s) answered at {settings.target_bootstrap}; {found}"
    return [CheckResult("Target cluster", CheckStatus.OK, detail)]
