"""The Kafka clients of a connector, all configured from one place so its security settings reach every
one of them: source consumer, control producer and consumer, dead-letter producer, admin client. The
control plane (the connection check) and the runtime build theirs here alike."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
# The Java client's settings shared_properties reads into librdkafka's (or drops, where librdkafka needs none):
# checked by unusable_client_settings, not as librdkafka properties.
TRANSLATED_SETTINGS = frozenset(_JAVA_ONLY | {"ssl.truststore.location"})
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


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# librdkafka's properties, by the clients that read them (its CONFIGURATION.md, "C/P", for the librdkafka that
# confluent-kafka ships; tests/test_mirror_client_keys.py checks each name against it). A consumer reads the consumer
# properties and those of every client, a producer the producer properties and those of every client, and each
# ignores (with a warning) a property of the other kind. confluent-kafka's admin client is a producer to
# librdkafka: no property is an admin client's alone. (librdkafka's callbacks and pointers are left out: they
# are no settings a config can write.)
CONSUMER_PROPERTIES = _names(
    """
    auto.commit.enable auto.commit.interval.ms auto.offset.reset check.crcs consume.callback.max.messages
    coordinator.query.interval.ms enable.auto.commit enable.auto.offset.store enable.partition.eof
    fetch.error.backoff.ms fetch.max.bytes fetch.message.max.bytes fetch.min.bytes fetch.queue.backoff.ms
    fetch.wait.max.ms group.id group.instance.id group.protocol group.protocol.type group.remote.assignor
    heartbeat.interval.ms isolation.level max.partition.fetch.bytes max.poll.interval.ms max.poll.records
    offset.store.method offset.store.path offset.store.sync.interval.ms partition.assignment.strategy
    queued.max.messages.kbytes queued.min.messages session.timeout.ms share.acknowledgement.mode
    """
)
PRODUCER_PROPERTIES = _names(
    """
    acks batch.num.messages batch.size compression.codec compression.level compression.type
    delivery.report.only.error delivery.timeout.ms enable.gapless.guarantee enable.idempotence linger.ms
    message.send.max.retries message.timeout.ms partitioner produce.offset.report
    queue.buffering.backpressure.threshold queue.buffering.max.kbytes queue.buffering.max.messages
    queue.buffering.max.ms queuing.strategy request.required.acks request.timeout.ms retries
    sticky.partitioning.linger.ms transaction.timeout.ms transactional.id
    """
)
EVERY_CLIENT_PROPERTIES = _names(
    """
    allow.auto.create.topics api.version.fallback.ms api.version.request api.version.request.timeout.ms
    bootstrap.servers broker.address.family broker.address.ttl broker.version.fallback builtin.features
    client.dns.lookup client.id client.rack connections.max.idle.ms debug enable.metrics.push enable.random.seed
    enable.sasl.oauthbearer.unsecure.jwt enable.ssl.certificate.verification https.ca.location https.ca.pem
    interceptors internal.termination.signal log.connection.close log.queue log.thread.name max.in.flight
    max.in.flight.requests.per.connection message.copy.max.bytes message.max.bytes metadata.broker.list
    metadata.max.age.ms metadata.recovery.rebootstrap.trigger.ms metadata.recovery.strategy opaque
    plugin.library.paths receive.message.max.bytes reconnect.backoff.jitter.ms reconnect.backoff.max.ms
    reconnect.backoff.ms retry.backoff.max.ms retry.backoff.ms sasl.kerberos.keytab sasl.kerberos.kinit.cmd
    sasl.kerberos.min.time.before.relogin sasl.kerberos.principal sasl.kerberos.service.name sasl.mechanism
    sasl.mechanisms sasl.oauthbearer.assertion.algorithm sasl.oauthbearer.assertion.claim.aud
    sasl.oauthbearer.assertion.claim.exp.seconds sasl.oauthbearer.assertion.claim.iss
    sasl.oauthbearer.assertion.claim.jti.include sasl.oauthbearer.assertion.claim.nbf.seconds
    sasl.oauthbearer.assertion.claim.sub sasl.oauthbearer.assertion.file
    sasl.oauthbearer.assertion.jwt.template.file sasl.oauthbearer.assertion.private.key.file
    sasl.oauthbearer.assertion.private.key.passphrase sasl.oauthbearer.assertion.private.key.pem
    sasl.oauthbearer.client.credentials.client.id sasl.oauthbearer.client.credentials.client.secret
    sasl.oauthbearer.client.id sasl.oauthbearer.client.secret sasl.oauthbearer.config
    sasl.oauthbearer.extensions sasl.oauthbearer.grant.type sasl.oauthbearer.metadata.authentication.type
    sasl.oauthbearer.method sasl.oauthbearer.scope sasl.oauthbearer.sub.claim.name
    sasl.oauthbearer.token.endpoint.url sasl.password sasl.username security.protocol socket.blocking.max.ms
    socket.connection.setup.timeout.ms socket.keepalive.enable socket.max.fails socket.nagle.disable
    socket.receive.buffer.bytes socket.send.buffer.bytes socket.timeout.ms ssl.ca.certificate.stores
    ssl.ca.location ssl.ca.pem ssl.certificate.location ssl.certificate.pem ssl.cipher.suites ssl.crl.location
    ssl.curves.list ssl.endpoint.identification.algorithm ssl.engine.id ssl.engine.location ssl.key.location
    ssl.key.password ssl.key.pem ssl.keystore.location ssl.keystore.password ssl.providers ssl.sigalgs.list
    statistics.interval.ms topic.blacklist topic.metadata.propagation.max.ms topic.metadata.refresh.fast.cnt
    topic.metadata.refresh.fast.interval.ms topic.metadata.refresh.interval.ms topic.metadata.refresh.sparse
    """
)
# librdkafka's second names for some of its properties, and the property each names. (auto.commit.enable is the
# legacy topic-level property that enable.auto.commit replaced: the same setting.)
PROPERTY_ALIASES = {
    "bootstrap.servers": "metadata.broker.list",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "sasl.mechanism": "sasl.mechanisms",
    "sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
    "max.partition.fetch.bytes": "fetch.message.max.bytes",
    "linger.ms": "queue.buffering.max.ms",
    "retries": "message.send.max.retries",
    "compression.type": "compression.codec",
    "acks": "request.required.acks",
    "delivery.timeout.ms": "message.timeout.ms",
    "auto.commit.enable": "enable.auto.commit",
}
# Java client settings that librdkafka has under another name.
JAVA_COUNTERPARTS = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "buffer.memory": "queue.buffering.max.kbytes (in KiB)",
    "max.request.size": "message.max.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}


def property_name(name: str) -> str:
    """librdkafka's own name of property ``name`` (``linger.ms`` is ``queue.buffering.max.ms``)."""
    return PROPERTY_ALIASES.get(name, name)


