"""The Kafka mirror's config definitions: MirrorMaker 2's keys where the meaning is the same.

Kept free of the engine's imports: the web process reads it for forms, the API and validation.
"""

from __future__ import annotations

from connectors.config.definitions import SHARED_KEYS, ConfigKey, Importance, KeyType, Plugin, PrefixKey, in_group_order

_G_CLUSTERS = "Clusters"
_G_TOPICS = "Topics"
_G_DELIVERY = "Delivery"
_G_OFFSETS = "Offset syncs and checkpoints"

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
# MirrorMaker 2's default of topics.exclude: internal and replica topics are never mirrored.
DEFAULT_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"

# MirrorMaker 2's default config.properties.exclude (DefaultConfigPropertyFilter): settings a replica must not take
# from its source topic (throttles, and what would refuse the mirror's writes on a smaller target cluster).
DEFAULT_CONFIG_PROPERTIES_EXCLUDE = (
    r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, unclean\.leader\.election\.enable, "
    r"min\.insync\.replicas"
)

# MirrorMaker 2's default groups.exclude: console consumers, Kafka Connect's and internal groups.
DEFAULT_GROUPS_EXCLUDE = "console-consumer-.*, connect-.*, __.*"

# The shared keys that mean the same for a mirror; converters, dead letters and staging do not apply (records
# are copied as bytes).
_SHARED = ("connector.class", "tasks.max", "topics", "topics.regex", "consumer.auto.offset.reset")

