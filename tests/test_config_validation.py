import json

import pytest

from connectors.config import SinkConfig, validate_config
from connectors.smt import ConnectRecord

BASE = {
    "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
    "topics": "orders",
    "iceberg.tables": "db.orders",
}
AVRO_SCHEMA = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'


def test_a_config_written_for_the_iceberg_sink_is_valid() -> None:
    config = {
        **BASE,
        "tasks.max": "4",
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.control.commit.interval-ms": "60000",
        "iceberg.catalog.type": "rest",
        "iceberg.catalog.uri": "http://catalog:8181",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "iceberg.table.db.orders.partition-by": "days(ts), truncate(16, id)",
    }
    assert validate_config(config).errors == {}
    parsed = SinkConfig.parse(config)
    assert parsed.tasks_max == 4
    assert parsed.value_converter == "json"
    assert [str(f) for f in parsed.settings.tables[0].partition_by] == ["day(ts)", "truncate(16, id)"]
    assert parsed.settings.catalog_properties == {"type": "rest", "uri": "http://catalog:8181"}


@pytest.mark.parametrize("name", ["iceberg", "io.tabular.iceberg.connect.IcebergSinkConnector"])
def test_short_and_tabular_class_names_resolve(name: str) -> None:
    assert validate_config({**BASE, "connector.class": name}).ok


def test_errors_are_reported_per_key() -> None:
    result = validate_config(
        {
            **BASE,
            "tasks.max": "zero",
            "iceberg.control.commit.interval-ms": "5",
            "errors.tolerance": "some",
            "value.converter": "xml",
            "iceberg.tables": "no_namespace",
            "sinkadmin.commit.max-records": "-1",
        }
    )
    assert set(result.errors) == {
        "tasks.max",
        "iceberg.control.commit.interval-ms",
        "errors.tolerance",
        "value.converter",
        "iceberg.tables",
        "sinkadmin.commit.max-records",
    }
    assert "Not a number of type INT" in result.errors["tasks.max"][0]
    assert "at least 100" in result.errors["iceberg.control.commit.interval-ms"][0]
    assert "at least 0" in result.errors["sinkadmin.commit.max-records"][0]


def test_missing_topics_and_tables_are_named() -> None:
    result = validate_config({"connector.class": "iceberg"})
    assert "topics" in result.errors
    assert 'Missing required configuration "iceberg.tables"' in result.errors["iceberg.tables"][0]


def test_an_unknown_class_is_named_with_the_known_ones() -> None:
    errors = validate_config({**BASE, "connector.class": "x.Y"}).errors["connector.class"]
    assert errors == ["Unknown connector class 'x.Y'; use one of 'iceberg', 'files', 'hudi', 'mirror'"]


def test_partition_by_must_parse() -> None:
    result = validate_config({**BASE, "iceberg.table.db.orders.partition-by": "weeks(ts)"})
    assert "unknown partition transform 'weeks'" in result.errors["iceberg.table.db.orders.partition-by"][0]
    result = validate_config({**BASE, "iceberg.table.db.orders.partition-by": "truncate(id)"})
    assert "truncate needs a width" in result.errors["iceberg.table.db.orders.partition-by"][0]
    assert validate_config({**BASE, "iceberg.table.db.orders.partition-by": "bucket(16, id), days(ts)"}).ok


@pytest.mark.parametrize("writer", ["spark", "arrow", "auto"])
def test_bucket_partitions_are_accepted_on_both_data_planes(writer: str) -> None:
    # Both decode with the same code, which computes Iceberg's bucket hash.
    config = {**BASE, "sinkadmin.writer": writer, "iceberg.table.db.orders.partition-by": "bucket(16, id)"}
    assert validate_config(config).ok
    assert validate_config({**config, "value.converter.schemas.enable": "true"}).ok


def test_table_settings_must_name_a_listed_table() -> None:
    result = validate_config({**BASE, "iceberg.table.db.other.partition-by": "id"})
    assert "'db.other' is not one of iceberg.tables" in result.errors["iceberg.table.db.other.partition-by"][0]


