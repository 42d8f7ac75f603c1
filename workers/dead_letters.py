"""The dead-letter topic: records that cannot be converted, with Kafka Connect's error headers (I8)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow.dataset as ds
from confluent_kafka import Producer

from connectors.config.kafka_clients import admin_client, producer_config
from workers.kafka import ensure_topic
from workers.writes import BadRecord

ERROR_CLASS = "org.apache.kafka.connect.errors.DataException"


class DeadLetterSink:
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
        ensure_topic(admin_client(bootstrap, config), topic, partitions=1, replication_factor=replication_factor)
        self._producer = Producer(producer_config(bootstrap, config))

    def send(self, bad: Iterable[BadRecord], staged_files: dict[tuple[str, int], Path]) -> int:
        """Produce the original records (key, value, headers) and wait until the broker has them."""
        wanted: dict[tuple[str, int], dict[int, BadRecord]] = {}
        for record in bad:
            wanted.setdefault((record.topic, record.partition), {})[record.offset] = record
        sent = 0
        for key, by_offset in wanted.items():
            dataset = ds.dataset(str(staged_files[key]), format="parquet")
            table = dataset.to_table(filter=ds.field("offset").isin(list(by_offset)))
            for row in table.to_pylist():
                record = by_offset[row["offset"]]
                headers = [(h["key"], h["value"]) for h in row["headers"] or []]
                if self.context_headers:
                    headers += self._error_headers(record)
                self._producer.produce(
                    self.topic, key=row["key"], value=row["value"], headers=headers, timestamp=row["timestamp"] or 0
                )
                self._producer.poll(0)
                sent += 1
        remaining = self._producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} dead-letter records were not acknowledged by the broker")
        return sent

    def _error_headers(self, record: BadRecord) -> list[tuple[str, bytes]]:
        return [
            ("__connect.errors.topic", record.topic.encode()),
            ("__connect.errors.partition", str(record.partition).encode()),
            ("__connect.errors.offset", str(record.offset).encode()),
            ("__connect.errors.connector.name", self.connector.encode()),
            ("__connect.errors.task.id", str(self.task_index).encode()),
            ("__connect.errors.stage", b"VALUE_CONVERTER"),
            ("__connect.errors.class.name", b"sinkadmin.workers.spark_writer.SparkWriter"),
            ("__connect.errors.exception.class.name", ERROR_CLASS.encode()),
            ("__connect.errors.exception.message", record.reason.encode()),
        ]

    def close(self) -> None:
        self._producer.flush(10)