MIRROR_OWN_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "source.cluster.bootstrap.servers",
        KeyType.LIST,
        "The source cluster's brokers (host:port, comma-separated): where the mirrored topics are read.",
        _G_CLUSTERS,
        importance=Importance.HIGH,
        required=True,
        order=1,
    ),
    ConfigKey(
        "target.cluster.bootstrap.servers",
        KeyType.LIST,
        "The target cluster's brokers: where the replicas are written and the mirror's offsets kept.",
        _G_CLUSTERS,
        importance=Importance.HIGH,
        required=True,
        order=2,
    ),
    ConfigKey(
        "source.cluster.alias",
        KeyType.STRING,
        "The source cluster's name: DefaultReplicationPolicy puts it before each replica's name.",
        _G_CLUSTERS,
        default="source",
        order=3,
    ),
    ConfigKey(
        "target.cluster.alias",
        KeyType.STRING,
        "The target cluster's name.",
        _G_CLUSTERS,
        default="target",
        order=4,
    ),
    ConfigKey(
        "topics.exclude",
        KeyType.LIST,
        "Regular expressions (comma-separated) of source topics never mirrored, even when selected.",
        _G_TOPICS,
        default=DEFAULT_EXCLUDE,
        order=1,
    ),
    ConfigKey(
        "replication.policy.class",
        KeyType.STRING,
        "How replicas are named: DefaultReplicationPolicy (<source alias><separator><topic>) or "
        "IdentityReplicationPolicy (the source topic's name).",
        _G_TOPICS,
        default=DEFAULT_POLICY,
        choices=(DEFAULT_POLICY, IDENTITY_POLICY, "DefaultReplicationPolicy", "IdentityReplicationPolicy"),
        order=2,
    ),
    ConfigKey(
        "replication.policy.separator",
        KeyType.STRING,
        "Between the source alias and the topic in a replica's name (DefaultReplicationPolicy), and in the names "
        "of the offset syncs and checkpoints topics (mm2-offset-syncs<separator><source alias><separator>internal, "
        "<source alias><separator>checkpoints<separator>internal), as MirrorMaker 2 names them since Kafka 3.1. "
        "Letters, digits, '.', '_' and '-', as in a topic's name; an empty separator is refused.",
        _G_TOPICS,
        default=".",
        order=3,
    ),
    ConfigKey(
        "replication.policy.internal.topic.separator.enabled",
        KeyType.BOOLEAN,
        "false: the offset syncs and checkpoints topics are named with '.' whatever replication.policy.separator "
        "is, as before Kafka 3.1 (MirrorMaker 2's key, for the topics an older MirrorMaker 2 wrote).",
        _G_TOPICS,
        default="true",
        order=4,
    ),
    ConfigKey(
        "sync.topic.configs.enabled",
        KeyType.BOOLEAN,
        "Create replicas with their source topic's own configs (retention, cleanup policy...).",
        _G_TOPICS,
        default="true",
        order=5,
    ),
    ConfigKey(
        "config.properties.exclude",
        KeyType.LIST,
        "Regular expressions (comma-separated) of source topic settings the replicas do not take.",
        _G_TOPICS,
        default=DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
        order=6,
    ),
    ConfigKey(
        "replication.factor",
        KeyType.INT,
        "Replication factor of the replicas the mirror creates; -1: the target cluster's default.replication.factor "
        "(MirrorMaker 2's default, 2, fails on a one-broker cluster).",
        _G_TOPICS,
        default="-1",
        minimum=-1,
        order=7,
    ),
    ConfigKey(
        "refresh.topics.interval.seconds",
        KeyType.LONG,
        "How often new source topics and partitions are looked for, at most: the supervisor lists the source "
        "topics at each of its steps (every few seconds), a task run by hand at this interval.",
        _G_TOPICS,
        default="600",
        minimum=1,
        order=8,
    ),
    ConfigKey(
        "transaction.producer",
        KeyType.BOOLEAN,
        "true: exactly once (KIP-656): records and their source offsets commit in one transaction on the target "
        "cluster. false: at least once: records are produced, then their offsets committed; a task that dies "
        "between the two copies its last batch again.",
        _G_DELIVERY,
        default="true",
        importance=Importance.HIGH,
        order=1,
    ),
    ConfigKey(
        "sinkadmin.commit.interval-ms",
        KeyType.LONG,
        "How long a task gathers records into one transaction (or one batch, at least once).",
        _G_DELIVERY,
        default="1000",
        minimum=1,
        order=2,
    ),
    ConfigKey(
        "sinkadmin.commit.max-records",
        KeyType.LONG,
        "End a transaction early once it holds this many records.",
        _G_DELIVERY,
        default="10000",
        minimum=1,
        order=3,
    ),
    ConfigKey(
        "emit.heartbeats.enabled",
        KeyType.BOOLEAN,
        "Emit heartbeats (MirrorMaker 2's records: the two aliases and a time) to the heartbeats topic on the "
        "source cluster, every emit.heartbeats.interval.seconds. The mirror replicates heartbeats topics whatever "
        "the topics selected, so <source alias>.heartbeats on the target shows the path works end to end; the "
        "connector's page shows the last one replicated.",
        _G_DELIVERY,
        default="true",
        order=4,
    ),
    ConfigKey(
        "emit.heartbeats.interval.seconds",
        KeyType.LONG,
        "How often a heartbeat is emitted.",
        _G_DELIVERY,
        default="1",
        minimum=1,
        order=5,
    ),
    ConfigKey(
        "heartbeats.topic.replication.factor",
        KeyType.INT,
        "Replication factor of the source's heartbeats topic when the mirror creates it; -1: the cluster's default.",
        _G_DELIVERY,
        default="-1",
        minimum=-1,
        order=6,
    ),
    ConfigKey(
        "emit.offset-syncs.enabled",
        KeyType.BOOLEAN,
        "Write offset syncs (a source record's offset paired with its copy's) to mm2-offset-syncs.<source "
        "alias>.internal on the target (with replication.policy.separator for the dots), in the records' "
        "transaction. Checkpoints translate through them.",
        _G_OFFSETS,
        default="true",
        order=1,
    ),
    ConfigKey(
        "offset-syncs.topic.location",
        KeyType.STRING,
        "Where the offset syncs topic is: target (the syncs commit in the records' transaction, and survive the "
        "source cluster's loss). MirrorMaker 2's default, source, is refused: syncs there could not be in the "
        "transaction.",
        _G_OFFSETS,
        default="target",
        choices=("target", "source"),
        order=2,
    ),
    ConfigKey(
        "offset-syncs.topic.replication.factor",
        KeyType.INT,
        "Replication factor of the offset syncs topic when the mirror creates it; -1: the target cluster's "
        "default.replication.factor (MirrorMaker 2's default, 3, fails on a smaller cluster).",
        _G_OFFSETS,
        default="-1",
        minimum=-1,
        order=3,
    ),
    ConfigKey(
        "offset.lag.max",
        KeyType.LONG,
        "An offset sync at least every this many records of a partition. (A sync is written at each end of every "
        "run of records whose offsets advance alike on both clusters, so offsets inside one translate exactly.)",
        _G_OFFSETS,
        default="100",
        minimum=1,
        order=4,
    ),
    ConfigKey(
        "emit.checkpoints.enabled",
        KeyType.BOOLEAN,
        "Translate the source cluster's consumer groups' committed offsets through the offset syncs and write "
        "them as checkpoints to <source alias>.checkpoints.internal on the target (with "
        "replication.policy.separator for the dots; what RemoteClusterUtils and "
        "GET /connectors/{name}/groups/{group}/translated read).",
        _G_OFFSETS,
        default="true",
        order=5,
    ),
    ConfigKey(
        "emit.checkpoints.interval.seconds",
        KeyType.LONG,
        "How often the groups' offsets are translated and checkpointed.",
        _G_OFFSETS,
        default="60",
        minimum=1,
        order=6,
    ),
    ConfigKey(
        "groups",
        KeyType.LIST,
        "Regular expressions (comma-separated) of the source consumer groups to checkpoint.",
        _G_OFFSETS,
        default=".*",
        order=7,
    ),
    ConfigKey(
        "groups.exclude",
        KeyType.LIST,
        "Regular expressions of consumer groups never checkpointed, even when selected.",
        _G_OFFSETS,
        default=DEFAULT_GROUPS_EXCLUDE,
        order=8,
    ),
    ConfigKey(
        "refresh.groups.interval.seconds",
        KeyType.LONG,
        "How often the source cluster's consumer groups are listed.",
        _G_OFFSETS,
        default="600",
        minimum=1,
        order=9,
    ),
    ConfigKey(
        "checkpoints.topic.replication.factor",
        KeyType.INT,
        "Replication factor of the checkpoints topic when the mirror creates it; -1: the target cluster's default.",
        _G_OFFSETS,
        default="-1",
        minimum=-1,
        order=10,
    ),
    ConfigKey(
        "sync.group.offsets.enabled",
        KeyType.BOOLEAN,
        "Commit the checkpointed offsets to the same groups on the target cluster, for each group with no "
        "active member there and only where the target's offset is behind: consumers that fail over resume "
        "where they left off, with no translation of their own.",
        _G_OFFSETS,
        default="false",
        order=11,
    ),
    ConfigKey(
        "sync.group.offsets.interval.seconds",
        KeyType.LONG,
        "How often the groups' offsets on the target are synced.",
        _G_OFFSETS,
        default="60",
        minimum=1,
        order=12,
    ),
)

