"""Dead letters: records that cannot be converted, as they were consumed, with why (I8).

``dead_letter_rows`` reads them back from the commit's staging files with
their error context, named as Kafka Connect's ``__connect.errors.*`` headers
name it. Two destinations take them: the dead-letter topic
(``errors.deadletterqueue.topic.name``, ``DeadLetterSink`` below), and a
sink's own dead-letter table where it has one (the Iceberg sink's
``errors.deadletterqueue.table.name``), written in the same commit as the
good records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from confluent_kafka import Producer

from connectors.config.kafka_clients import admin_client, producer_config
from workers.kafka import ensure_topic
from workers.staging import STAGING_SCHEMA
from workers.writes import BadRecord

# Kafka Connect's default value converter (the class named in the error context when the config names none).
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"

# The record as consumed (the staging columns but the staging's own error),
# then the error context: its stage, the class of the component that
# failed, and the exception's class and message.
DEAD_LETTER_SCHEMA = pa.schema(
    [
        *(f for f in STAGING_SCHEMA if f.name != "error"),
        ("error_stage", pa.string()),
        ("error_class_name", pa.string()),
        ("error_exception_class_name", pa.string()),
        ("error_exception_message", pa.string()),
    ]
)


def failing_class(config: Mapping[str, str], record: BadRecord) -> str:
    """The class of the component that failed on ``record`` (``__connect.errors.class.name``)."""
    if record.stage == "VALUE_CONVERTER":
        return config.get("value.converter") or JSON_CONVERTER
    return config.get("connector.class", "")


def dead_letter_rows(
    bad: Iterable[BadRecord], staged_files: Mapping[tuple[str, int], Path], config: Mapping[str, str]
) -> list[tuple[tuple[str, int], pa.Table]]:
    """Per source partition, its bad records read back from its staging file (in DEAD_LETTER_SCHEMA,
    in offset order): key, value, headers and timestamp as consumed, and the error context."""
    wanted: dict[tuple[str, int], dict[int, BadRecord]] = {}
    for record in bad:
        wanted.setdefault((record.topic, record.partition), {})[record.offset] = record
    tables = []
    for source, by_offset in sorted(wanted.items()):
        dataset = ds.dataset(str(staged_files[source]), format="parquet")
        rows = dataset.to_table(filter=ds.field("offset").isin(list(by_offset))).sort_by("offset")
        records = [by_offset[offset] for offset in rows.column("offset").to_pylist()]
        context = {
            "error_stage": [r.stage for r in records],
            "error_class_name": [failing_class(config, r) for r in records],
            "error_exception_class_name": [r.exception_class for r in records],
            "error_exception_message": [r.reason for r in records],
        }
        columns = [
            rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.array(context[f.name], f.type)
            for f in DEAD_LETTER_SCHEMA
        ]
        tables.append((source, pa.Table.from_arrays(columns, schema=DEAD_LETTER_SCHEMA)))
    return tables


class DeadLetterSink:
    """The dead-letter topic: the original records (key, value, headers, timestamp), with Kafka Connect's
    ``__connect.errors.*`` headers when context headers are enabled."""

    def __init__(
        self,
        bootstrap: str,
        config: dict[str, str],
        topic: str,
        connector: str,
        task_index: int,
        replication_factor: int,
        context_headers: bool,
    ) -> None:
        self.topic = topic
        self.connector = connector
        self.task_index = task_index
        self.context_headers = context_headers
        self.config = config
        ensure_topic(admin_client(bootstrap, config), topic, partitions=1, replication_factor=replication_factor)
        self._producer = Producer(producer_config(bootstrap, config))

    def send(self, bad: Iterable[BadRecord], staged_files: dict[tuple[str, int], Path]) -> int:
        """Produce the original records and wait until the broker has them."""
        sent = 0
        for _, rows in dead_letter_rows(bad, staged_files, self.config):
            for row in rows.to_pylist():
                headers = [(h["key"], h["value"]) for h in row["headers"] or []]
                if self.context_headers:
                    headers += self._error_headers(row)
                self._producer.produce(
                    self.topic, key=row["key"], value=row["value"], headers=headers, timestamp=row["timestamp"] or 0
                )
                self._producer.poll(0)
                sent += 1
        remaining = self._producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} dead-letter records were not acknowledged by the broker")
        return sent

    def _error_headers(self, row: dict[str, object]) -> list[tuple[str, bytes]]:
        return [
            ("__connect.errors.topic", str(row["topic"]).encode()),
            ("__connect.errors.partition", str(row["partition"]).encode()),
            ("__connect.errors.offset", str(row["offset"]).encode()),
            ("__connect.errors.connector.name", self.connector.encode()),
            ("__connect.errors.task.id", str(self.task_index).encode()),
            ("__connect.errors.stage", str(row["error_stage"]).encode()),
            ("__connect.errors.class.name", str(row["error_class_name"]).encode()),
            ("__connect.errors.exception.class.name", str(row["error_exception_class_name"]).encode()),
            ("__connect.errors.exception.message", str(row["error_exception_message"]).encode()),
        ]

    def close(self) -> None:
        self._producer.flush(10)
