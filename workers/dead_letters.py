"""Dead letters: records that cannot be converted, as they were consumed, with why (I8).

``dead_letter_rows`` reads them back from the commit's staging files with
their error context, named as Kafka Connect's ``__connect.errors.*`` headers
name it. Two destinations take them: the dead-letter topic
(``errors.deadletterqueue.topic.name``, ``DeadLetterSink`` below), and a
sink's own dead-letter table where it has one (the Iceberg sink's
``errors.deadletterqueue.table.name``), written in the same commit as the
good records. Both run in the task's process, the one that staged them.

A dead letter is the record as consumed, as Kafka Connect sends the original
``ConsumerRecord``: users replay it into its topic. The tasks stage records
after the value converter decoded them (Avro, a Schema Registry's wire
format: JSON) and the transforms ran; a record the sink then refuses is
staged in that changed form, so its original is read again from the source
topic by offset (``StagedForm`` decides which, ``KafkaOriginals`` reads them).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pyarrow as pa
import pyarrow.dataset as ds
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from connectors.config import SinkConfig
from connectors.config.kafka_clients import admin_client, producer_config, source_consumer_config
from connectors.smt.chain import failed_transformation
from workers.kafka import OUT_OF_RANGE_ERRORS, ensure_topic
from workers.staging import STAGING_SCHEMA, staged_headers
from workers.transformed import KEY_NOT_JSON
from workers.writes import BadRecord

log = logging.getLogger(__name__)

TP = tuple[str, int]

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
    bad: Iterable[BadRecord],
    staged_files: Mapping[TP, Path],
    config: Mapping[str, str],
    originals: OriginalRecords,
) -> list[tuple[TP, pa.Table]]:
    """Per source partition, its bad records as consumed (in DEAD_LETTER_SCHEMA, in offset order): key, value,
    headers and timestamp, and the error context. Each is read back from its partition's staging file, or, if it
    was staged in a changed form (``StagedForm``), read again from its topic with ``originals``; one that cannot
    be read again goes as staged, not lost, with a warning naming it."""
    wanted: dict[TP, dict[int, BadRecord]] = {}
    for record in bad:
        wanted.setdefault((record.topic, record.partition), {})[record.offset] = record
    form = StagedForm.of(config)
    staged: dict[TP, list[dict[str, Any]]] = {}
    refetch: dict[TP, list[int]] = {}
    for source, by_offset in sorted(wanted.items()):
        dataset = ds.dataset(str(staged_files[source]), format="parquet")
        rows = dataset.to_table(filter=ds.field("offset").isin(list(by_offset))).sort_by("offset").to_pylist()
        staged[source] = rows
        changed = [r["offset"] for r in rows if not form.is_original(by_offset[r["offset"]], r["error"])]
        if changed:
            refetch[source] = changed
    fetched = originals.fetch(refetch) if refetch else {}
    tables = []
    for source, rows in staged.items():
        found = fetched.get(source, {})
        missing = [o for o in refetch.get(source, []) if o not in found]
        if missing:
            log.warning(
                "dead letters of %s/%d at offsets %s could not be read again from their topic: they go as the "
                "tasks staged them (after the converter and the transforms), not as consumed",
                source[0],
                source[1],
                ", ".join(map(str, missing)),
            )
        letters = []
        for row in rows:
            record = wanted[source][row["offset"]]
            original = found.get(row["offset"])
            context = error_context(config, record)
            letters.append(
                {
                    **row,
                    **(original._asdict() if original is not None else {}),
                    "error_stage": context.stage,
                    "error_class_name": context.class_name,
                    "error_exception_class_name": context.exception_class,
                    "error_exception_message": record.reason,
                }
            )
        tables.append((source, pa.Table.from_pylist(letters, schema=DEAD_LETTER_SCHEMA)))
    return tables


@dataclass(frozen=True)
class StagedForm:
    """What the tasks' staging changes of a connector's records: the one place that decides which dead letters
    are read from staging and which are read again from the source topic, as consumed.

    A task converts each value (Avro to JSON), then runs the transforms, then stages what comes out
    (``workers.participant.TaskRunner._chunk_of``, ``workers.transformed``). A record that a step could not
    handle is staged as it came to that step, with its error; one that came through is staged changed.
    """

    config: Mapping[str, str]
    decoded: bool
    transformed: bool
    headers: bool = True

    @classmethod
    def of(cls, config: Mapping[str, str]) -> StagedForm:
        """``config``: the connector's, as its tasks were given it (not a sink's ``SinkConfig.sink_view``, which
        says JSON of values the tasks decoded)."""
        typed = SinkConfig.parse(config)
        return cls(config, typed.decodes_values, typed.staged_transforms is not None, typed.stages_headers)

    @property
    def as_consumed(self) -> bool:
        """Every record is staged as consumed (no transforms; a JSON, string or bytes value converter, which
        does not decode while staging; headers staged): no dead letter is read again."""
        return not (self.decoded or self.transformed) and self.headers

    def is_original(self, record: BadRecord, staged_error: str | None) -> bool:
        """Whether the staged row of ``record`` (``staged_error``: its staging's error column) is the record as
        consumed.

        A row staged without an error came through the converter and the transforms: the sink refused it
        (TASK_PUT) or its decoder did (a field that does not fit its column). A row staged with its error is as
        it came to the step that failed: as consumed, unless that step was a transformation (or the key's
        conversion for one) of a value the converter had decoded before it.
        """
        if self.as_consumed:
            return True
        if staged_error is None or not self.headers:
            return False
        return not self.decoded or error_context(self.config, record).stage == "VALUE_CONVERTER"


class ConsumedRecord(NamedTuple):
    """A record as its topic holds it, in the staging's types: what a dead letter carries."""

    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: list[dict[str, Any]] | None


class OriginalRecords(Protocol):
    def fetch(self, wanted: Mapping[TP, Collection[int]]) -> dict[TP, dict[int, ConsumedRecord]]:
        """The records at ``wanted`` offsets of each partition that could be read, by partition and offset."""
        ...


class KafkaOriginals:
    """Records read again from the source topics by offset, as the tasks consume them: the connector's client
    and security settings and its consumers' isolation level (``source_consumer_config``). A consumer of its
    own, in no group, that commits nothing, reads each run of wanted offsets of a partition in turn
    (``offset_runs``): from its first, up to its last or the partition's end, so that a commit's bad records
    at both ends of a large staged range cost two short reads, not the range, and a wanted offset the log no
    longer holds costs no wait.

    The records were consumed moments ago, in the same commit, so they are read at once. One that cannot be
    (the topic's retention deleted it, the broker does not answer within ``timeout_s``) is left out, and its
    dead letter goes as staged (``dead_letter_rows``). The dead-letter topic's records are sent on the task's
    loop, which beats no heartbeat meanwhile, so the wait is kept well under a commit's and a heartbeat's
    timeouts (30 s by default).
    """

    # The consumer's group id: only a label (librdkafka requires one); it never joins nor commits.
    LABEL = "sinkadmin-dead-letters"
    # How many records one consume call returns at most.
    BATCH = 500
    # Wanted offsets of a partition at most this far apart are read in one pass; farther ones after a seek.
    RUN_GAP = 1000

    def __init__(self, bootstrap: str, config: Mapping[str, str], timeout_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.config = dict(config)
        self.timeout_s = timeout_s

    def fetch(self, wanted: Mapping[TP, Collection[int]]) -> dict[TP, dict[int, ConsumedRecord]]:
        found: dict[TP, dict[int, ConsumedRecord]] = {tp: {} for tp in wanted}
        runs = [(tp, run) for tp, offsets in sorted(wanted.items()) for run in offset_runs(offsets, self.RUN_GAP)]
        if not runs:
            return found
        try:
            consumer = Consumer(
                {
                    **source_consumer_config(self.bootstrap, self.config, self.LABEL),
                    # A run's first offset that retention has deleted since: the rest from the partition's start.
                    "auto.offset.reset": "earliest",
                    "enable.partition.eof": True,
                }
            )
        except KafkaException as exc:
            log.warning("dead letters: no consumer to read their originals again: %s", exc)
            return found
        deadline = time.monotonic() + self.timeout_s
        try:
            for tp, run in runs:
                if not self._read_run(consumer, tp, run, found[tp], deadline):
                    log.warning(
                        "dead letters: the source topic did not return %s/%d within %.0f s", *tp, self.timeout_s
                    )
                    break
        except KafkaException as exc:
            log.warning("dead letters: reading their originals again failed: %s", exc)
        finally:
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.close()
        return found

    def _read_run(
        self, consumer: Consumer, tp: TP, run: list[int], into: dict[int, ConsumedRecord], deadline: float
    ) -> bool:
        """The records at ``run``'s offsets of ``tp`` that the log holds, into ``into``; False when time ran out."""
        consumer.assign([TopicPartition(tp[0], tp[1], run[0])])
        pending = set(run)
        while (left := deadline - time.monotonic()) > 0:
            for message in consumer.consume(self.BATCH, timeout=min(left, 1.0)):
                if (message.topic(), message.partition()) != tp:
                    continue  # (fetched for an earlier run's partition)
                error = message.error()
                if error is None:
                    offset = message.offset() or 0  # (a consumed record has one)
                    if offset in pending:
                        into[offset] = _consumed(message)
                        pending.discard(offset)
                    if not pending or offset >= run[-1]:
                        return True
                elif error.code() == KafkaError._PARTITION_EOF or error.code() in OUT_OF_RANGE_ERRORS:
                    return True
                else:
                    log.warning("dead letters: reading %s/%d again: %s", tp[0], tp[1], error.str())
        return False


def offset_runs(offsets: Collection[int], gap: int) -> list[list[int]]:
    """``offsets`` sorted, in runs whose neighbours are at most ``gap`` apart."""
    runs: list[list[int]] = []
    for offset in sorted(set(offsets)):
        if runs and offset - runs[-1][-1] <= gap:
            runs[-1].append(offset)
        else:
            runs.append([offset])
    return runs


def source_cluster_originals(config: Mapping[str, str]) -> KafkaOriginals:
    """The originals of a connector's records, on the cluster its topics are read from (``KAFKA_BOOTSTRAP_SERVERS``)."""
    from django.conf import settings

    return KafkaOriginals(settings.KAFKA_BOOTSTRAP_SERVERS, config)


def _consumed(message: Message) -> ConsumedRecord:
    """A fetched record in the staging's types (as ``TaskRunner._chunk_of`` stages it)."""
    stamp = message.timestamp()[1]
    pairs = staged_headers(message.headers())
    return ConsumedRecord(
        stamp if stamp >= 0 else None,
        message.key(),
        message.value(),
        [{"key": k, "value": v} for k, v in pairs] if pairs else None,
    )


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
        # (``bootstrap`` is the cluster the connector's topics are read from, its dead-letter topic's too.)
        self.originals: OriginalRecords = KafkaOriginals(bootstrap, config)
        ensure_topic(admin_client(bootstrap, config), topic, partitions=1, replication_factor=replication_factor)
        self._producer = Producer(producer_config(bootstrap, config))

    def send(self, bad: Iterable[BadRecord], staged_files: dict[TP, Path]) -> int:
        """Produce the original records and wait until the broker has them."""
        sent = 0
        for _, rows in dead_letter_rows(bad, staged_files, self.config, self.originals):
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
            # (Kafka Connect's is the Java exception's stack trace, whose first line is this: there is no other
            # frame to show, the record was judged by the converter, a transformation or the sink's decoder.)
            (
                "__connect.errors.exception.stacktrace",
                f"{row['error_exception_class_name']}: {row['error_exception_message']}".encode(),
            ),
        ]

    def close(self) -> None:
        self._producer.flush(10)
