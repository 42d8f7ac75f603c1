"""Real configs of the connectors this service replaces, as their users write them (tests/config_corpus/, each
naming its source), through the validator the API's ``PUT /connector-plugins/{plugin}/config/validate`` runs.

The rule: every key of such a config is honoured (a key of the sink), mapped (a key of the replaced
connector taken as one of ours), ignored with a note (ignoring it changes nothing written), refused with an
error saying why (ignoring it would change what is written), or passed through as Kafka Connect passes an
unknown key (outside the namespaces the sink owns). No key is dropped silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from connectors.api.entities import validation_result
from connectors.config import Plugin, SinkConfig, validate_config
from connectors.config.validation import ConfigValidation
from connectors.ui.config_text import parse_properties
from sinks.hudi.plugin import SYNONYMS as HUDI_SYNONYMS

CORPUS = Path(__file__).parent / "config_corpus"
# Keys of a replaced connector that a sink takes as one of its own keys, under their own name.
MAPPED = {**HUDI_SYNONYMS, "hdfs.url": "store.url"}


@dataclass(frozen=True)
class Expected:
    """What a corpus config's keys are expected to be, beyond the sink's own keys (honoured) and MAPPED."""

    # key -> a part of the reason it is refused with.
    refused: dict[str, str] = field(default_factory=dict)
    ignored: frozenset[str] = frozenset()
    passed: frozenset[str] = frozenset()


# Why a key is refused, for every refusal the corpus meets: each would change what is written if ignored.
EXPECTED: dict[str, Expected] = {
    "iceberg-single-table.json": Expected(),
    "iceberg-static-routing.json": Expected(),
    # Dynamic routing: each record's table is named by its db_table field (sinks.iceberg.routing).
    "iceberg-dynamic-routing.json": Expected(),
    "iceberg-hive-catalog.json": Expected(),
    # (Its auto-create-props.bq_connection is a property of the tables the sink creates: honoured.)
    "iceberg-bigquery-catalog.json": Expected(),
    # The Iceberg sink's CopyValue transform, run by the tasks as they stage records (connectors.smt).
    "iceberg-copy-value-transform.json": Expected(),
    "hudi-demo-config-sink.json": Expected(
        refused={
            # The schema provider types the columns; the records typed otherwise would differ.
            "hoodie.schemaprovider.class": "a Hudi schema provider is not read",
            "hoodie.deltastreamer.schemaprovider.registry.url": "a Hudi schema provider is not read",
            # Hudi parses StringConverter values as JSON; here a string value is one text column, with no key.
            "hoodie.datasource.write.recordkey.field": "values read with the org.apache.kafka.connect.storage."
            "StringConverter converter have no fields",
        },
        # (hoodie.table.type=MERGE_ON_READ, hoodie.metadata.enable and hoodie.keep.* are Hudi's writer's.)
        ignored=frozenset({"bootstrap.servers"}),
    ),
    "hudi-demo-config-sink-hive.json": Expected(
        refused={
            "hoodie.schemaprovider.class": "a Hudi schema provider is not read",
            "hoodie.streamer.schemaprovider.registry.url": "a Hudi schema provider is not read",
            "hoodie.datasource.write.recordkey.field": "have no fields",
            # Where the table is: HDFS is not a store this sink writes Hudi tables to.
            "hoodie.base.path": "hdfs:// base paths are not supported",
            # Hive readers would not find the table: the user must register it.
            "hoodie.meta.sync.enable": "the table is not synced to a metastore",
        },
        ignored=frozenset(
            {
                "bootstrap.servers",
                "hoodie.meta.sync.classes",
                "hoodie.datasource.hive_sync.table",
                "hoodie.datasource.hive_sync.partition_fields",
                "hoodie.datasource.hive_sync.partition_extractor_class",
                "hoodie.datasource.hive_sync.use_jdbc",
                "hoodie.datasource.hive_sync.mode",
            }
        ),
        # Hadoop's and Hive's client settings, which Kafka Connect passes to the connector as it does any key.
        passed=frozenset(
            {"dfs.client.use.datanode.hostname", "hive.metastore.uris", "hive.metastore.client.socket.timeout"}
        ),
    ),
    "hdfs-quickstart-hdfs.properties": Expected(passed=frozenset({"name"})),
    "s3-quickstart-s3.properties": Expected(
        ignored=frozenset({"s3.part.size", "storage.class", "schema.compatibility"}), passed=frozenset({"name"})
    ),
}


def load(path: Path) -> dict[str, Any]:
    """A corpus file's connector config, with the source it names checked present."""
    if path.suffix == ".json":
        document = json.loads(path.read_text())
        assert {"project", "url", "path", "adapted"} <= set(document["_source"]), f"{path.name} names its source"
        config: dict[str, Any] = document["config"]
        return config
    text = path.read_text()
    assert "# _source:" in text and "https://" in text and "# adapted:" in text, f"{path.name} names its source"
    return dict(parse_properties(text))


def classify(plugin: Plugin, validation: ConfigValidation, key: str) -> str:
    """Which of the rule's classes a key of a validated config is in ("unclassified": dropped silently)."""
    if key in validation.errors:
        return "refused"
    if key in validation.notes:
        mapped = all(note.startswith("mapped: ") for note in validation.notes[key])
        return "mapped" if mapped else "ignored"
    if key in MAPPED and plugin.key(MAPPED[key]) is not None:
        return "mapped"
    if key in ("transforms", "predicates") or key.startswith(("transforms.", "predicates.")):
        return "honoured"  # (each checked by its transformation's keys: connectors.smt)
    if plugin.key(key) is not None or any(key.startswith(family.prefix) for family in plugin.prefix_keys):
        return "honoured"
    if plugin.namespace_of(key) is None:
        return "passed"
    return "unclassified"


