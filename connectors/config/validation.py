"""The one validator for connector configs: form, admin, API and workers use it.

``validate_config`` reports errors per key (Kafka Connect's validate shape is
``ConfigValidation.to_connect()``); ``SinkConfig.parse`` turns a valid config
into typed values for the runtime.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlsplit

from connectors.config.definitions import (
    CONVERTERS,
    METADATA_COLUMNS,
    REGISTRY_CONVERTERS,
    SHARED_KEYS,
    ConfigKey,
    KeyType,
    Plugin,
    resolve,
)
from connectors.config.kafka_clients import (
    CONSUMER_PROPERTIES,
    EVERY_CLIENT_PROPERTIES,
    PRODUCER_PROPERTIES,
    TRANSLATED_SETTINGS,
    property_name,
    unusable_client_overrides,
    unusable_client_settings,
)
from connectors.config.plugins import PLUGINS, resolve_plugin
from connectors.config.secrets import HIDDEN, hidden_password_left, redact
from connectors.java_regex import compile_java
from connectors.smt import TransformChain, parse_chain, transformation_classes
from connectors.smt.chain import ColumnarChain
from connectors.smt.debezium import ColumnarDebezium

# sinkadmin.commit.write-target-ms=0 means the commit interval, and at least
# this: at short intervals a commit's cycle (its longest write, which on a
# busy host runs well past its sizing, plus the round trips and the catalog
# commit) then stays within the commit-latency target at p99, and a Spark
# job's own fixed cost on a warm server stays a small part of each write
# (docs/spark.md, "The default write target"; docs/benchmarks.md,
# "Measurements behind the runtime's design").
WRITE_TARGET_MIN_MS = 1500
SHARED_DEFAULTS = {key.name: key.default for key in SHARED_KEYS if key.default is not None}
TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
# Transformations that rename a record's topic: refused for a sink that writes by topic (Plugin.writes_by_topic),
# which stages and writes records by the topic they were consumed from, rather than ignored.
ROUTING_TRANSFORMS = (
    "org.apache.kafka.connect.transforms.RegexRouter",
    "org.apache.kafka.connect.transforms.TimestampRouter",
)


@dataclass(frozen=True)
class KeyRule:
    """What a sink does with a key of the connector it replaces that is not one of its own keys.

    A key is ignored, with a note saying why, when ignoring it changes nothing
    that is written; it is refused, with an error saying why, when ignoring it
    would. ``harmless``: values of a refused key that mean what the sink does
    anyway (``hive.integration=false``), so that the key is ignored with them.
    """

    ignored: str = ""
    refused: str = ""
    harmless: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.ignored and (self.harmless or not self.refused):
            raise ValueError("a rule that can ignore its key says why (ignored)")


def rule_for(rules: Mapping[str, KeyRule], key: str) -> KeyRule | None:
    """The rule of ``key``: its own, or the longest ``prefix.*`` rule that covers it."""
    if key in rules:
        return rules[key]
    families = [name for name in rules if name.endswith("*") and key.startswith(name[:-1])]
    return rules[max(families, key=len)] if families else None


def apply_key_rules(result: ConfigValidation, config: Mapping[str, str], rules: Mapping[str, KeyRule]) -> None:
    """Ignore (with a note) or refuse (with an error) each key of ``config`` that one of ``rules`` covers."""
    for key, value in config.items():
        rule = rule_for(rules, key)
        if rule is None or not value.strip():
            continue
        if rule.refused and value.strip().lower() not in {h.lower() for h in rule.harmless}:
            result.add(key, rule.refused)
        else:
            result.ignore(key, rule.ignored)


def _edit_distance(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``: a character added, dropped or changed, or two neighbours swapped."""
    before: list[int] = []  # (the row two characters of ``a`` back, for a swap)
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], before[j - 2] + 1)
        before, previous = previous, current
    return previous[len(b)]


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` is most likely a typo of: at most two edits away (one for a name under eight
    characters), and the nearest; None when none is that near."""
    most = 1 if len(name) < 8 else 2
    near = sorted((d, c) for c in candidates if c != name and (d := _edit_distance(name, c)) <= most)
    return near[0][1] if near else None


# acks (librdkafka's request.required.acks) of an idempotent producer, every sink's and the mirror's.
IDEMPOTENT_ACKS = KeyRule(
    ignored="an idempotent producer waits for every in-sync replica, as with all",
    refused="an idempotent producer waits for every in-sync replica (all)",
    harmless=("all", "-1"),
)
# Kafka Connect's per-client overrides (KIP-458) of a coordinated sink: the clients each reaches, by kind.
CLIENT_OVERRIDE_PREFIXES = {"consumer.override.": "consumer", "producer.override.": "producer"}
# What makes a consumer a member of a group, which the task's consumer never is: the coordinator assigns it its
# partitions, and their offsets are the commit ledger's.
_GROUP_MEMBERSHIP = (
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
    "group.instance.id",
    "group.protocol",
    "group.protocol.type",
    "group.remote.assignor",
    "auto.commit.interval.ms",
)
_LEDGER_OFFSETS = "offsets come from the commit ledger, and the consumer commits none"
# Client settings a coordinated sink makes itself, by librdkafka's name, under the override prefix that reaches
# them: a key setting one is ignored where its value asks for what the sink does, and refused otherwise.
LEDGER_CLIENT_SETTINGS: dict[str, dict[str, KeyRule]] = {
    "consumer.override.": {
        "auto.offset.reset": KeyRule(
            refused="offsets come from the commit ledger: where a new partition starts is consumer.auto.offset.reset, "
            "and what an offset out of range does is sinkadmin.offsets.out-of-range"
        ),
        "enable.auto.commit": KeyRule(
            ignored=f"{_LEDGER_OFFSETS}, as with false",
            refused=f"{_LEDGER_OFFSETS}: the connector's group is given the offsets of each commit once it is "
            "applied, for Kafka's lag tools",
            harmless=("false",),
        ),
        "enable.auto.offset.store": KeyRule(
            ignored=f"{_LEDGER_OFFSETS}, as with false", refused=_LEDGER_OFFSETS, harmless=("false",)
        ),
        "enable.partition.eof": KeyRule(
            ignored="the task's consumer reads no end-of-partition events, as with false",
            refused="the task's consumer takes each message as a record: end-of-partition events are not read",
            harmless=("false",),
        ),
        "max.poll.records": KeyRule(
            ignored="how many records a poll returns changes nothing written: the task takes the records librdkafka "
            "fetched as they come (bounded by consumer.override.queued.max.messages.kbytes), and a commit's are "
            "bounded by sinkadmin.commit.max-records"
        ),
        **{
            name: KeyRule(
                ignored="the task's consumer joins no group: the coordinator assigns it its partitions, so no group "
                "membership setting applies"
            )
            for name in _GROUP_MEMBERSHIP
        },
    },
    "producer.override.": {
        "enable.idempotence": KeyRule(
            ignored="the sink's producers are idempotent, as with true",
            refused="the sink's producers are idempotent: a send retried is never written twice (dead letters, "
            "the commit protocol's events)",
            harmless=("true",),
        ),
        "request.required.acks": IDEMPOTENT_ACKS,
        "transactional.id": KeyRule(
            refused="the sink's producers send no transactions: its exactly once is the commit ledger's, and a "
            "transactional producer would refuse every send made outside one"
        ),
    },
}


def unusable_override(prefix: str, setting: str, client: str) -> KeyRule | None:
    """Why ``prefix + setting`` is refused when librdkafka's ``client`` clients cannot take ``setting``
    (``unusable_client_overrides``), with the property it is most likely a typo of; None when they can."""
    unusable = unusable_client_overrides({setting: ""}, client).get(setting)
    if unusable is None:
        return None
    names = {"consumer": CONSUMER_PROPERTIES, "producer": PRODUCER_PROPERTIES}.get(client, frozenset())
    guess = closest(setting, names | EVERY_CLIENT_PROPERTIES)
    return KeyRule(refused=unusable + (f" (did you mean {prefix}{guess}?)" if guess else ""))


def _check_kafka_clients(result: ConfigValidation, config: dict[str, str]) -> None:
    """A coordinated sink's Kafka client settings: the Java client's that cannot be read as written, and the
    per-client overrides its librdkafka clients would not take, or that would undo what the sink sets itself."""
    for key, why in unusable_client_settings(config).items():
        result.add(key, why)
    rules: dict[str, KeyRule] = {}
    for prefix, client in CLIENT_OVERRIDE_PREFIXES.items():
        overrides = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix) and k != prefix}
        for setting, why in unusable_client_settings(overrides).items():
            result.add(prefix + setting, why)
        for setting in overrides:
            if setting in TRANSLATED_SETTINGS:
                continue  # (read as the connector's own are)
            own = LEDGER_CLIENT_SETTINGS[prefix].get(property_name(setting))
            rule = own or unusable_override(prefix, setting, client)
            if rule is not None:
                rules[prefix + setting] = rule
    apply_key_rules(result, config, rules)


@dataclass
class ConfigValidation:
    plugin: Plugin | None
    config: dict[str, str]
    errors: dict[str, list[str]] = field(default_factory=dict)
    # Keys of the replaced connector that are accepted and ignored, because ignoring them changes nothing
    # in what is written (a key that would is an error), with why: shown beside the key, never an error.
    notes: dict[str, list[str]] = field(default_factory=dict)

    def add(self, key: str, message: str) -> None:
        self.errors.setdefault(key, []).append(message)

    def ignore(self, key: str, reason: str) -> None:
        """Accept ``key`` and ignore it, saying why (``notes``)."""
        self.notes.setdefault(key, []).append(f"ignored: {reason}")

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def error_count(self) -> int:
        return sum(len(v) for v in self.errors.values())

    def message(self) -> str:
        """One text listing every error, as Connect puts in a 400 response."""
        lines = [f"{key}: {msg}" for key, msgs in sorted(self.errors.items()) for msg in msgs]
        return (
            f"Connector configuration is invalid and contains the following {self.error_count} error(s):\n"
            + "\n".join(lines)
            + "\nYou can also find the above list of errors at the endpoint "
            "`/connector-plugins/{connectorType}/config/validate`"
        )

    def to_connect(self) -> dict[str, Any]:
        """The body of PUT /connector-plugins/{plugin}/config/validate."""
        plugin = self.plugin
        configs: list[dict[str, Any]] = []
        listed: set[str] = set()
        if plugin is not None:
            for key in plugin.keys:
                configs.append(
                    _config_entry(
                        key, self.config.get(key.name), self.errors.get(key.name, []), notes=self.notes.get(key.name)
                    )
                )
                listed.add(key.name)
        for name in sorted((set(self.errors) | set(self.notes)) - listed):
            configs.append(
                _config_entry(
                    None, self.config.get(name), self.errors.get(name, []), name=name, notes=self.notes.get(name)
                )
            )
        return {
            "name": plugin.class_name if plugin else self.config.get("connector.class", ""),
            "error_count": self.error_count,
            "groups": plugin.groups if plugin else [],
            "configs": configs,
        }


def _config_entry(
    key: ConfigKey | None, value: str | None, errors: list[str], name: str = "", notes: list[str] | None = None
) -> dict[str, Any]:
    key_name = key.name if key else name
    definition = {
        "name": key_name,
        "type": key.type.value if key else "STRING",
        "required": key.required if key else False,
        "default_value": key.default if key else None,
        "importance": key.importance.value if key else "LOW",
        "documentation": key.documentation if key else "",
        "group": key.group if key else None,
        "width": key.width if key else "NONE",
        "display_name": key.label if key else key_name,
        "dependents": list(key.dependents) if key else [],
        "order": key.order if key else -1,
    }
    shown = None if (key and key.type is KeyType.PASSWORD and value) else value
    if key and key.type is KeyType.PASSWORD and value:
        shown = "[hidden]"
    value_info: dict[str, Any] = {
        "name": key_name,
        "value": shown,
        "recommended_values": list(key.choices) if key else [],
        "errors": list(errors),
        "visible": True,
    }
    if notes:
        # (Beyond Kafka Connect's shape: a key accepted and ignored, and why.)
        value_info["notes"] = list(notes)
    return {"definition": definition, "value": value_info}


def normalize_config(raw: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Config values as strings, as Kafka Connect keeps them; plus per-key type errors."""
    config: dict[str, str] = {}
    errors: dict[str, str] = {}
    for raw_key, value in raw.items():
        key = str(raw_key)
        if isinstance(value, bool):
            config[key] = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            config[key] = str(value)
        elif value is None:
            errors[key] = "a value is required (null given)"
        else:
            errors[key] = f"must be a string, not {type(value).__name__}"
    return config, errors


def validate_config(raw: Mapping[str, Any], *, plugin_hint: str | None = None) -> ConfigValidation:
    config, type_errors = normalize_config(raw)
    connector_class = config.get("connector.class") or plugin_hint or ""
    plugin = resolve_plugin(connector_class) if connector_class else None
    result = ConfigValidation(plugin=plugin, config=config)
    for key, message in type_errors.items():
        result.add(key, message)

    if not connector_class:
        result.add("connector.class", 'Missing required configuration "connector.class" which has no default value.')
        return result
    if plugin is None:
        known = ", ".join(repr(p.short_name) for p in PLUGINS)
        related = next(
            (
                how
                for p in PLUGINS
                for name, how in p.related_classes
                if connector_class in (name, name.rsplit(".")[-1])
            ),
            None,
        )
        result.add(
            "connector.class",
            f"{connector_class!r} is not a connector class here: {related}"
            if related
            else f"Unknown connector class {connector_class!r}; use one of {known}",
        )
        return result

    for definition in plugin.keys:
        _check_key(result, definition, config.get(definition.name))
    _check_mapped_keys(result, plugin, config)
    _check_topics(result, plugin, config)
    _check_converters(result, config)
    _check_errors(result, plugin, config)
    if plugin.check:
        resolve(plugin.check)(result, config)
    _check_transforms(result, plugin, config)
    if plugin.coordinated:
        _check_kafka_clients(result, config)
    _check_own_namespace(result, plugin, config)
    _check_hidden_passwords(result, config)
    return result


def _check_transforms(result: ConfigValidation, plugin: Plugin, config: dict[str, str]) -> None:
    """Kafka Connect's transforms and predicates, every key of theirs checked (connectors.smt)."""
    if not any(key == "transforms" or key.startswith(("transforms.", "predicates")) for key in config):
        return
    if not plugin.coordinated:
        for key in ("transforms", "predicates"):
            if config.get(key, "").strip():
                result.add(
                    key, "the mirror copies records as they are: Kafka Connect transforms are not supported on it"
                )
        return
    for key, messages in parse_chain(config)[1].items():
        for message in messages:
            result.add(key, message)
    for alias, class_name in transformation_classes(config).items():
        if class_name in ROUTING_TRANSFORMS and plugin.writes_by_topic:
            result.add(
                f"transforms.{alias}.type",
                f"{class_name.rsplit('.', 1)[1]} renames records' topics, and the {plugin.short_name} sink writes "
                "records by the topic they were consumed from: routing transforms are not supported on it yet",
            )


def _check_hidden_passwords(result: ConfigValidation, config: dict[str, str]) -> None:
    # A URI shown with its password hidden came back for a key that has no
    # stored password to keep (a new connector, a renamed key, another user).
    for key, value in config.items():
        if hidden_password_left(value):
            result.add(key, f"the password in this URI is shown as {HIDDEN}: type the password itself")


def _check_key(result: ConfigValidation, key: ConfigKey, value: str | None) -> None:
    if value is None or value == "":
        if key.required:
            result.add(key.name, f'Missing required configuration "{key.name}" which has no default value.')
        return
    if key.type in (KeyType.INT, KeyType.LONG):
        try:
            number = int(value)
        except ValueError:
            result.add(key.name, f"Invalid value {value} for configuration {key.name}: Not a number of type {key.type}")
            return
        if key.minimum is not None and number < key.minimum:
            result.add(
                key.name, f"Invalid value {number} for configuration {key.name}: Value must be at least {key.minimum}"
            )
    elif key.type is KeyType.BOOLEAN and value.strip().lower() not in ("true", "false"):
        result.add(
            key.name,
            f"Invalid value {value} for configuration {key.name}: Expected value to be either true or false",
        )
    chosen = value.strip().lower() if key.choices_any_case else value
    if key.choices and chosen not in key.choices:
        result.add(
            key.name, f"Invalid value {value} for configuration {key.name}: must be one of {', '.join(key.choices)}"
        )


def _check_mapped_keys(result: ConfigValidation, plugin: Plugin, config: dict[str, str]) -> None:
    """A mapped key's value is checked as its target's would be, and the mapping noted beside it."""
    for mapped in plugin.mapped_keys:
        raw = config.get(mapped.name, "").strip()
        if not raw:
            continue
        if config.get(mapped.target, "").strip():
            result.ignore(mapped.name, f"{mapped.target} is set too, and is the one used")
            continue
        value = mapped.value(raw)
        target = plugin.key(mapped.target)
        if value is None or target is None:
            result.add(mapped.name, f"Invalid value {raw} for configuration {mapped.name}: Not a whole number")
            continue
        checked = ConfigValidation(plugin=plugin, config={})
        _check_key(checked, target, value)
        for message in checked.errors.get(target.name, []):
            result.add(mapped.name, f"as {mapped.target}={value}: {message}")
        if not checked.errors:
            result.notes.setdefault(mapped.name, []).append(f"mapped: {mapped.target}={value}")


def split_list(value: str | None) -> list[str]:
    """A comma-separated value's items, stripped, empty ones left out."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _check_topics(result: ConfigValidation, plugin: Plugin, config: dict[str, str]) -> None:
    topics = split_list(config.get("topics"))
    regex = config.get("topics.regex", "").strip()
    if topics and regex:
        for key in ("topics", "topics.regex"):
            result.add(key, "set either topics or topics.regex, not both")
    elif not topics and not regex:
        result.add("topics", "Must configure one of topics or topics.regex")
    for topic in topics:
        if not TOPIC_NAME.match(topic):
            result.add("topics", f"{topic!r} is not a valid topic name (letters, digits, '.', '_', '-'; at most 249)")
    if regex:
        try:
            compile_java(regex)
        except ValueError as exc:
            result.add("topics.regex", f"not a valid regular expression: {exc}")
    if not plugin.coordinated:
        return
    control_key = plugin.key(plugin.control_topic_key)
    control = config.get(plugin.control_topic_key) or (control_key.default if control_key else "") or ""
    if not TOPIC_NAME.match(control):
        result.add(plugin.control_topic_key, f"{control!r} is not a valid topic name")
    elif control in topics or (regex and _safe_fullmatch(regex, control)):
        result.add(plugin.control_topic_key, "the control topic cannot also be a source topic")


def _safe_fullmatch(pattern: str, text: str) -> bool:
    try:
        return compile_java(pattern).fullmatch(text) is not None
    except ValueError:
        return False


def _check_converters(result: ConfigValidation, config: dict[str, str]) -> None:
    for key in ("key.converter", "value.converter"):
        value = config.get(key)
        if value and value not in CONVERTERS:
            result.add(
                key,
                f"unknown converter {value!r}; use json, string, bytearray or avro "
                "(or their Kafka Connect class names)",
            )
    registry = split_list(config.get("value.converter.schema.registry.url"))
    _check_registry(config, registry, result)
    if CONVERTERS.get(config.get("value.converter", "json")) == "avro":
        schema = config.get("value.converter.avro.schema", "")
        if registry:
            if schema:
                result.add(
                    "value.converter.avro.schema",
                    "set either the schema or value.converter.schema.registry.url: with a registry, each value's "
                    "schema is the one registered under its schema id",
                )
        elif not schema:
            result.add(
                "value.converter.avro.schema",
                "the avro converter needs the value schema (Avro JSON), or value.converter.schema.registry.url",
            )
        else:
            error = avro_schema_error(schema)
            if error:
                result.add("value.converter.avro.schema", error)
    columns = split_list(config.get("sinkadmin.metadata-columns"))
    for column in columns:
        if column not in METADATA_COLUMNS:
            result.add(
                "sinkadmin.metadata-columns", f"unknown metadata column {column!r}; use {', '.join(METADATA_COLUMNS)}"
            )


def _check_registry(config: Mapping[str, Any], urls: list[str], result: ConfigValidation) -> None:
    key = "value.converter.schema.registry.url"
    converter = config.get("value.converter", "json")
    if urls and converter not in REGISTRY_CONVERTERS:
        result.add(key, "a Schema Registry is used by the avro and json-schema converters only: set value.converter")
    if not urls and REGISTRY_CONVERTERS.get(converter) == "JSON":
        result.add(key, "the json-schema converter needs the Schema Registry's URL")
    for url in urls:
        parsed = urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            result.add(key, f"{redact(url)} is not an http(s) URL")
    source = config.get("value.converter.basic.auth.credentials.source", "")
    user_info = config.get("value.converter.basic.auth.user.info", "")
    if source == "USER_INFO" and ":" not in user_info:
        result.add("value.converter.basic.auth.user.info", "USER_INFO credentials need user:password here")
    if source == "URL" and not all(urlsplit(url).username for url in urls):
        result.add(
            "value.converter.basic.auth.credentials.source", "URL credentials need user:password@ in every registry URL"
        )


def avro_schema_error(schema: str) -> str | None:
    import fastavro

    try:
        parsed = json.loads(schema)
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    try:
        record = fastavro.parse_schema(parsed)
    except Exception as exc:  # fastavro raises several types for a bad schema
        return f"not a valid Avro schema: {exc}"
    if not isinstance(record, dict) or record.get("type") != "record":
        return "the value schema must be an Avro record"
    return None


def _check_errors(result: ConfigValidation, plugin: Plugin, config: dict[str, str]) -> None:
    table = "errors.deadletterqueue.table.name"
    if config.get(table, "").strip() and plugin.key(table) is None:
        # (A key under errors.* passes as Kafka Connect's do; this one would lose records in silence.)
        result.add(
            table, f"the {plugin.short_name} sink has no dead-letter table; use errors.deadletterqueue.topic.name"
        )
    dlq = config.get("errors.deadletterqueue.topic.name", "").strip()
    if not dlq:
        return
    if not TOPIC_NAME.match(dlq):
        result.add("errors.deadletterqueue.topic.name", f"{dlq!r} is not a valid topic name")
    if dlq in split_list(config.get("topics")):
        result.add("errors.deadletterqueue.topic.name", "the dead-letter topic cannot be a source topic")
    if config.get("errors.tolerance", "none") != "all":
        result.add("errors.deadletterqueue.topic.name", "a dead-letter topic needs errors.tolerance=all")


def _check_own_namespace(result: ConfigValidation, plugin: Plugin, config: dict[str, str]) -> None:
    # Kafka Connect passes unknown keys through; in a namespace the sink owns
    # (sinkadmin.*, and the replaced connector's: iceberg.*, hoodie.*, ...) an
    # unknown key is a typo, and a silent typo is a lost setting. A key the
    # sink's own checks ignored or refused is known to them.
    for key in config:
        namespace = plugin.namespace_of(key)
        if (
            namespace is None
            or plugin.key(key) is not None
            or any(key.startswith(family.prefix) for family in plugin.prefix_keys)
            or key in result.errors
            or key in result.notes
        ):
            continue
        if namespace == "sinkadmin.":
            result.add(key, "unknown sinkadmin setting")
        else:
            result.add(
                key,
                f"unknown {namespace}* setting: not a key of this sink nor one it knows of the "
                f"{plugin.title or plugin.short_name} connector it replaces (a typo would be a lost setting)",
            )


def config_notes(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """The keys of a config that are accepted and ignored, with why: the validator's notes, as the validate
    API reports them beside each key and a stored connector's API and page show them."""
    return validate_config(config).notes


@dataclass(frozen=True)
class SchemaRegistryConfig:
    """``value.converter.schema.registry.url`` and its basic auth keys, as Confluent's AvroConverter names them."""

    urls: tuple[str, ...]
    # (user, password) for HTTP basic auth, from USER_INFO or the URL.
    credentials: tuple[str, str] | None = None
    # What the values' schema ids name: AVRO or JSON (Schema).
    schema_type: str = "AVRO"

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SchemaRegistryConfig | None:
        urls = tuple(split_list(raw.get("value.converter.schema.registry.url")))
        schema_type = REGISTRY_CONVERTERS.get(raw.get("value.converter", "json"))
        if not urls or schema_type is None:
            return None
        source = raw.get("value.converter.basic.auth.credentials.source", "")
        credentials = None
        if source == "USER_INFO":
            user, _, password = raw.get("value.converter.basic.auth.user.info", "").partition(":")
            credentials = (user, password)
        elif source == "URL":
            parts = urlsplit(urls[0])
            credentials = (unquote(parts.username or ""), unquote(parts.password or ""))
        # The credentials go in a header, not in the URL a request names.
        bare = tuple(urlsplit(u)._replace(netloc=urlsplit(u).netloc.rpartition("@")[2]).geturl() for u in urls)
        return cls(tuple(u.rstrip("/") for u in bare), credentials, schema_type)


@dataclass(frozen=True)
class MaintenanceSchedule:
    """When a sink's maintenance runs beside its coordinator (``sinkadmin.maintenance.*``, see
    workers.maintenance); what it does is the sink's own."""

    enabled: bool
    interval_ms: int


@dataclass(frozen=True)
class SinkConfig:
    """A validated config with typed values, for the runtime."""

    raw: dict[str, str]
    topics: tuple[str, ...]
    topics_regex: str | None
    tasks_max: int
    key_converter: str
    value_converter: str
    schemas_enable: bool
    avro_schema: str | None
    # The avro converter's Schema Registry, if the values' schemas come from one.
    schema_registry: SchemaRegistryConfig | None
    metadata_columns: tuple[str, ...]
    control_topic: str
    commit_interval_ms: int
    commit_timeout_ms: int
    allow_empty_commit: bool
    commit_max_records: int
    # sinkadmin.commit.write-target-ms, resolved (0 there: the interval, at least WRITE_TARGET_MIN_MS).
    commit_write_target_ms: int
    errors_tolerance: str
    dlq_topic: str | None
    dlq_replication_factor: int
    dlq_context_headers: bool
    auto_offset_reset: str
    out_of_range: str
    buffer_bytes: int
    staging_max_bytes: int
    writer: str
    maintenance: MaintenanceSchedule
    # The plugin's short name, and its own typed settings (Plugin.parse).
    plugin: str
    settings: Any
    # Kafka Connect's transforms, which the tasks apply as they stage records (workers.transformed), except a
    # chain the sink's decoders apply to columns (``columnar_chain``).
    transforms: TransformChain | None = None
    # In a sink's view (``sink_view``): the chain its decoders apply, to columns where they can.
    decoder_transforms: TransformChain | None = None

    @property
    def columnar_chain(self) -> ColumnarChain | None:
        """The chain when the sink's decoders apply it to columns rather than the tasks record by record
        (``TransformChain.columnar``: Filters of records as consumed, then Debezium's unwrap or the Iceberg sink's
        DebeziumTransform, then Kafka's InsertField$Value and ReplaceField$Value, or those alone, with routers and
        header transforms among them), of plain JSON
        values, into a sink whose
        settings take it (``unwraps_in_decoder``: the Iceberg sink with one table, no route field and no schema
        evolution). The decoder reads each value's fields straight into the table's columns, several times
        cheaper than a parse, the chain and a JSON text per record (docs/decisions/012)."""
        if self.transforms is None or self.value_converter != "json" or self.schemas_enable or self.decodes_values:
            return None  # (values in a schema envelope, or decoded while staging, a registry's, keep the stage)
        if not getattr(self.settings, "unwraps_in_decoder", False):
            return None
        return self._with_key_converter(self.transforms.columnar)

    @property
    def decoder_columnar(self) -> ColumnarChain | None:
        """In a sink's view (``sink_view``), the chain its decoders apply (``decoder_transforms``) in the form
        they apply it: ``columnar_chain``'s."""
        if self.decoder_transforms is None:
            return None
        return self._with_key_converter(self.decoder_transforms.columnar)

    def _with_key_converter(self, columnar: ColumnarChain | None) -> ColumnarChain | None:
        """``columnar``, told whether the keys are JSON (DebeziumTransform's ``_cdc.key`` is a key that is a map)."""
        if columnar is not None and isinstance(columnar.unwrap, ColumnarDebezium):
            return replace(columnar, unwrap=replace(columnar.unwrap, json_keys=self.key_converter == "json"))
        return columnar

    @property
    def staged_transforms(self) -> TransformChain | None:
        """The chain the tasks apply as they stage records: the transforms, unless the sink's decoders do."""
        return self.transforms if self.columnar_chain is None else None

    @property
    def decodes_values(self) -> bool:
        """Whether the tasks decode the values as they stage them (``workers.converters.value_decoder``): Avro,
        or a Schema Registry's wire format, become JSON."""
        return self.schema_registry is not None or self.value_converter == "avro"

    @property
    def stages_headers(self) -> bool:
        """Whether the tasks stage records' headers: only for the dead-letter topic and for the transforms, since
        librdkafka parses them out of each message when asked (a share of a task's time worth saving:
        docs/benchmarks.md, "Measurements behind the runtime's design"). A sink's own dead-letter table reads a
        connector's bad records again from their topic when their headers were not staged
        (``workers.dead_letters.StagedForm``)."""
        return (self.errors_tolerance == "all" and self.dlq_topic is not None) or self.staged_transforms is not None

    @property
    def sink_view(self) -> SinkConfig:
        """The config as the sink sees its records: after transforms, values in Kafka Connect's schema envelope,
        and Avro values, are in the envelope of the schema the chain gives them (``connectors.smt.schemas``),
        values of a JSON Schema registry are plain JSON, and the chain is done; or, when the sink's decoders
        apply it (``columnar_chain``), the records as consumed and the chain theirs."""
        if self.transforms is None:
            return self
        if self.columnar_chain is not None:
            return replace(self, transforms=None, decoder_transforms=self.transforms)
        if self.value_converter not in ("json", "avro") or (self.schemas_enable and not self.decodes_values):
            return replace(self, transforms=None)
        return replace(
            self,
            value_converter="json",
            schemas_enable=self.avro_envelopes,
            avro_schema=None,
            schema_registry=None,
            transforms=None,
        )

    @property
    def avro_envelopes(self) -> bool:
        """Whether the tasks stage Avro values in JsonConverter's envelope of their Connect schema
        (``workers.avro_connect``): for the transforms, which run with it, as Kafka Connect's AvroConverter hands
        them a record with its schema."""
        return self.value_converter == "avro" and self.staged_transforms is not None

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> SinkConfig:
        validation = validate_config(config)
        if not validation.ok:
            raise ValueError(validation.message())
        plugin = validation.plugin
        assert plugin is not None
        raw = plugin.with_mapped_keys(validation.config)

        def get(name: str, absent: str = "") -> str:
            # ``absent``: the value of a key this plugin does not have (the
            # Iceberg fields of another sink's config); a key every table sink
            # shares that this one lacks (the mirror's converters) keeps its
            # shared default, so the typed fields below stay well-formed.
            key = plugin.key(name)
            value = raw.get(name)
            if value is None or value == "":
                return (key.default if key else absent or SHARED_DEFAULTS.get(name)) or ""
            return value

        def flag(name: str) -> bool:
            return get(name).strip().lower() == "true"

        settings = resolve(plugin.parse)(raw) if plugin.parse else None
        commit_interval_ms = int(get(plugin.commit_interval_key))
        if plugin.interval_override_key and int(get(plugin.interval_override_key, "-1")) > 0:
            commit_interval_ms = int(get(plugin.interval_override_key))
        return cls(
            raw=dict(raw),
            topics=tuple(split_list(raw.get("topics"))),
            topics_regex=raw.get("topics.regex") or None,
            tasks_max=int(get("tasks.max")),
            key_converter=CONVERTERS[get("key.converter")],
            value_converter=CONVERTERS[get("value.converter")],
            schemas_enable=flag("value.converter.schemas.enable"),
            avro_schema=raw.get("value.converter.avro.schema") or None,
            schema_registry=SchemaRegistryConfig.parse(raw),
            metadata_columns=tuple(split_list(get("sinkadmin.metadata-columns"))),
            control_topic=get(plugin.control_topic_key),
            commit_interval_ms=commit_interval_ms,
            commit_timeout_ms=int(get(plugin.commit_timeout_key, "0")),
            allow_empty_commit=flag(plugin.allow_empty_key),
            commit_max_records=int(get("sinkadmin.commit.max-records")),
            commit_write_target_ms=int(get("sinkadmin.commit.write-target-ms"))
            or max(commit_interval_ms, WRITE_TARGET_MIN_MS),
            errors_tolerance=get("errors.tolerance"),
            dlq_topic=(raw.get("errors.deadletterqueue.topic.name") or "").strip() or None,
            dlq_replication_factor=int(get("errors.deadletterqueue.topic.replication.factor")),
            dlq_context_headers=flag("errors.deadletterqueue.context.headers.enable"),
            auto_offset_reset=get("consumer.auto.offset.reset"),
            out_of_range=get("sinkadmin.offsets.out-of-range"),
            buffer_bytes=int(get("sinkadmin.staging.buffer-bytes")),
            staging_max_bytes=int(get("sinkadmin.staging.max-bytes")),
            # ("auto", the default before Spark became the data plane, means spark.)
            writer="arrow" if get("sinkadmin.writer") == "arrow" else "spark",
            maintenance=MaintenanceSchedule(
                enabled=flag("sinkadmin.maintenance.enabled"),
                interval_ms=int(get("sinkadmin.maintenance.interval-ms", "0")),
            ),
            plugin=plugin.short_name,
            settings=settings,
            transforms=parse_chain(raw)[0],
        )
