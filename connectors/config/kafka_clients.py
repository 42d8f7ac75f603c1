"""The Kafka clients of a connector, all configured from one place so its security settings reach every
one of them: source consumer, control producer and consumer, dead-letter producer, admin client. The
control plane (the connection check) and the runtime build theirs here alike."""

from __future__ import annotations

import re
from collections.abc import Mapping

from confluent_kafka.admin import AdminClient

# Keys that configure every client the connector creates (librdkafka accepts
# the Java client's names for these).
_SHARED_PREFIXES = ("security.protocol", "sasl.", "ssl.")
# Java-client keys librdkafka does not know; the PEM/JAAS equivalents are mapped.
_JAVA_ONLY = {
    "ssl.truststore.type",
    "ssl.keystore.type",
    "ssl.truststore.password",
    "ssl.keystore.password",
    "ssl.keystore.location",
    "ssl.endpoint.identification.algorithm",
    "sasl.jaas.config",
}
_JAAS_CREDENTIALS = re.compile(r'username="(?P<user>[^"]*)"\s+password="(?P<password>[^"]*)"')


def shared_properties(config: dict[str, str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for key, value in config.items():
        if key.startswith(_SHARED_PREFIXES) and key not in _JAVA_ONLY:
            props[key] = value
    if "ssl.truststore.location" in config:
        # The Java truststore key carries a PEM CA bundle here.
        props.pop("ssl.truststore.location", None)
        props["ssl.ca.location"] = config["ssl.truststore.location"]
    jaas = config.get("sasl.jaas.config")
    if jaas and (match := _JAAS_CREDENTIALS.search(jaas)):
        props.setdefault("sasl.username", match.group("user"))
        props.setdefault("sasl.password", match.group("password"))
    verify = config.get("ssl.endpoint.identification.algorithm")
    if verify is not None:
        # The Java client's empty value turns hostname verification off; librdkafka names that "none".
        props["ssl.endpoint.identification.algorithm"] = verify.strip().lower() or "none"
    return props


# The JAAS login modules whose credentials shared_properties takes (username and password).
JAAS_MODULES = (
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
)


def unusable_client_settings(config: Mapping[str, str]) -> dict[str, str]:
    """The Java client settings among ``config`` (unprefixed) that the clients here cannot take as written,
    each with why and what to write instead."""
    refused = {}
    jaas = config.get("sasl.jaas.config", "").strip()
    if jaas and (not jaas.startswith(JAAS_MODULES) or not _JAAS_CREDENTIALS.search(jaas)):
        refused["sasl.jaas.config"] = (
            'only PlainLoginModule and ScramLoginModule with username="..." password="..." are read (the '
            "credentials go to librdkafka's sasl.username and sasl.password)"
        )
    kind = config.get("ssl.truststore.type", "PEM").strip().upper()
    if config.get("ssl.truststore.location") and kind != "PEM":
        refused["ssl.truststore.type"] = (
            f"a {kind} truststore cannot be read here: give the CA certificates as PEM (keytool -exportcert -rfc) "
            "and set ssl.truststore.type=PEM"
        )
    if config.get("ssl.keystore.location"):
        refused["ssl.keystore.location"] = (
            "a keystore is not read here: for a client certificate (mutual TLS) set ssl.certificate.location and "
            "ssl.key.location to PEM files"
        )
    return refused


def _with_overrides(config: dict[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}


def consumer_group(connector: str, config: Mapping[str, str]) -> str:
    """The consumer group a connector's committed offsets are mirrored to, named as Kafka Connect names a
    sink's (``connect-<name>``), or ``consumer.override.group.id``: lag tools read it."""
    return config.get("consumer.override.group.id") or f"connect-{connector}"


def source_consumer_config(bootstrap: str, config: dict[str, str], group_id: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        # Offsets come from the ledger and are assigned explicitly; the group
        # id is only a label (librdkafka requires one) and is never committed.
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        # Bound what librdkafka prefetches, so memory does not grow with backlog (I7).
        "queued.max.messages.kbytes": 65536,
        "fetch.max.bytes": 52428800,
        # librdkafka postpones a partition's next fetch by this much once the
        # queue above is full (default 1 s): the task then drains the queue
        # in a fraction of that and waits idle for records.
        "fetch.queue.backoff.ms": 100,
        **shared_properties(config),
        **_with_overrides(config, "consumer.override."),
    }


def producer_config(bootstrap: str, config: dict[str, str]) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        **shared_properties(config),
        **_with_overrides(config, "producer.override."),
    }


def control_client_config(bootstrap: str, config: dict[str, str]) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, **shared_properties(config), **_with_overrides(config, "iceberg.kafka.")}


def admin_client(bootstrap: str, config: dict[str, str]) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **shared_properties(config)})
