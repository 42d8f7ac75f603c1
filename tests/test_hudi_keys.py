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
    assert HUDI_CONFIG_KEYS["hoodie.metadata.enable"] and HUDI_CONFIG_KEYS["hoodie.compact.inline"]
    assert not HUDI_CONFIG_KEYS["hoodie.cleaner.commits.retained"]