def test_dead_letter_topic_needs_tolerance_all_and_may_not_loop() -> None:
    result = validate_config({**BASE, "errors.deadletterqueue.topic.name": "orders"})
    assert any("cannot be a source topic" in e for e in result.errors["errors.deadletterqueue.topic.name"])
    assert any("errors.tolerance=all" in e for e in result.errors["errors.deadletterqueue.topic.name"])


def test_a_dead_letter_table_is_an_iceberg_table_apart_from_the_sinks_and_needs_tolerance_all() -> None:
    key = "errors.deadletterqueue.table.name"
    good = {**BASE, "errors.tolerance": "all", key: "db.orders_dlq"}
    assert validate_config(good).errors == {}
    assert SinkConfig.parse(good).settings.dead_letter_table == "db.orders_dlq"
    assert SinkConfig.parse(BASE).settings.dead_letter_table is None
    errors = validate_config({**BASE, key: "db.orders"}).errors[key]
    assert any("cannot be one of iceberg.tables" in e for e in errors)
    assert any("errors.tolerance=all" in e for e in errors)
    assert "must be namespace.table" in validate_config({**good, key: "orders dlq"}).errors[key][0]


@pytest.mark.parametrize("connector_class", ["files", "hudi"])
def test_sinks_without_a_dead_letter_table_refuse_one_rather_than_drop_the_records(connector_class: str) -> None:
    config = {"connector.class": connector_class, "topics": "orders", "errors.tolerance": "all"}
    errors = validate_config({**config, "errors.deadletterqueue.table.name": "db.dlq"}).errors
    assert "has no dead-letter table" in errors["errors.deadletterqueue.table.name"][0]


def test_avro_converter_needs_a_valid_record_schema() -> None:
    result = validate_config({**BASE, "value.converter": "avro", "value.converter.avro.schema": "{bad"})
    assert "not valid JSON" in result.errors["value.converter.avro.schema"][0]


@pytest.mark.parametrize(
    "converter",
    [
        {"value.converter": "avro", "value.converter.avro.schema": AVRO_SCHEMA},
        {"value.converter.schemas.enable": "true"},
        {"value.converter": "string"},
        {"value.converter": "bytearray"},
    ],
)
def test_both_data_planes_take_every_converter(converter: dict[str, str]) -> None:
    for writer in ("spark", "arrow", "auto"):
        assert validate_config({**BASE, **converter, "sinkadmin.writer": writer}).ok
    assert SinkConfig.parse({**BASE, **converter}).writer == "spark"  # the default
    assert SinkConfig.parse({**BASE, **converter, "sinkadmin.writer": "auto"}).writer == "spark"
    assert "must be one of" in validate_config({**BASE, "sinkadmin.writer": "duckdb"}).errors["sinkadmin.writer"][0]


def test_typos_in_our_own_namespace_are_errors() -> None:
    result = validate_config({**BASE, "sinkadmin.commit.max-recrods": "10"})
    assert result.errors == {"sinkadmin.commit.max-recrods": ["unknown sinkadmin setting"]}


def test_upserts_key_by_the_configured_columns_or_the_tables_identifier_fields() -> None:
    # Without id-columns a table is keyed by its own identifier fields, as in Iceberg's sink (a table without
    # any is refused when the sink resolves it: tests/test_upserts.py).
    assert validate_config({**BASE, "iceberg.tables.upsert-mode-enabled": "true"}).ok
    assert validate_config({**BASE, "iceberg.tables.cdc-field": "op"}).ok
    unordered = validate_config({**BASE, "sinkadmin.upsert.ordering-field": "_cdc.ts"})
    assert "only upserts have" in unordered.errors["sinkadmin.upsert.ordering-field"][0]
    ordered = SinkConfig.parse({**BASE, "iceberg.tables.cdc-field": "op", "sinkadmin.upsert.ordering-field": "__lsn"})
    assert ordered.settings.ordering_field == "__lsn"
    keyed = {**BASE, "iceberg.tables.upsert-mode-enabled": "true"}
    assert validate_config({**keyed, "iceberg.tables.default-id-columns": "id"}).ok
    assert validate_config({**keyed, "iceberg.table.db.orders.id-columns": "id, region"}).ok
    config = SinkConfig.parse({**keyed, "iceberg.tables.default-id-columns": "id", "iceberg.tables.cdc-field": "op"})
    settings = config.settings
    assert settings.upsert_mode and settings.cdc_field == "op" and settings.tables[0].id_columns == ("id",)


