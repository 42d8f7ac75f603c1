"""Keys of Hudi's Kafka Connect sink (KafkaConnectConfigs) and Hudi's other names of this sink's keys, and
Debezium's deletes as rows into an upsert: each key honoured, mapped, ignored with a note or refused with why,
never refused as a typo, and no config that would write every delete as a live row."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.config import SinkConfig, validate_config
from sinks.hudi.settings import writer_options

TYPO = "a typo would be a lost setting"
UNWRAP = {"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}
MODE = "transforms.unwrap.delete.tombstone.handling.mode"
LEGACY_MODE = "transforms.unwrap.delete.handling.mode"
MARKER = {"hoodie.payload.delete.field": "__deleted", "hoodie.payload.delete.marker": "true"}


def hudi_config(base: Path, **overrides: str) -> dict[str, str]:
    return {
        "connector.class": "org.apache.hudi.connect.HoodieSinkConnector",
        "topics": "orders",
        "target.base.path": str(base),
        "target.table.name": "orders",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "sinkadmin.writer": "arrow",
        **overrides,
    }


def test_allow_commit_on_errors_is_accepted_only_as_what_the_sink_does(tmp_path: Path) -> None:
    key = "hoodie.kafka.allow.commit.on.errors"
    accepted = validate_config(hudi_config(tmp_path, **{key: "false"}))
    assert accepted.ok and "as with false" in accepted.notes[key][0]
    [why] = validate_config(hudi_config(tmp_path, **{key: "true"})).errors[key]
    assert "never without those it failed on" in why and "errors.tolerance" in why and TYPO not in why


@pytest.mark.parametrize(
    ("overrides", "note"),
    [
        ({"hoodie.table.type": "MERGE_ON_READ", "hoodie.kafka.compaction.async.enable": "true"}, "as with true"),
        ({"hoodie.kafka.compaction.async.enable": "false"}, "copy-on-write table has no compaction"),
        (
            {
                "hoodie.table.type": "MERGE_ON_READ",
                "hoodie.kafka.compaction.async.enable": "false",
                "sinkadmin.maintenance.enabled": "false",
            },
            "left to another job",
        ),
    ],
)
def test_kafka_async_compaction_that_agrees_with_the_sink_is_noted(
    tmp_path: Path, overrides: dict[str, str], note: str
) -> None:
    result = validate_config(hudi_config(tmp_path, **overrides))
    assert result.ok, result.errors
    assert note in result.notes["hoodie.kafka.compaction.async.enable"][0]


@pytest.mark.parametrize("inline", [{}, {"hoodie.compact.inline": "true", "sinkadmin.maintenance.enabled": "false"}])
def test_kafka_async_compaction_off_is_refused_where_the_sink_compacts(tmp_path: Path, inline: dict[str, str]) -> None:
    key = "hoodie.kafka.compaction.async.enable"
    config = hudi_config(tmp_path, **{"hoodie.table.type": "MERGE_ON_READ", key: "false", **inline})
    [why] = validate_config(config).errors[key]
    assert "set sinkadmin.maintenance.enabled=false" in why and TYPO not in why
    [bad] = validate_config(hudi_config(tmp_path, **{key: "yes"})).errors[key]
    assert "either true or false" in bad


def test_the_datasources_table_type_is_the_table_type(tmp_path: Path) -> None:
    key = "hoodie.datasource.write.table.type"
    config = SinkConfig.parse(hudi_config(tmp_path, **{key: "MERGE_ON_READ"}))
    assert config.settings.table_type == "MERGE_ON_READ" and config.settings.merge_on_read
    assert writer_options(config.settings, config.raw)[key] == "MERGE_ON_READ"
    both = hudi_config(tmp_path, **{key: "MERGE_ON_READ", "hoodie.table.type": "COPY_ON_WRITE"})
    assert "not both with different values" in validate_config(both).errors[key][0]
    assert validate_config(hudi_config(tmp_path, **{key: "MERGE_ON_READ", "hoodie.table.type": "MERGE_ON_READ"})).ok
    [why] = validate_config(hudi_config(tmp_path, **{key: "MOR"})).errors[key]
    assert "must be one of COPY_ON_WRITE, MERGE_ON_READ" in why


def test_hudis_ordering_fields_are_the_precombine_field(tmp_path: Path) -> None:
    key = "hoodie.table.ordering.fields"
    config = SinkConfig.parse(hudi_config(tmp_path, **{"hoodie.datasource.write.precombine.field": "", key: "ts"}))
    assert config.settings.precombine_field == "ts"
    assert writer_options(config.settings, config.raw)["hoodie.datasource.write.precombine.field"] == "ts"
    assert key not in writer_options(config.settings, config.raw)
    # Insert without combining: the note goes on the key the config names it with.
    insert = {"hoodie.datasource.write.precombine.field": "", key: "ts", "hoodie.datasource.write.operation": "insert"}
    assert "merges records by it on upsert" in validate_config(hudi_config(tmp_path, **insert)).notes[key][0]
    differ = validate_config(hudi_config(tmp_path, **{key: "updated_at"})).errors[key]
    assert "not both with different values" in differ[0]
    [several] = validate_config(
        hudi_config(tmp_path, **{"hoodie.datasource.write.precombine.field": "", key: "ts,seq"})
    ).errors[key]
    assert "more than one field is not supported yet" in several and TYPO not in several


@pytest.mark.parametrize(
    "unwrap",
    [
        {MODE: "rewrite"},
        {LEGACY_MODE: "rewrite"},
        # (Debezium's tombstone after each delete cannot delete under event-time ordering: it goes to the dead
        # letters, and the row with __deleted=true stays.)
        {MODE: "rewrite-with-tombstone"},
    ],
)
def test_deletes_as_rows_without_a_delete_marker_are_refused_on_upsert(tmp_path: Path, unwrap: dict[str, str]) -> None:
    [key] = unwrap
    errors = validate_config(hudi_config(tmp_path, **UNWRAP, **unwrap)).errors
    assert list(errors) == [key]
    [why] = [why for why in errors[key] if "live row" in why]
    assert "every deleted row would be upserted as a live row" in why
    assert "hoodie.payload.delete.field=__deleted and hoodie.payload.delete.marker=true" in why


@pytest.mark.parametrize(
    ("unwrap", "key"),
    [
        ({MODE: "rewrite-with-tombstone"}, MODE),
        ({LEGACY_MODE: "rewrite", "transforms.unwrap.drop.tombstones": "false"}, "transforms.unwrap.drop.tombstones"),
    ],
)
def test_debeziums_tombstones_after_deletes_are_refused_where_a_tombstone_cannot_delete(
    tmp_path: Path, unwrap: dict[str, str], key: str
) -> None:
    """With a delete marker each delete's row deletes; the tombstone Debezium sends after it has no precombine
    value to order it by, and would be a bad record at every delete."""
    errors = validate_config(hudi_config(tmp_path, **UNWRAP, **unwrap, **MARKER)).errors
    assert list(errors) == [key]
    [why] = errors[key]
    assert "keeps the tombstone that follows each delete" in why and "precombine field (ts)" in why
    assert "delete.tombstone.handling.mode=rewrite, which drops them" in why


@pytest.mark.parametrize(
    "works",
    [
        {MODE: "rewrite", **MARKER},
        {LEGACY_MODE: "rewrite", **MARKER},
        # Another marker of the config's own (the operation, added as a field).
        {MODE: "rewrite", "transforms.unwrap.add.fields": "op", "hoodie.payload.delete.field": "__op"}
        | {"hoodie.payload.delete.marker": "d"},
        # Inserts append every row: a delete marker applies to upserts only (and is refused there).
        {MODE: "rewrite", "hoodie.datasource.write.operation": "insert"},
        # Ordered by commit in an unpartitioned table, the tombstone that follows each delete's row deletes it.
        {MODE: "rewrite-with-tombstone", "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"},
        {MODE: "drop"},
    ],
)
def test_deletes_that_delete_or_a_log_of_rows_stand(tmp_path: Path, works: dict[str, str]) -> None:
    result = validate_config(hudi_config(tmp_path, **UNWRAP, **works))
    assert result.ok, result.errors


def test_hudis_write_configs_are_checked_against_the_keys_hudi_declares(tmp_path: Path) -> None:
    """Hudi's write configs pass to its writer as written, and Hudi ignores a key it does not declare and reads a
    boolean it cannot parse as false: both would be lost settings."""
    errors = validate_config(
        hudi_config(
            tmp_path,
            **{
                "hoodie.index.typ": "BLOOM",
                "hoodie.metadata.enable": "flase",
                "hoodie.compact.inline": "TRUE",  # (Hudi's Boolean.parseBoolean ignores case)
                "hoodie.cleaner.commits.retained": "3",
                # A setting of a custom strategy, far from any key of Hudi's: handed to it as written.
                "hoodie.clustering.plan.strategy.acme.max.groups": "4",
            },
        )
    ).errors
    assert sorted(errors) == ["hoodie.index.typ", "hoodie.metadata.enable"]
    assert errors["hoodie.index.typ"] == [
        "not a key of Hudi's write configs (Hudi 1.2 would ignore it): did you mean hoodie.index.type?"
    ]
    assert (
        "Expected value to be either true or false (Hudi reads any other value as false)"
        in (errors["hoodie.metadata.enable"][0])
    )


def test_the_generated_key_list_covers_every_family_passed_through() -> None:
    from sinks.hudi.config_keys import HUDI_CONFIG_KEYS
    from sinks.hudi.plugin import HUDI_WRITE_CONFIG_FAMILIES

    for family in HUDI_WRITE_CONFIG_FAMILIES:
        assert any(key.startswith(family) for key in HUDI_CONFIG_KEYS), family
    assert HUDI_CONFIG_KEYS["hoodie.metadata.enable"] == HUDI_CONFIG_KEYS["hoodie.compact.inline"] == "boolean"
    # Typed Integer, Long, Double; a text whose default is a whole number or a decimal (Hudi's older keys).
    assert HUDI_CONFIG_KEYS["hoodie.bucket.index.num.buckets"] == "integer"
    assert HUDI_CONFIG_KEYS["hoodie.memory.merge.max.size"] == "long"
    assert HUDI_CONFIG_KEYS["hoodie.bucket.index.split.threshold"] == "number"
    assert HUDI_CONFIG_KEYS["hoodie.compact.inline.max.delta.commits"] == "long"
    assert HUDI_CONFIG_KEYS["hoodie.parquet.compression.ratio"] == "number"
    assert HUDI_CONFIG_KEYS["hoodie.index.type"] == ""


# Keys Hudi parses as an int (Integer.parseInt), a long (a text with a whole-number default: Long.parseLong or
# Integer.parseInt) and a double (Double.parseDouble).
INT_KEY = "hoodie.client.heartbeat.tolerable.misses"
LONG_KEY = "hoodie.compact.inline.max.delta.commits"
NUMBER_KEY = "hoodie.parquet.compression.ratio"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (LONG_KEY, "x"),
        (LONG_KEY, "5.0"),  # (no decimal point)
        (LONG_KEY, "1_000"),
        (LONG_KEY, "--5"),
        (LONG_KEY, "9223372036854775808"),  # (one past Long.MAX_VALUE)
        (INT_KEY, "2147483648"),  # (one past Integer.MAX_VALUE)
        (INT_KEY, "-2147483649"),
        (INT_KEY, "0x10"),
        (NUMBER_KEY, "ten percent"),
        (NUMBER_KEY, "1,5"),
        (NUMBER_KEY, "nan"),  # (Double.parseDouble takes NaN and Infinity, spelled so)
        (NUMBER_KEY, "inf"),
        (NUMBER_KEY, "1e"),
    ],
)
def test_a_value_hudi_cannot_parse_as_its_keys_number_is_refused(tmp_path: Path, key: str, value: str) -> None:
    """Hudi parses a number's value when its writer starts, after the commit was prepared: a value it cannot
    parse would fail every write of it."""
    [why] = validate_config(hudi_config(tmp_path, **{key: value})).errors[key]
    assert why.startswith(f"Invalid value {value} for configuration {key}: Expected ")
    expected = {INT_KEY: "an integer from -2147483648 to 2147483647", LONG_KEY: "an integer from -9223372036854775808"}
    assert expected.get(key, "a number (Hudi reads it with Double.parseDouble") in why


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (LONG_KEY, "5"),
        (LONG_KEY, "-1"),
        (LONG_KEY, "+12"),  # (Long.parseLong takes a plus sign)
        (LONG_KEY, "9223372036854775807"),
        (LONG_KEY, " 5 "),  # (trimmed before Hudi reads it, writer_options: Long.parseLong would fail on a space)
        (LONG_KEY, "٣"),  # (Arabic-Indic three: Character.digit reads any script's digits)
        (INT_KEY, "-2147483648"),
        (INT_KEY, "2147483647"),
        (NUMBER_KEY, "0.35"),
        (NUMBER_KEY, "-2"),
        (NUMBER_KEY, " 0.5 "),  # (Double.parseDouble trims white space and control characters)
        (NUMBER_KEY, "\t1e-9\n"),
        (NUMBER_KEY, ".5"),
        (NUMBER_KEY, "5."),
        (NUMBER_KEY, "2.5f"),
        (NUMBER_KEY, "0x1.8p1"),
        (NUMBER_KEY, "NaN"),
        (NUMBER_KEY, "-Infinity"),
    ],
)
def test_a_value_hudi_parses_as_its_keys_number_is_accepted(tmp_path: Path, key: str, value: str) -> None:
    result = validate_config(hudi_config(tmp_path, **{key: value}))
    assert result.ok, result.errors


# The table config Hudi 1.2's writer leaves (table version 9) for a connector of hudi_config's keys partitioned by
# region: its .hoodie/hoodie.properties, as Properties.store writes it.
TABLE_PROPERTIES = r"""#Updated at 2026-11-29T15:05:31.112678975Z
#Sun Nov 29 15:05:31 UTC 2026
hoodie.table.keygenerator.type=SIMPLE
hoodie.table.type=COPY_ON_WRITE
hoodie.timeline.layout.version=2
hoodie.table.checksum=1285911062
hoodie.datasource.write.drop.partition.columns=false
hoodie.table.partition_extractor_class=org.apache.hudi.hive.MultiPartKeysValueExtractor
hoodie.datasource.write.hive_style_partitioning=false
hoodie.database.name=default
hoodie.datasource.write.partitionpath.urlencode=false
hoodie.record.merge.mode=EVENT_TIME_ORDERING
hoodie.table.version=9
hoodie.table.initial.version=9
hoodie.table.metadata.partitions=files
hoodie.table.partition.fields=region
hoodie.table.cdc.enabled=false
hoodie.table.name=orders
hoodie.table.recordkey.fields=id
hoodie.timeline.path=timeline
hoodie.table.ordering.fields=ts
hoodie.populate.meta.fields=true
hoodie.table.base.file.format=PARQUET
"""
REGION = {"hoodie.datasource.write.partitionpath.field": "region"}


def table_conflicts_of(base: Path, table: str = TABLE_PROPERTIES, **overrides: str) -> list[str]:
    from connectors.config.properties import load_properties as parse_properties
    from sinks.hudi.table_config import conflicts

    config = SinkConfig.parse(hudi_config(base, **overrides))
    return [str(c) for c in conflicts(writer_options(config.settings, config.raw), parse_properties(table), config.raw)]


@pytest.mark.parametrize(
    ("overrides", "found"),
    [
        (
            {**REGION, "hoodie.datasource.write.recordkey.field": "amount"},
            [
                "hoodie.datasource.write.recordkey.field is 'amount' here, 'id' in the table (hoodie.table.recordkey.fields)"
            ],
        ),
        (
            {"hoodie.datasource.write.partitionpath.field": "op"},
            [
                "hoodie.datasource.write.partitionpath.field is 'op' here, 'region' in the table (hoodie.table.partition.fields)"
            ],
        ),
        # Unpartitioned: the sink's key generator is Nonpartitioned's, and the table's Simple one reads no fields.
        (
            {},
            [
                "hoodie.datasource.write.keygenerator.class is 'org.apache.hudi.keygen.NonpartitionedKeyGenerator' here "
                "(the sink's choice for these record key and partition path fields; "
                "hoodie.datasource.write.keygenerator.class sets another), "
                "'org.apache.hudi.keygen.SimpleKeyGenerator' in the table (hoodie.table.keygenerator.type)",
                "hoodie.datasource.write.partitionpath.field is '' here, 'region' in the table "
                "(hoodie.table.partition.fields)",
            ],
        ),
        (
            {**REGION, "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator"},
            [
                "hoodie.datasource.write.keygenerator.class is 'org.apache.hudi.keygen.ComplexKeyGenerator' here, "
                "'org.apache.hudi.keygen.SimpleKeyGenerator' in the table (hoodie.table.keygenerator.type)"
            ],
        ),
        (
            {**REGION, "hoodie.table.ordering.fields": "amount", "hoodie.datasource.write.precombine.field": ""},
            [
                "hoodie.table.ordering.fields (hoodie.datasource.write.precombine.field) is 'amount' here, 'ts' in the "
                "table (hoodie.table.ordering.fields)"
            ],
        ),
        (
            {**REGION, "target.table.name": "payments", "target.database.name": "lake"},
            [
                "target.table.name (hoodie.table.name) is 'payments' here, 'orders' in the table (hoodie.table.name)",
                "target.database.name (hoodie.database.name) is 'lake' here, 'default' in the table "
                "(hoodie.database.name)",
            ],
        ),
        (
            {**REGION, "hoodie.datasource.write.hive_style_partitioning": "true"},
            [
                "hoodie.datasource.write.hive_style_partitioning is 'true' here, 'false' in the table "
                "(hoodie.datasource.write.hive_style_partitioning)"
            ],
        ),
        # Ordered by commit, the sink gives Hudi no ordering field: only the merge mode conflicts.
        (
            {**REGION, "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"},
            ["hoodie.record.merge.mode is 'COMMIT_TIME_ORDERING' here, 'EVENT_TIME_ORDERING' in the table"],
        ),
        (
            {**REGION, "hoodie.write.record.merge.strategy.id": "acme"},
            [
                "hoodie.write.record.merge.strategy.id is 'acme' here, not set in the table (hoodie.record.merge.strategy.id)"
            ],
        ),
    ],
)
def test_a_config_hudi_refuses_on_the_table_conflicts_with_it_key_by_key(
    tmp_path: Path, overrides: dict[str, str], found: list[str]
) -> None:
    """HoodieWriterUtils.validateTableConfig's rules, as Hudi 1.2 compiles them (sinks.hudi.table_config)."""
    conflicts = table_conflicts_of(tmp_path, **overrides)
    assert len(conflicts) == len(found), conflicts
    for conflict, expected in zip(conflicts, found, strict=True):
        assert conflict.startswith(expected), conflict


