"""The Kafka mirror's settings, as MirrorMaker 2 names them where the meaning is the same: checked per key,
then typed for the mirror's engine (``sinks.mirror.engine``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from connectors.config.definitions import CheckResult, CheckStatus, SourceCluster
from connectors.config.kafka_clients import shared_properties, unusable_client_settings
from connectors.config.validation import KeyRule, apply_key_rules
from sinks.mirror.plugin import DEFAULT_POLICY, IDENTITY_POLICY, MIRROR
from sinks.mirror.syncs import is_heartbeats_topic

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
                result.add(key, "not a client setting the mirror passes on (security.protocol, sasl.*, ssl.*)")
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
    apply_key_rules(result, config, KEY_RULES)
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

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> MirrorSettings:
        """The typed settings of a config that passed validation (``SinkConfig.parse`` checks it first)."""

        def client(side: str) -> dict[str, str]:
            # The Java client's names (sasl.jaas.config, ssl.truststore.location) as librdkafka takes them,
            # as for every connector's clients.
            return shared_properties(_client_settings(raw, side))

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
            separator=_get(raw, "replication.policy.separator"),
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
        """What every client of one cluster (``source`` or ``target``) is configured with: its brokers and its
        client settings."""
        if side == "source":
            return {"bootstrap.servers": self.source_bootstrap, **self.source_client}
        return {"bootstrap.servers": self.target_bootstrap, **self.target_client}

    def target_topic(self, source_topic: str) -> str:
        """The replica's name: the source alias and the separator before it (DefaultReplicationPolicy), or the
        same name (IdentityReplicationPolicy; but heartbeats topics are prefixed all the same, as MirrorMaker
        2's does, or they would land in the target's own)."""
        if self.identity and not is_heartbeats_topic(source_topic, self.separator):
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
        if topic.startswith(("__", ".")) or topic.endswith((".internal", "-internal")):
            return False  # (internal topics, as MirrorMaker 2's isInternalTopic: never, whatever topics.exclude says)
        # Into the same cluster, this mirror's own replicas are never mirrored again (east.east.orders...).
        own_replica = self.source_bootstrap == self.target_bootstrap and topic.startswith(self.target_topic(""))
        if is_heartbeats_topic(topic, self.separator):
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
