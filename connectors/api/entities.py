"""The JSON bodies of the Connect API (Connect's ``rest/entities``), built from our models.

Every config that leaves the service goes through ``shown_config`` so secret
values are never returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from connectors.api.status import visible_tasks
from connectors.config import ConfigValidation, Plugin
from connectors.config.definitions import CONVERTERS
from connectors.config.secrets import hidden_config, hidden_value
from connectors.config.validation import config_notes
from connectors.models import Commit, Connector, MaintenanceRun

CONNECTOR_TYPE = "sink"

# KIP-875's offset keys for sink connectors.
KAFKA_TOPIC = "kafka_topic"
KAFKA_PARTITION = "kafka_partition"
KAFKA_OFFSET = "kafka_offset"


def shown_config(connector: Connector) -> dict[str, str]:
    """The config as Connect returns it: with its ``name`` key, secrets hidden."""
    return hidden_config({**connector.config, "name": connector.name})


def connector_info(connector: Connector) -> dict[str, Any]:
    return {
        "name": connector.name,
        "config": shown_config(connector),
        "tasks": [{"connector": connector.name, "task": task.task_index} for task in visible_tasks(connector)],
        "type": CONNECTOR_TYPE,
        # (Beyond Connect's ConnectorInfo: the keys of the stored config that are accepted and ignored, and why,
        # as validate reports them beside each key; GET /connectors/{name}/config stays a plain map.)
        "notes": config_notes(connector.config),
    }


def task_infos(connector: Connector) -> list[dict[str, Any]]:
    # Every task runs the connector's config; which partitions it hosts is
    # the supervisor's assignment, shown in the task status and the UI.
    config = shown_config(connector)
    return [
        {"id": {"connector": connector.name, "task": task.task_index}, "config": config}
        for task in visible_tasks(connector)
    ]


def connector_offsets(offsets: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    return {
        "offsets": [
            {"partition": {KAFKA_TOPIC: topic, KAFKA_PARTITION: partition}, "offset": {KAFKA_OFFSET: offset}}
            for (topic, partition), offset in offsets.items()
        ]
    }


def plugin_infos(plugins: Iterable[Plugin], *, connectors_only: bool) -> list[dict[str, Any]]:
    infos: list[dict[str, Any]] = [
        {"class": plugin.class_name, "type": CONNECTOR_TYPE, "version": plugin.version} for plugin in plugins
    ]
    if not connectors_only:
        # The Kafka Connect converter classes a config may name; short
        # aliases (json, avro...) are ours and are not plugins to Connect.
        version = infos[0]["version"] if infos else None
        infos += [
            {"class": name, "type": "converter", "version": version} for name in sorted(CONVERTERS) if "." in name
        ]
    return infos


def config_key_infos(plugin: Plugin) -> list[dict[str, Any]]:
    """GET /connector-plugins/{plugin}/config: the definitions validate reports, without values."""
    return [entry["definition"] for entry in ConfigValidation(plugin=plugin, config={}).to_connect()["configs"]]


def validation_result(validation: ConfigValidation) -> dict[str, Any]:
    """Connect's ConfigInfos, with every secret value hidden (not only PASSWORD-typed keys)."""
    body = validation.to_connect()
    for entry in body["configs"]:
        value = entry["value"]
        value["value"] = hidden_value(value["name"], value["value"])
    return body


def commit_summary(commit: Commit) -> dict[str, Any]:
    return {
        "commit_id": str(commit.commit_id),
        "connector": commit.connector_name,
        "state": commit.state,
        "epoch": commit.epoch,
        "started_at": commit.started_at,
        "prepared_at": commit.prepared_at,
        "committed_at": commit.committed_at,
        "records": commit.records,
        "bytes": commit.bytes,
        "files_count": commit.files_count,
        "dead_lettered": commit.dead_lettered,
        "skipped": commit.skipped,
        "watermark": commit.watermark,
        "complete": commit.complete,
        "ended_by": commit.ended_by,
        "error": commit.error,
        "offsets": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "start_offset": p.start_offset,
                "end_offset": p.end_offset,
                "records": p.records,
                "dead_lettered": p.dead_lettered,
                "skipped": p.skipped,
            }
            for p in commit.partitions.all()
        ],
    }


def commit_detail(commit: Commit) -> dict[str, Any]:
    return {
        **commit_summary(commit),
        "files": list(commit.files),
        "snapshot_ids": {table: int(snapshot) for table, snapshot in commit.snapshot_ids.items()},
    }


def maintenance_run(run: MaintenanceRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "connector": run.connector_name,
        "table": run.table_name,
        "epoch": run.epoch,
        "outcome": run.outcome,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "rewritten_files": run.rewritten_files,
        "rewritten_bytes": run.rewritten_bytes,
        "added_files": run.added_files,
        "added_bytes": run.added_bytes,
        "replace_snapshot_id": run.replace_snapshot_id,
        "rewritten_manifests": run.rewritten_manifests,
        "added_manifests": run.added_manifests,
        "expired_snapshots": run.expired_snapshots,
        "expired_files": run.expired_files,
        "orphan_files": run.orphan_files,
        "removed_bytes": run.removed_bytes,
        "error": run.error,
    }
