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
from typing import NamedTuple

import pyarrow as pa
import pyarrow.dataset as ds
from confluent_kafka import Producer

from connectors.config.kafka_clients import admin_client, producer_config
from connectors.smt.chain import failed_transformation
from workers.kafka import ensure_topic
from workers.staging import STAGING_SCHEMA
from workers.transformed import KEY_NOT_JSON
from workers.writes import BadRecord

# Kafka Connect's default converter (the class named in the error context when the config names none).
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"

# The class Kafka Connect names for a record the sink task refused (``WorkerErrantRecordReporter``).
SINK_TASK = "org.apache.kafka.connect.sink.SinkTask"

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


class ErrorContext(NamedTuple):
    """What Kafka Connect's error context says of a bad record: the stage that failed
    (``__connect.errors.stage``), the class of the component that failed (``__connect.errors.class.name``)
    and the exception's class (``__connect.errors.exception.class.name``)."""

    stage: str
    class_name: str
    exception_class: str


def error_context(config: Mapping[str, str], record: BadRecord) -> ErrorContext:
    """The error context of ``record``, for the dead-letter topic's headers and the dead-letter table alike.

    A sink's refusal of a record it decoded names its stage (TASK_PUT: ``SinkTask``, as Kafka Connect's
    errant record reporter names it). The reason of
    any other bad record tells what failed: a transformation's starts with its step's alias and class
    (``connectors.smt.chain.failure_prefix``: TRANSFORMATION, the transformation's configured class); the
    key converter's with ``KEY_NOT_JSON`` (KEY_CONVERTER, the key converter's class); the rest are the value
    converter's (VALUE_CONVERTER, its class: not JSON, a field that does not fit its column, an envelope
    without its payload, Avro that does not decode).
    """
    if record.stage is None and (transformation := failed_transformation(config, record.reason)) is not None:
        return ErrorContext("TRANSFORMATION", transformation, record.exception_class)
    stage = record.stage or ("KEY_CONVERTER" if record.reason.startswith(KEY_NOT_JSON) else "VALUE_CONVERTER")
    converter = {"KEY_CONVERTER": "key.converter", "VALUE_CONVERTER": "value.converter"}.get(stage)
    class_name = (config.get(converter) or JSON_CONVERTER) if converter else SINK_TASK
    return ErrorContext(stage, class_name, record.exception_class)


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
        contexts = [error_context(config, r) for r in records]
        context = {
            "error_stage": [c.stage for c in contexts],
            "error_class_name": [c.class_name for c in contexts],
            "error_exception_class_name": [c.exception_class for c in contexts],
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