@pytest.mark.parametrize(
    "overrides",
    [
        REGION,
        # Hudi compares the name ignoring case (Spark's resolver), and writes the table as its own type says.
        {**REGION, "target.table.name": "ORDERS"},
        {**REGION, "hoodie.table.type": "MERGE_ON_READ"},
        # Keyless inserts into a keyed table: Hudi generates their keys.
        {
            **REGION,
            "hoodie.datasource.write.operation": "insert",
            "hoodie.datasource.write.recordkey.field": "",
            "hoodie.datasource.write.precombine.field": "",
        },
        # An insert that does not combine gives Hudi no ordering field to compare.
        {**REGION, "hoodie.datasource.write.operation": "insert", "hoodie.datasource.write.precombine.field": "amount"},
        # From table version 9 the merge mode decides how records merge: a payload class is not compared.
        {
            **REGION,
            "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
        },
    ],
)
def test_a_config_hudi_writes_to_the_table_has_no_conflict(tmp_path: Path, overrides: dict[str, str]) -> None:
    assert table_conflicts_of(tmp_path, **overrides) == []


def test_a_database_and_partition_fields_the_table_does_not_hold_are_not_compared(tmp_path: Path) -> None:
    """A table without a database name takes any (HoodieWriterUtils.shouldIgnoreConfig); an unpartitioned one's
    key generator reads no partition fields, so a config that names its key generator writes there whatever its
    partition path fields say."""
    unpartitioned = (
        TABLE_PROPERTIES.replace("hoodie.database.name=default\n", "")
        .replace("keygenerator.type=SIMPLE", "keygenerator.type=NON_PARTITION")
        .replace("partition.fields=region", "partition.fields=")
    )
    nonpartitioned = {"hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator"}
    assert (
        table_conflicts_of(tmp_path, unpartitioned, **REGION, **nonpartitioned, **{"target.database.name": "lake"})
        == []
    )
    [keys] = table_conflicts_of(tmp_path, unpartitioned, **REGION)
    assert "'org.apache.hudi.keygen.SimpleKeyGenerator' here" in keys and "NonpartitionedKeyGenerator' in the" in keys