def test_created_tables_get_the_sinks_properties_then_the_configs_and_upsert_tables_merge_on_read() -> None:
    keyed = {**BASE, "iceberg.tables.upsert-mode-enabled": "true", "iceberg.tables.default-id-columns": "id"}
    upserts = SinkConfig.parse(keyed).settings.table_properties
    assert upserts["format-version"] == "2" and upserts["write.merge.mode"] == "merge-on-read"
    appends = SinkConfig.parse(BASE).settings.table_properties
    assert "write.merge.mode" not in appends and appends["write.parquet.compression-codec"] == "zstd"
    prefix = "iceberg.tables.auto-create-props."
    chosen = SinkConfig.parse(
        {**keyed, f"{prefix}write.merge.mode": "copy-on-write", f"{prefix}commit.retry.num-retries": "9"}
    ).settings.table_properties
    assert chosen["write.merge.mode"] == "copy-on-write" and chosen["commit.retry.num-retries"] == "9"


def test_table_properties_the_sink_cannot_honour_are_refused_per_key() -> None:
    prefix = "iceberg.tables.auto-create-props."
    result = validate_config(
        {**BASE, f"{prefix}format-version": "4", f"{prefix}write.delete.mode": "merge-on-write", prefix: "x"}
    )
    assert "format versions 1, 2 and 3" in result.errors[f"{prefix}format-version"][0]
    assert result.errors[f"{prefix}write.delete.mode"] == ["copy-on-write or merge-on-read"]
    assert "name the table property" in result.errors[prefix][0]
    keyed = {**BASE, "iceberg.tables.upsert-mode-enabled": "true", "iceberg.tables.default-id-columns": "id"}
    v1 = validate_config({**keyed, f"{prefix}format-version": "1"})
    assert "format v1 tables have no delete files" in v1.errors[f"{prefix}format-version"][0]
    assert validate_config({**keyed, f"{prefix}format-version": "1", f"{prefix}write.merge.mode": "copy-on-write"}).ok
    assert validate_config({**keyed, f"{prefix}format-version": "3", "sinkadmin.upsert.ordering-field": "ts"}).ok


def test_non_string_values_are_coerced_or_rejected() -> None:
    result = validate_config({**BASE, "tasks.max": 3, "topics": ["a"]})
    assert result.config["tasks.max"] == "3"
    assert "must be a string, not list" in result.errors["topics"]


def test_connect_validate_shape_lists_definitions_and_hides_passwords() -> None:
    body = validate_config({**BASE, "sasl.password": "pw", "tasks.max": "x"}).to_connect()
    assert body["name"] == "org.apache.iceberg.connect.IcebergSinkConnector"
    assert body["error_count"] == 1
    by_name = {c["definition"]["name"]: c for c in body["configs"]}
    assert by_name["sasl.password"]["value"]["value"] == "[hidden]"
    assert by_name["tasks.max"]["value"]["errors"]
    assert by_name["topics"]["definition"]["type"] == "LIST"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("iceberg.tables.default-id-columns", "id"),
        ("iceberg.table.db.orders.id-columns", "id"),
    ],
)
def test_identifier_columns_without_upserts_are_refused_not_ignored(key: str, value: str) -> None:
    assert "set iceberg.tables.upsert-mode-enabled=true" in validate_config({**BASE, key: value}).errors[key][0]


