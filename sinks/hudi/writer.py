"""The Hudi sink's data plane, participants' side: a commit's staged records become the rows Hudi writes.

One function decodes one staged partition (``HudiJob.decode``): Spark's
Python workers run it (the spark data plane, one Spark job per task and
commit) or the participant does (arrow). Records are decoded with the same
JSON decoder as the other sinks (``workers.record_runs``), so the same
records are bad on every sink and plane. A record without its record key
field (or, for upserts, its precombine field) is a bad record, handled by
``errors.tolerance``, before the commit is prepared (I9). A record that
deletes its key (a delete marker, ``_hoodie_is_deleted``, or a tombstone:
a null value, keyed by its Kafka key) gets ``_hoodie_is_deleted=true``, the
column Hudi's writer deletes by.

The rows are written to one Parquet file under the table's
``.sinkadmin/incoming/<commit>/`` (readers never look there), with their
place in the stream (``SEQUENCE``); the coordinator has Hudi's own Spark
writer write them, under one instant (``sinks.hudi.commit``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connectors.config import SinkConfig
from connectors.smt.kafka import to_text
from sinks.hudi.settings import HudiSettings
from sinks.hudi.table_config import conflicts_message, table_conflicts
from workers.events import DataFile
from workers.failpoints import failpoint
from workers.record_runs import RecordRuns
from workers.schemas import connect_decimals
from workers.spark_writer import read_staged_chunks
from workers.staging import StagedPartition
from workers.storage import StoragePath
from workers.writes import (
    TASK_PUT,
    BadRecord,
    RawStagedWriter,
    WriteRefused,
    WriteResult,
    bad_outcome,
    bad_records,
    sample_values,
    with_envelope_hint,
)

CHUNK_BYTES = 1 << 20
# Hudi's own delete flag: a record with it set to true deletes its key.
IS_DELETED = "_hoodie_is_deleted"
# The record's place in the commit's stream (its offset): of a key's records, the later wins a tie.
SEQUENCE = "_sinkadmin_sequence"


# Under the base path, beside the table's files, hidden: no reader lists it (a partition has
# .hoodie_partition_metadata), and it is there before the table is (under .hoodie it would make Hudi's
# writer take a first commit's directory for a table without hoodie.properties).
INCOMING = ".sinkadmin/incoming"


def incoming_root(settings: HudiSettings, commit_id: uuid.UUID | str) -> StoragePath:
    """Where the participants leave a commit's rows for the coordinator's Hudi write: on the table's
    storage, which every worker and executor sees, until the commit is applied (I9)."""
    return settings.base.child(INCOMING, str(commit_id))


class PartitionRows(RecordRuns):
    """One staged partition's records as rows for the table: data columns, then the keying columns."""

    # Connect's Date, Time and Timestamp in a schema envelope stay the int and longs JsonConverter writes, as tables
    # this sink created before had them: Hudi's writer takes a long column becoming a timestamp, and would then read
    # the old rows' milliseconds as microseconds (docs/operations.md, "Upgrades").
    CONNECT_TIMES = False

    def __init__(
        self, config: SinkConfig, settings: HudiSettings, topic: str, partition: int, value_schemas: Sequence[str]
    ) -> None:
        super().__init__(config, value_schemas, ignore_nulls=True)
        self.settings = settings
        self.topic = topic
        self.partition = partition
        self.pieces: list[pa.Table] = []
        # The tombstones (their offsets and key field values), made rows typed as the records' keys at the end.
        self.tombstones: list[tuple[int, list[Any]]] = []
        self.bad: list[BadRecord] = []
        self.skipped = 0

    def write(
        self,
        offsets: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        errors: Sequence[str | None],
    ) -> None:
        if self.schema is None:
            self.settle(sample_values(values, errors))
        tombstones = [i for i, v in enumerate(values) if v is None and errors[i] is None]
        if tombstones and self.settings.operation in ("upsert", "delete"):
            self._tombstones([offsets[i] for i in tombstones], [keys[i] for i in tombstones])
        done = 0
        while done < len(values):
            decoded, count = self.decode(values[done:], errors[done:])
            run = offsets[done : done + count]
            if not self.settings.upsert:
                self.skipped += decoded.skipped
            refused: list[tuple[int, str]] = []
            rows = self._keyed(decoded.columns, [run[p] for p in decoded.positions], refused, decoded.positions)
            with_envelope_hint(self.config, refused, values[done:])
            self.bad.extend(bad_records(self.topic, self.partition, run, decoded.bad, refused))
            if rows is not None and len(rows):
                self.pieces.append(rows)
            done += count

    def _keyed(
        self, rows: pa.Table, offsets: list[int], bad: list[tuple[int, str]], positions: list[int]
    ) -> pa.Table | None:
        """The decoded records with their delete flag and place in the stream; records that cannot be
        keyed go to ``bad`` (the sink's refusals)."""
        s = self.settings
        n = len(rows)
        if n == 0:
            return None
        refused: dict[int, str] = {}
        # (A null partition field is Hudi's to place: its default partition.)
        for name in s.record_key_fields:
            for j in self._missing(rows, name):
                refused.setdefault(j, f"record key field {name!r} is missing or null")
        if s.upsert and s.precombine_field:
            for j in self._missing(rows, s.precombine_field):
                refused.setdefault(j, f"precombine field {s.precombine_field!r} is missing or null")
        if refused:
            bad.extend((positions[j], why) for j, why in refused.items())
            keep = pa.array([j for j in range(n) if j not in refused], pa.int64())
            rows = rows.take(keep)
            offsets = [offsets[j] for j in keep.to_pylist()]
            n = len(rows)
            if n == 0:
                return None
        deleting = np.zeros(n, dtype=bool)
        if s.operation == "delete":
            deleting[:] = True
        elif s.upsert:
            marker_field = _nested_field(rows, s.delete_field) if s.delete_field else None
            if marker_field is not None:
                marked = pc.equal(marker_field.cast(pa.string()), s.delete_marker or "")
                deleting |= np.asarray(marked.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
            if IS_DELETED in rows.column_names and pa.types.is_boolean(rows.schema.field(IS_DELETED).type):
                flagged = rows.column(IS_DELETED).fill_null(False)
                deleting |= np.asarray(flagged.to_numpy(zero_copy_only=False), dtype=bool)
        if IS_DELETED in rows.column_names:
            rows = rows.drop_columns([IS_DELETED])
        rows = rows.append_column(IS_DELETED, pa.array(deleting, pa.bool_()))
        return rows.append_column(SEQUENCE, pa.array(offsets, pa.int64()))

    def _tombstones(self, offsets: list[int], keys: list[bytes | None]) -> None:
        """Null values delete their Kafka key's row: a row of the key's fields, flagged deleted. A partitioned
        table cannot place them (they carry no partition values)."""
        s = self.settings
        found: list[tuple[int, list[Any]]] = []
        for offset, raw in zip(offsets, keys, strict=True):
            values, why = self._key_values(raw)
            if values is None:
                self.bad.append(BadRecord(self.topic, self.partition, offset, why, TASK_PUT))
            elif s.partition_fields:
                self.bad.append(
                    BadRecord(
                        self.topic,
                        self.partition,
                        offset,
                        "a tombstone carries no partition field values, so it cannot find its row in a partitioned "
                        "table: delete with hoodie.payload.delete.field or _hoodie_is_deleted instead",
                        TASK_PUT,
                    )
                )
            elif s.upsert and s.event_time_ordering:
                self.bad.append(
                    BadRecord(
                        self.topic,
                        self.partition,
                        offset,
                        "a tombstone has no precombine value, and Hudi's writer and readers cannot merge a delete "
                        "without one in event-time ordering: delete with hoodie.payload.delete.field or "
                        "_hoodie_is_deleted, or set hoodie.record.merge.mode=COMMIT_TIME_ORDERING",
                        TASK_PUT,
                    )
                )
            else:
                found.append((offset, values))
        if not found:
            return
        self.tombstones.extend(found)

    def _key_values(self, raw: bytes | None) -> tuple[list[Any] | None, str]:
        """The record key field values a Kafka key holds: the fields of a JSON object key (the ``payload`` of
        one in Kafka Connect's schema envelope, as its JsonConverter reads it), or for one key field the key
        itself (its text; a JSON scalar with key.converter=json); else None, and why."""
        fields = self.settings.record_key_fields
        if raw is None:
            return None, "a tombstone without a key deletes nothing"
        missing = f"a tombstone's key must hold the record key field(s) {', '.join(fields)}"
        converter = self.config.key_converter
        if raw[:1] == b"\x00" and len(raw) >= 5 and converter in ("json", "avro"):
            # A Schema Registry's wire format (a zero byte, the schema's id): JSON Schema's is JSON after it.
            if _key_converter_class(self.config.raw) not in JSON_SCHEMA_CONVERTERS:
                return None, (
                    f"a tombstone's key is in a Schema Registry's wire format (key.converter={converter}), which the "
                    "sink does not decode: key the topic with JSON or string keys, or delete with "
                    "hoodie.payload.delete.field"
                )
            raw = raw[5:]
        text = raw.decode("utf-8", "replace")
        if converter != "json" and not text.lstrip().startswith("{"):
            # (A key's text as it is, but a JSON object's fields: StringConverter's "1.50" is no number 1.5.)
            return ([text], "") if len(fields) == 1 else (None, missing)
        try:
            parsed = json.loads(text)
        except ValueError:
            return ([text], "") if len(fields) == 1 else (None, missing)
        if isinstance(parsed, dict) and parsed.keys() == {"schema", "payload"} and _key_schemas(self.config.raw):
            # (Connect's Decimals as their text, as the records' own key fields are read: connect_decimals.)
            try:
                parsed = connect_decimals(parsed["schema"], parsed["payload"])[0]
            except ValueError as exc:
                return None, f"a tombstone's key: {exc}"
        if isinstance(parsed, dict):
            if all(f in parsed and parsed[f] is not None for f in fields):
                return [parsed[f] for f in fields], ""
            return None, missing
        if len(fields) == 1 and isinstance(parsed, (str, int, float)) and not isinstance(parsed, bool):
            return [parsed], ""
        return None, missing

    def _typed_tombstones(self) -> list[pa.Table]:
        """The tombstones' rows with their key columns typed as the records' (a string key of a numeric record
        key field read as a number); a tombstone whose key is no value of that type is a bad record, with why.
        Hudi's record key is the key field's text, so a key must be the text of such a value exactly: ``01`` or
        ``1.0`` is no long, as the commit's ``typed_rows`` has it where Spark casts them."""
        if not self.tombstones:
            return []
        columns = {
            name: _key_column([values[i] for _, values in self.tombstones])
            for i, name in enumerate(self.settings.record_key_fields)
        }
        n = len(self.tombstones)
        columns[IS_DELETED] = pa.array([True] * n, pa.bool_())
        columns[SEQUENCE] = pa.array([offset for offset, _ in self.tombstones], pa.int64())
        rows = pa.table(columns)
        typed = {f.name: f.type for p in self.pieces for f in p.schema if f.name in self.settings.record_key_fields}
        fits = np.ones(n, dtype=bool)
        for name, wanted in typed.items():
            if rows.column(name).type == wanted:
                continue
            at = self.settings.record_key_fields.index(name)
            cast = []
            # (Each key as its tombstone had it: the column made of them may have widened it, 7 beside 7.0.)
            for j, (offset, values) in enumerate(self.tombstones):
                value = values[at]
                try:
                    found = pa.scalar(value).cast(wanted).as_py()
                    # (Java's toString of a key's value, as Spark casts it to text: a double's as Double.toString.)
                    if to_text(found) != to_text(value):
                        raise ValueError(f"{value!r} is not the text of {found!r}")
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
                    found = None
                    if fits[j]:
                        fits[j] = False
                        reason = f"a tombstone's key {name}={value!r} is no {wanted} value, as the records' {name} is"
                        self.bad.append(BadRecord(self.topic, self.partition, offset, reason, TASK_PUT))
                cast.append(found)
            rows = rows.set_column(rows.schema.get_field_index(name), name, pa.array(cast, wanted))
        rows = rows.filter(pa.array(fits))
        return [rows] if len(rows) else []

    @staticmethod
    def _missing(rows: pa.Table, name: str) -> list[int]:
        """The rows without a value of the field ``name``: nested with dots in structs, as Hudi reads a record key
        or precombine field (``_cdc.ts``, the Iceberg sink's DebeziumTransform's event time)."""
        column = _nested_field(rows, name)
        if column is None:
            return list(range(len(rows)))
        return np.nonzero(np.asarray(column.is_null().to_numpy(zero_copy_only=False)))[0].tolist()

    def finish(self, folder: StoragePath, name: str) -> DataFile | None:
        """Write the rows to the file ``name`` in ``folder``, in the stream's order; the write status of
        the file (its path as Spark reads it)."""
        pieces = self.pieces + self._typed_tombstones()
        if not pieces:
            return None
        rows = pa.concat_tables(pieces, promote_options="permissive").sort_by(SEQUENCE)
        fs, root = folder.filesystem()
        fs.create_dir(root, recursive=True)
        path = f"{root}/{name}"
        pq.write_table(rows, path, compression="lz4", filesystem=fs)
        return DataFile(
            table=f"{self.settings.database}.{self.settings.table_name}",
            path=folder.child(name).uri,
            topic=self.topic,
            partition=self.partition,
            records=len(rows),
            bytes=int(fs.get_file_info(path).size or 0),
        )


# Confluent's JSON Schema converter: JSON after the registry's header (workers.converters takes values so).
JSON_SCHEMA_CONVERTERS = ("json-schema", "io.confluent.connect.json.JsonSchemaConverter")


def _key_converter_class(raw: Mapping[str, str]) -> str:
    return (raw.get("key.converter") or "").strip()


def _key_schemas(raw: Mapping[str, str]) -> bool:
    """Whether JSON keys come in Kafka Connect's schema envelope (``key.converter.schemas.enable``, true by
    default, as Kafka Connect's JsonConverter has it)."""
    return (raw.get("key.converter.schemas.enable") or "true").strip().lower() != "false"


def _nested_field(rows: pa.Table, path: str) -> pa.Array | None:
    """The column at ``path``, nested with dots in structs (``_cdc.op``, the Iceberg sink's DebeziumTransform's
    operation); None when the rows have no such field."""
    head, *rest = path.split(".")
    if head not in rows.column_names:
        return None
    column = rows.column(head).combine_chunks()
    for part in rest:
        if not pa.types.is_struct(column.type) or column.type.get_field_index(part) < 0:
            return None
        column = pc.struct_field(column, part)
    return column


def _key_column(values: Sequence[Any]) -> pa.Array:
    """Tombstones' values of one record key field, typed as the JSON values they were (a number a number:
    as a partition of tombstones alone writes them, the records of its key elsewhere decoded from JSON); as
    text when they are of mixed kinds."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # (mixed, or an integer beyond 64 bits)
        return pa.array([str(v) for v in values], pa.string())


@dataclass(frozen=True)
class HudiJob:
    """A task's share of one commit for the Hudi sink (pickled to Spark's Python workers)."""

    config: SinkConfig
    commit_id: uuid.UUID
    staged: tuple[StagedPartition, ...] = ()
    value_schemas: tuple[str, ...] = ()

    def decode(self, staged: StagedPartition) -> dict[str, Any]:
        assert staged.path is not None
        failpoint("executor.decode")  # (a test's executor dies or stalls here: mid-write)
        settings: HudiSettings = self.config.settings
        rows = PartitionRows(self.config, settings, staged.topic, staged.partition, self.value_schemas)
        for chunk in read_staged_chunks(staged.path, CHUNK_BYTES):
            rows.write(chunk.offsets, chunk.keys, chunk.values, chunk.errors)
        # Named for the staged range and this attempt: a retried write never meets an earlier one's file.
        name = f"{staged.topic}+{staged.partition}+{staged.start}.{uuid.uuid4().hex[:8]}.parquet"
        written = rows.finish(incoming_root(settings, self.commit_id), name)
        return {
            "files": [written.as_dict()] if written is not None else [],
            "bad": bad_outcome(rows.bad),
            "skipped": rows.skipped,
        }


class HudiWriter(RawStagedWriter):
    """The participants' WritePort for the Hudi sink: records are staged raw, and keyed at the commit's end."""

    def job(self, commit_id: uuid.UUID, staged: tuple[StagedPartition, ...], value_schemas: tuple[str, ...]) -> HudiJob:
        return HudiJob(self.config, commit_id, staged, value_schemas)

    def write(self, commit_id: uuid.UUID, staging_id: uuid.UUID, staged: Sequence[StagedPartition]) -> WriteResult:
        if any(s.path is not None and s.records > 0 for s in staged):
            self.check_table()
        return super().write(commit_id, staging_id, staged)

    def check_table(self) -> None:
        """A table already at the base path must take this connector's writes: Hudi's writer refuses a config
        whose record key, partition, key generator, ordering field, table name or other settings conflict
        with the table's (sinks.hudi.table_config). Refused here, before the commit's write status, so no
        commit of it is prepared (I9). Read at every write that has records, not once: a table another writer
        creates at the base path later is met at the next write. (One created between this read and the
        coordinator's write of the same commit still fails that write: nothing before it can see it.)"""
        settings: HudiSettings = self.config.settings
        found = table_conflicts(settings, self.config.raw)
        if found:
            raise WriteRefused(conflicts_message(settings, found))