def test_a_custom_key_generators_partition_fields_are_compared_without_their_types(tmp_path: Path) -> None:
    """The table config keeps the types (escaped, as Properties.store writes a colon); Hudi compares the fields."""
    custom = TABLE_PROPERTIES.replace("keygenerator.type=SIMPLE", "keygenerator.type=CUSTOM").replace(
        "partition.fields=region", r"partition.fields=region\:simple"
    )
    generator = {"hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.CustomKeyGenerator"}
    path = "hoodie.datasource.write.partitionpath.field"
    assert table_conflicts_of(tmp_path, custom, **generator, **{path: "region:simple"}) == []
    [other] = table_conflicts_of(tmp_path, custom, **generator, **{path: "op:simple"})
    assert other == f"{path} is 'op:simple' here, 'region' in the table (hoodie.table.partition.fields)"


def test_a_table_config_is_read_as_java_reads_properties() -> None:
    from connectors.config.properties import load_properties as parse_properties

    text = "# comment\n! also one\n  a=1\nb : two words \\\n    and more\nc\\:d = e\\u00e9\\\\\nf\n\ng:\n"
    assert parse_properties(text) == {"a": "1", "b": "two words and more", "c:d": "eé\\", "f": "", "g": ""}


def test_hudis_write_configs_reach_its_writer_as_the_validation_read_them(tmp_path: Path) -> None:
    # Hudi reads " true" as false (Boolean.parseBoolean) and fails on " 5" (Integer.parseInt); the validation
    # trims both, and an empty value is unset in the config's form: the writer is given what was checked.
    raw = hudi_config(
        tmp_path,
        **{
            "hoodie.metadata.enable": " true",
            "hoodie.compact.inline.max.delta.commits": " 5 ",
            "hoodie.index.type": "",
        },
    )
    assert validate_config(raw).ok
    config = SinkConfig.parse(raw)
    options = writer_options(config.settings, config.raw)
    assert options["hoodie.metadata.enable"] == "true"
    assert options["hoodie.compact.inline.max.delta.commits"] == "5"
    assert options["hoodie.index.type"] == config.settings.index_type  # (the sink's own, not the empty one)