def test_schema_evolution_is_accepted_where_records_carry_or_reveal_their_schema_and_refused_per_key_elsewhere() -> (
    None
):
    key = "iceberg.tables.evolve-schema-enabled"
    for writer in ("spark", "arrow"):
        assert validate_config({**BASE, key: "true", "sinkadmin.writer": writer}).ok  # plain JSON: typed as read
    assert validate_config({**BASE, key: "true", "value.converter.schemas.enable": "true"}).ok
    avro = {"value.converter": "avro", "value.converter.avro.schema": '{"type": "record", "name": "r", "fields": []}'}
    assert validate_config({**BASE, key: "true", **avro, "sinkadmin.writer": "arrow"}).ok
    # An envelope's schemas are collected by a Spark pass over the commit.
    envelope_on_arrow = {"value.converter.schemas.enable": "true", "sinkadmin.writer": "arrow"}
    arrow = validate_config({**BASE, key: "true", **envelope_on_arrow})
    assert (
        list(arrow.errors) == ["sinkadmin.writer"]
        and "needs the spark data plane" in arrow.errors["sinkadmin.writer"][0]
    )
    strings = validate_config({**BASE, key: "true", "value.converter": "string"})
    assert "these values have none" in strings.errors[key][0]


def test_offsets_policies_are_the_ledgers_and_the_consumers_own_reset_is_refused() -> None:
    refused = validate_config({**BASE, "consumer.override.auto.offset.reset": "earliest"})
    assert "offsets come from the commit ledger" in refused.errors["consumer.override.auto.offset.reset"][0]
    assert "sinkadmin.offsets.out-of-range" in refused.errors["consumer.override.auto.offset.reset"][0]
    wrong = validate_config({**BASE, "sinkadmin.offsets.out-of-range": "earliest"})
    assert list(wrong.errors) == ["sinkadmin.offsets.out-of-range"]
    assert SinkConfig.parse(BASE).out_of_range == "fail"
    assert SinkConfig.parse({**BASE, "sinkadmin.offsets.out-of-range": "skip"}).out_of_range == "skip"


def test_maintenance_keys_have_safe_defaults_and_refuse_unsafe_values_per_key() -> None:
    config = SinkConfig.parse(BASE)
    assert config.maintenance.enabled and config.maintenance.interval_ms == 3_600_000
    maintenance = config.settings.maintenance
    assert maintenance.target_file_size_bytes == 128 * 1024 * 1024 and maintenance.min_input_files == 5
    assert maintenance.max_snapshot_age_ms == 86_400_000 and maintenance.min_snapshots_to_keep == 1
    assert maintenance.orphan_older_than_ms == 3 * 86_400_000
    unsafe = validate_config(
        {
            **BASE,
            # A window shorter than a day could take a write in flight for an orphan (and Iceberg refuses it).
            "sinkadmin.maintenance.orphans.older-than-ms": "3600000",
            "sinkadmin.maintenance.expire.min-snapshots-to-keep": "0",
            "sinkadmin.maintenance.rewrite.min-input-files": "1",
            "sinkadmin.maintenance.enabled": "sometimes",
        }
    )
    assert sorted(unsafe.errors) == [
        "sinkadmin.maintenance.enabled",
        "sinkadmin.maintenance.expire.min-snapshots-to-keep",
        "sinkadmin.maintenance.orphans.older-than-ms",
        "sinkadmin.maintenance.rewrite.min-input-files",
    ]
    assert "at least 86400000" in unsafe.errors["sinkadmin.maintenance.orphans.older-than-ms"][0]
    off = SinkConfig.parse({**BASE, "sinkadmin.maintenance.enabled": "false"}).maintenance
    assert not off.enabled


def test_a_key_family_suggests_its_keys_for_the_items_the_config_names() -> None:
    from sinks.iceberg.plugin import ICEBERG

    families = {prefix.prefix: prefix for prefix in ICEBERG.prefix_keys}
    per_table = families["iceberg.table."]
    assert per_table.suggestions({"iceberg.tables": "db.a, db.b"}) == [
        f"iceberg.table.{table}.{setting}"
        for table in ("db.a", "db.b")
        for setting in ("partition-by", "route-regex", "id-columns")
    ]
    assert per_table.suggestions({})[0] == "iceberg.table.<table>.partition-by"
    assert families["iceberg.catalog."].suggestions({"iceberg.tables": "db.a"}) == ["iceberg.catalog."]