def property_clients(name: str) -> str | None:
    """The clients librdkafka property ``name`` configures: ``consumer``, ``producer`` or ``every client``;
    None when librdkafka has no such property (a Java client's setting)."""
    if name in CONSUMER_PROPERTIES:
        return "consumer"
    if name in PRODUCER_PROPERTIES:
        return "producer"
    return "every client" if name in EVERY_CLIENT_PROPERTIES else None


def unusable_client_overrides(config: Mapping[str, str], client: str) -> dict[str, str]:
    """The settings among ``config`` (unprefixed, for one ``consumer``, ``producer`` or ``admin`` client) that
    librdkafka's client of that kind cannot take, each with why: a Java client's setting that librdkafka does
    not have (with its counterpart, where it has one), or a setting of another kind of client, which librdkafka
    would ignore."""
    refused = {}
    for name in config:
        clients = property_clients(name)
        if clients is None:
            counterpart = JAVA_COUNTERPARTS.get(name)
            refused[name] = "not a setting of librdkafka, the Kafka client here (a Java client's)" + (
                f": its counterpart there is {counterpart}" if counterpart else ""
            )
        elif clients not in ("every client", client):
            refused[name] = f"librdkafka's {name} is a setting of its {clients}s: it does nothing for {client} clients"
    return refused


def _with_overrides(config: dict[str, str], prefix: str) -> dict[str, str]:
    """The settings under ``prefix`` for one kind of client (Kafka Connect's ``consumer.override.*``), the Java
    client's security settings among them read as the connector's own are (``shared_properties``)."""
    overrides = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
    plain = {k: v for k, v in overrides.items() if not k.startswith(_SHARED_PREFIXES)}
    return {**plain, **shared_properties(overrides)}


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
    # Imported here: the validator imports this module, and so do Spark's Python workers, which decode records
    # without a Kafka client (sinkadmin_spark_daemon preloads what a decode imports, and no more).
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **shared_properties(config)})