MIRROR_PREFIX_KEYS: tuple[PrefixKey, ...] = (
    PrefixKey(
        "source.cluster.",
        "The source cluster's client settings: security.protocol, sasl.*, ssl.* (e.g. "
        "source.cluster.security.protocol=SASL_SSL).",
        _G_CLUSTERS,
    ),
    PrefixKey("target.cluster.", "The target cluster's client settings, as for the source.", _G_CLUSTERS),
    PrefixKey(
        "source.consumer.",
        "librdkafka consumer properties (fetch.*, queued.*...) of the consumer that reads the source cluster. "
        "MirrorMaker 2's per-client keys take librdkafka's properties of their kind of client; refused, each with "
        "why: a Java client's setting librdkafka has not, a property of every client (client.id, socket.*: the "
        "mirror's clients of a cluster share one configuration), an admin client's, and a setting the mirror makes "
        "itself (group.id, isolation.level, transactional.id, linger.ms...) unless it asks for what the mirror "
        'does (docs/mirror.md, "Per-client keys").',
        _G_CLUSTERS,
    ),
    PrefixKey("source.producer.", "librdkafka producer properties of the heartbeats' producer.", _G_CLUSTERS),
    PrefixKey(
        "target.producer.",
        "librdkafka producer properties (compression.*, batch.*, transaction.timeout.ms...) of the producers that "
        "write the target cluster: the tasks' transactional producers and the checkpoints'.",
        _G_CLUSTERS,
    ),
    PrefixKey(
        "target.consumer.",
        "librdkafka consumer properties of the target cluster's consumers (the offset syncs' reader, the mirror's "
        "group, the translation of a group's checkpoints).",
        _G_CLUSTERS,
    ),
    PrefixKey(
        "consumer.",
        "MirrorMaker 2's keys for the consumers of both clusters (source.consumer.* and target.consumer.* override "
        "them); consumer.auto.offset.reset is the mirror's own key.",
        _G_CLUSTERS,
    ),
    PrefixKey("producer.", "MirrorMaker 2's keys for the producers of both clusters.", _G_CLUSTERS),
    PrefixKey(
        "consumer.override.",
        "Kafka Connect's client overrides: a sink's consumer reads the source cluster (as source.consumer.*).",
        _G_CLUSTERS,
    ),
    PrefixKey(
        "producer.override.",
        "Kafka Connect's client overrides: the producers that write the target cluster (as target.producer.*).",
        _G_CLUSTERS,
    ),
)