@pytest.mark.parametrize("sink", ["files", "hudi", "iceberg"])
def test_every_coordinated_sink_refuses_a_consumer_reset_the_ledger_would_override(sink: str) -> None:
    from sinks.registry import PLUGINS

    plugin = next(p for p in PLUGINS if p.short_name == sink)
    required = {k.name: "x" for k in plugin.keys if k.required and k.name != "connector.class"}
    config = {**required, "connector.class": sink, "topics": "t", "consumer.override.auto.offset.reset": "latest"}
    errors = validate_config(config).errors
    assert "sinkadmin.offsets.out-of-range" in errors["consumer.override.auto.offset.reset"][0]


def test_upsert_identifier_columns_must_be_fields_of_a_schema_the_config_gives() -> None:
    schema = json.dumps(
        {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}, {"name": "v", "type": "string"}]}
    )
    keyed = {
        **BASE,
        "iceberg.tables.upsert-mode-enabled": "true",
        "value.converter": "avro",
        "value.converter.avro.schema": schema,
    }
    assert validate_config({**keyed, "iceberg.tables.default-id-columns": "id"}).ok
    wrong = validate_config({**keyed, "iceberg.table.db.orders.id-columns": "order_id"})
    assert list(wrong.errors) == ["iceberg.table.db.orders.id-columns"]
    assert "order_id is not a field of the value schema" in wrong.errors["iceberg.table.db.orders.id-columns"][0]


def test_transforms_are_checked_key_by_key_and_what_cannot_run_is_refused() -> None:
    unwrap = {
        **BASE,
        "transforms": "unwrap",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.delete.handling.mode": "rewrite",
    }
    assert validate_config(unwrap).ok
    assert SinkConfig.parse(unwrap).transforms is not None
    assert validate_config({**BASE, "transforms": ""}).ok
    # A class we do not have, by name; a key its class does not have; a value it refuses.
    errors = validate_config(
        {
            **unwrap,
            "transforms": "unwrap,mystery,cast",
            "transforms.unwrap.delete.handling.mode": "keep",
            "transforms.mystery.type": "com.example.Mystery",
            "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
            "transforms.cast.spec": "amount:int32",
            "transforms.cast.typo": "1",
        }
    ).errors
    assert sorted(errors) == [
        "transforms.cast.typo",
        "transforms.mystery.type",
        "transforms.unwrap.delete.handling.mode",
    ]
    assert "Class com.example.Mystery could not be found" in errors["transforms.mystery.type"][0]
    # Routers rename topics. Iceberg's sink (and Hudi's) write every record to their tables whatever its topic,
    # so there a renamed topic matters to the later predicates only, and the chain runs them; the files sink
    # writes by topic and does not follow them yet; the mirror copies records as they are.
    routed = {
        **BASE,
        "transforms": "route,only",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "(.*)",
        "transforms.route.replacement": "copy-$1",
        "transforms.only.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.only.predicate": "copies",
        "transforms.only.negate": "true",
        "predicates": "copies",
        "predicates.copies.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.copies.pattern": "copy-.*",
    }
    assert validate_config(routed).errors == {}
    chain = SinkConfig.parse(routed).transforms
    assert chain is not None
    kept = chain.apply(ConnectRecord(topic="orders", partition=0, offset=0, timestamp=None, key=None, value={}))
    assert kept is not None and kept.topic == "copy-orders"
    files = {
        "connector.class": "files",
        "topics": "orders",
        "store.url": "file:///tmp/out",
        "format.class": "parquet",
        "flush.size": "1000",
    }
    files_errors = validate_config({**files, **{k: v for k, v in routed.items() if k not in BASE}}).errors
    assert list(files_errors) == ["transforms.route.type"]
    assert "the files sink writes records by the topic" in files_errors["transforms.route.type"][0]
    mirror = validate_config(
        {
            "connector.class": "mirror",
            "source.cluster.bootstrap.servers": "a:9092",
            "target.cluster.bootstrap.servers": "b:9092",
            "topics": "orders",
            "transforms": "x",
            "transforms.x.type": "org.apache.kafka.connect.transforms.Filter",
        }
    )
    assert "not supported on it" in mirror.errors["transforms"][0]


