"""The Kafka mirror's settings, as MirrorMaker 2 names them where the meaning is the same: checked per key,
then typed for the mirror's engine (``sinks.mirror.engine``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
POLICIES = {"default": DEFAULT_POLICY, "identity": IDENTITY_POLICY}
# MirrorMaker 2's default of topics.exclude: internal and replica topics are never mirrored.
DEFAULT_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"
# Client settings each cluster's clients take, under source.cluster. / target.cluster. (as MM2 names them).
CLIENT_PREFIXES = ("security.protocol", "sasl.", "ssl.")

DEFAULTS = {
    "source.cluster.alias": "source",
    "target.cluster.alias": "target",
    "replication.policy.class": DEFAULT_POLICY,
    "replication.policy.separator": ".",
    "topics.exclude": DEFAULT_EXCLUDE,
    "transaction.producer": "true",
    "sync.topic.configs.enabled": "true",
    "refresh.topics.interval.seconds": "600",
    "consumer.auto.offset.reset": "earliest",
    "sinkadmin.commit.interval-ms": "1000",
    "sinkadmin.commit.max-records": "10000",
}
# MirrorMaker 2 keys the mirror cannot honour, and why.
REFUSED = {
    "emit.checkpoints.enabled": "consumer offsets are not translated: the mirror's own offsets are committed to "
    "the target cluster with its records (set false)",
    "sync.group.offsets.enabled": "consumer group offsets are not synced (set false)",
    "emit.heartbeats.enabled": "heartbeats are not emitted (set false)",
}


def _get(config: Mapping[str, str], name: str) -> str:
    value = config.get(name)
    return value.strip() if value is not None and str(value).strip() else DEFAULTS.get(name, "")


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def check(config: Mapping[str, str]) -> dict[str, list[str]]:
    """Per-key errors of a mirror config."""
    errors: dict[str, list[str]] = {}

    def add(key: str, message: str) -> None:
        errors.setdefault(key, []).append(message)

    for side in ("source", "target"):
        key = f"{side}.cluster.bootstrap.servers"
        if not _get(config, key):
            add(key, f'Missing required configuration "{key}" which has no default value.')
    if not _get(config, "topics") and not _get(config, "topics.regex"):
        add("topics", "Must configure one of topics or topics.regex")
    if _get(config, "topics.regex"):
        try:
            re.compile(_get(config, "topics.regex"))
        except re.error as exc:
            add("topics.regex", f"not a valid regular expression: {exc}")
    for pattern in _split(_get(config, "topics.exclude")):
        try:
            re.compile(pattern)
        except re.error as exc:
            add("topics.exclude", f"{pattern!r} is not a valid regular expression: {exc}")
    policy = _get(config, "replication.policy.class")
    if policy not in POLICIES and policy not in POLICIES.values():
        add(
            "replication.policy.class",
            "use DefaultReplicationPolicy (prefix with the source alias) or IdentityReplicationPolicy",
        )
    for key in ("transaction.producer", "sync.topic.configs.enabled"):
        if _get(config, key).lower() not in ("true", "false"):
            add(
                key,
                f"Invalid value {_get(config, key)} for configuration {key}: Expected value to be either true or false",
            )
    for key in ("refresh.topics.interval.seconds", "sinkadmin.commit.interval-ms", "sinkadmin.commit.max-records"):
        try:
            if int(_get(config, key)) < 1:
                add(key, f"Invalid value {_get(config, key)} for configuration {key}: Value must be at least 1")
        except ValueError:
            add(key, f"Invalid value {_get(config, key)} for configuration {key}: Not a number")
    for key, why in REFUSED.items():
        if _get(config, key).lower() == "true":
            add(key, why)
    if POLICIES.get(policy, policy) == IDENTITY_POLICY and _get(config, "source.cluster.bootstrap.servers") == _get(
        config, "target.cluster.bootstrap.servers"
    ):
        add(
            "replication.policy.class",
            "IdentityReplicationPolicy into the same cluster would write each topic into itself",
        )
    return errors


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

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> MirrorSettings:
        errors = check(raw)
        if errors:
            raise ValueError("; ".join(f"{k}: {' '.join(v)}" for k, v in sorted(errors.items())))

        def client(side: str) -> dict[str, str]:
            prefix = f"{side}.cluster."
            return {
                k[len(prefix) :]: str(v)
                for k, v in raw.items()
                if k.startswith(prefix) and k[len(prefix) :].startswith(CLIENT_PREFIXES)
            }

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
            identity=POLICIES.get(_get(raw, "replication.policy.class"), _get(raw, "replication.policy.class"))
            == IDENTITY_POLICY,
            separator=_get(raw, "replication.policy.separator"),
            exactly_once=_get(raw, "transaction.producer").lower() == "true",
            sync_topic_configs=_get(raw, "sync.topic.configs.enabled").lower() == "true",
            refresh_topics_s=int(_get(raw, "refresh.topics.interval.seconds")),
            auto_offset_reset=_get(raw, "consumer.auto.offset.reset"),
            commit_interval_ms=int(_get(raw, "sinkadmin.commit.interval-ms")),
            max_records=int(_get(raw, "sinkadmin.commit.max-records")),
        )

    def target_topic(self, source_topic: str) -> str:
        """The replica's name: the source alias and the separator before it (DefaultReplicationPolicy), or the
        same name (IdentityReplicationPolicy)."""
        return source_topic if self.identity else f"{self.source_alias}{self.separator}{source_topic}"

    def selects(self, topic: str) -> bool:
        """Whether a source topic is mirrored: named in topics or matching topics.regex, and not excluded."""
        chosen = topic in self.topics or bool(self.topics_regex and re.fullmatch(self.topics_regex, topic))
        return chosen and not any(re.fullmatch(p, topic) for p in self.topics_exclude)