def test_every_corpus_file_has_its_expectations() -> None:
    assert sorted(p.name for p in CORPUS.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_key_of_a_real_config_is_classified(name: str) -> None:
    config = load(CORPUS / name)
    expected = EXPECTED[name]
    validation = validate_config(config)
    plugin = validation.plugin
    assert plugin is not None, validation.errors

    classes = {key: classify(plugin, validation, key) for key in validation.config}
    assert [k for k, c in classes.items() if c == "unclassified"] == []
    # Every refusal is expected, and says why.
    assert set(validation.errors) == set(expected.refused), validation.errors
    for key, reason in expected.refused.items():
        assert any(reason in message for message in validation.errors[key]), (key, validation.errors[key])
    assert {k for k, c in classes.items() if c == "ignored"} == expected.ignored
    for key in expected.ignored:
        notes = validation.notes[key]
        assert notes and all(n.startswith("ignored: ") and len(n) > len("ignored: ") + 10 for n in notes), key
    for key in (k for k, c in classes.items() if c == "mapped" and k in validation.notes):
        target = next(m.target for m in plugin.mapped_keys if m.name == key)
        assert validation.notes[key] == [f"mapped: {target}={plugin.with_mapped_keys(validation.config)[target]}"], key
    assert {k for k, c in classes.items() if c == "passed"} == expected.passed
    # Refused and ignored keys are keys of the config; a refusal of a missing key names what is missing.
    assert set(validation.errors) - set(config) <= {k for k, r in expected.refused.items() if "Missing" in r}
    assert validation.ok == (not expected.refused)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_validate_api_reports_each_note_and_error_beside_its_key(name: str) -> None:
    validation = validate_config(load(CORPUS / name))
    body = validation_result(validation)
    entries = {entry["value"]["name"]: entry["value"] for entry in body["configs"]}
    assert body["error_count"] == validation.error_count
    for key, notes in validation.notes.items():
        assert entries[key]["notes"] == notes and entries[key]["errors"] == []
    for key, errors in validation.errors.items():
        assert entries[key]["errors"] == errors


@pytest.mark.parametrize(
    ("name", "typo"),
    [
        ("iceberg-single-table.json", "iceberg.tables.auto-create-enabeld"),
        ("iceberg-single-table.json", "iceberg.control.commit.interval.ms"),
        ("hudi-demo-config-sink.json", "hoodie.datasource.write.recordkey.feild"),
        ("s3-quickstart-s3.properties", "s3.bucket.nmae"),
        ("hdfs-quickstart-hdfs.properties", "hdfs.ulr"),
    ],
)
def test_an_unknown_key_in_an_owned_namespace_is_refused_as_a_typo(name: str, typo: str) -> None:
    errors = validate_config({**load(CORPUS / name), typo: "true"}).errors
    assert "a typo would be a lost setting" in errors[typo][0]


def test_the_hdfs_sinks_default_format_is_theirs_and_the_s3_sink_has_none() -> None:
    hdfs = load(CORPUS / "hdfs-quickstart-hdfs.properties")
    assert "format.class" not in hdfs and SinkConfig.parse(hdfs).settings.format == "avro"
    s3 = {k: v for k, v in load(CORPUS / "s3-quickstart-s3.properties").items() if k != "format.class"}
    assert "Missing required configuration" in validate_config(s3).errors["format.class"][0]


def test_a_default_partition_spec_shapes_each_table_without_its_own() -> None:
    config = {
        **load(CORPUS / "iceberg-static-routing.json"),
        "iceberg.tables.default-partition-by": "hours(ts)",
        "iceberg.table.default.events_create.partition-by": "days(ts)",
    }
    tables = {t.name: [str(f) for f in t.partition_by] for t in SinkConfig.parse(config).settings.tables}
    assert tables == {"default.events_list": ["hour(ts)"], "default.events_create": ["day(ts)"]}
    bad = validate_config({**config, "iceberg.tables.default-partition-by": "weeks(ts)"}).errors
    assert "unknown partition transform" in bad["iceberg.tables.default-partition-by"][0]


@pytest.mark.parametrize("key", ["iceberg.tables.default-commit-branch", "iceberg.table.default.events.commit-branch"])
def test_commits_go_to_main_so_another_branch_is_refused(key: str) -> None:
    config = load(CORPUS / "iceberg-single-table.json")
    main = validate_config({**config, key: "main"})
    assert main.ok and main.notes[key] == ["ignored: commits go to each table's main branch"]
    assert "readers of main would see these records" in validate_config({**config, key: "audit"}).errors[key][0]


def test_a_refused_key_with_a_value_that_means_what_the_sink_does_is_ignored_with_a_note() -> None:
    config = load(CORPUS / "hdfs-quickstart-hdfs.properties")
    assert validate_config({**config, "hive.integration": "true"}).errors["hive.integration"]
    off = validate_config({**config, "hive.integration": "false", "hive.metastore.uris": "thrift://hive:9083"})
    assert off.ok and set(off.notes) == {"hive.integration", "hive.metastore.uris"}