def destinations(config: dict[str, str]) -> list[str]:
    """The target cluster (the list and detail pages' "writes to")."""
    target = str(config.get("target.cluster.bootstrap.servers", "")).strip()
    alias = str(config.get("target.cluster.alias", "") or "target").strip()
    return [f"{alias} ({target})"] if target else []


MIRROR = Plugin(
    short_name="mirror",
    class_name="org.apache.kafka.connect.mirror.MirrorSinkConnector",
    aliases=("mirror",),
    version="0.1.0",
    keys=in_group_order(tuple(k for k in SHARED_KEYS if k.name in _SHARED) + MIRROR_OWN_KEYS),
    prefix_keys=MIRROR_PREFIX_KEYS,
    title="Kafka mirror",
    description="Topics into another Kafka cluster, exactly once (KIP-656): each task's transactions carry its "
    "records and their source offsets to the target cluster; replicas keep keys, headers, timestamps and "
    "partitions.",
    commit_interval_key="sinkadmin.commit.interval-ms",
    coordinated=False,
    related_classes=tuple(
        (
            f"org.apache.kafka.connect.mirror.{name}",
            "MirrorMaker 2's MirrorSourceConnector, MirrorCheckpointConnector and MirrorHeartbeatConnector are one "
            "connector here, org.apache.kafka.connect.mirror.MirrorSinkConnector (KIP-656's exactly-once mirror), "
            "with MirrorMaker 2's keys; its `topics` names topics, as a sink's does (MirrorMaker 2's regular "
            "expressions go in topics.regex), and its offset syncs go to the target cluster (docs/mirror.md)",
        )
        for name in ("MirrorSourceConnector", "MirrorCheckpointConnector", "MirrorHeartbeatConnector")
    ),
    check="sinks.mirror.settings:check",
    parse="sinks.mirror.settings:MirrorSettings.parse",
    probe="sinks.mirror.settings:probe",
    source="sinks.mirror.settings:source",
    destinations="sinks.mirror.plugin:destinations",
    offsets="sinks.mirror.offsets",
    runtime="sinks.mirror.runtime",
)