# A valid config of each coordinated sink.
SINKS = {
    "iceberg": BASE,
    "hudi": {
        "connector.class": "hudi",
        "topics": "orders",
        "target.base.path": "/var/tables/orders",
        "target.table.name": "orders",
        "hoodie.datasource.write.recordkey.field": "id",
    },
    "files": {
        "connector.class": "files",
        "topics": "orders",
        "store.url": "/var/files",
        "format.class": "json",
        "flush.size": "100",
    },
}


@pytest.mark.parametrize("sink", sorted(SINKS))
def test_per_client_overrides_reach_librdkafka_as_written_or_are_refused_per_key_with_why(sink: str) -> None:
    from confluent_kafka import Consumer, Producer

    from connectors.config.kafka_clients import producer_config, source_consumer_config

    base = SINKS[sink]
    taken = {
        "consumer.override.fetch.min.bytes": "1024",
        "consumer.override.isolation.level": "read_uncommitted",
        "consumer.override.max.partition.fetch.bytes": "2097152",  # (the Java name, an alias in librdkafka)
        "consumer.override.client.rack": "eu-1a",
        "consumer.override.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="reader" password="pw";',
        "producer.override.compression.type": "zstd",
        "producer.override.linger.ms": "20",
    }
    ignored = {
        "consumer.override.max.poll.interval.ms": "600000",  # (Kafka Connect users raise it for slow puts)
        "consumer.override.max.poll.records": "500",  # (and set this one, for the size of a put)
        "consumer.override.enable.auto.commit": "false",
        "producer.override.enable.idempotence": "true",
        "producer.override.acks": "all",
    }
    refused = {
        "consumer.override.fetch.max.wait.ms": "fetch.wait.max.ms",  # a Java client's, named by librdkafka's
        "consumer.override.linger.ms": "a setting of its producers",
        "consumer.override.fetch.min.bytez": "did you mean consumer.override.fetch.min.bytes?",
        "consumer.override.enable.auto.commit": "the consumer commits none",
        "consumer.override.sasl.jaas.config": "only PlainLoginModule and ScramLoginModule",
        "producer.override.acks": "every in-sync replica",
        "producer.override.transactional.id": "no transactions",
        "producer.override.buffer.memory": "queue.buffering.max.kbytes",
    }
    good = validate_config({**base, **taken, **ignored})
    assert good.errors == {}
    assert all("ignored:" in good.notes[key][0] for key in ignored) and not set(taken) & set(good.notes)
    # What is taken, librdkafka takes: each client is made (it connects only when used).
    Consumer(source_consumer_config("127.0.0.1:1", good.config, "g")).close()
    Producer(producer_config("127.0.0.1:1", good.config)).flush(0)
    assert source_consumer_config("127.0.0.1:1", good.config, "g")["sasl.username"] == "reader"

    values = {
        "consumer.override.enable.auto.commit": "true",
        "consumer.override.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;",
        "producer.override.acks": "1",
    }
    bad = validate_config({**base, **{key: values.get(key, "1") for key in refused}})
    assert sorted(bad.errors) == sorted(refused)
    for key, why in refused.items():
        assert why in bad.errors[key][0], (key, bad.errors[key])


def test_the_connectors_own_java_security_settings_it_cannot_read_are_refused() -> None:
    kerberos = validate_config({**BASE, "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"})
    assert "only PlainLoginModule and ScramLoginModule" in kerberos.errors["sasl.jaas.config"][0]
    jks = validate_config({**BASE, "ssl.truststore.location": "/etc/ca.jks", "ssl.truststore.type": "JKS"})
    assert "give the CA certificates as PEM" in jks.errors["ssl.truststore.type"][0]
