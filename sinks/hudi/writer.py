"""The Hudi sink's data plane, participants' side: a commit's staged records become keyed, placed rows.

One function decodes one staged partition (``HudiJob.decode``): Spark's
Python workers run it (the spark data plane, one Spark job per task and
commit) or the participant does (arrow). Records are decoded with the same
JSON decoder as the other sinks (``workers.record_runs``), so the same
records are bad on every sink and plane. Each record gets its Hudi record
key, partition path and, for upserts, its bucket and whether it deletes its
key; a record without a key field (or, for upserts, without its precombine
field) is a bad record, handled by ``errors.tolerance``.

The rows are written to one Parquet file under the table's
``.hoodie/.temp/sinkadmin/<commit>/`` (readers never look there), and the
file's counts per partition path and bucket travel with the write status:
the coordinator plans the commit's file groups from them and has Spark merge
the rows into the table (``sinks.hudi.commit``), under one instant.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connectors.config import SinkConfig
from sinks.hudi.settings import HudiSettings
from sinks.hudi.table import (
    DELETE,
    HOODIE,
    SEQUENCE,
    TOMBSTONE,
    buckets,
    partition_path,
    record_keys,
)
from workers.events import DataFile
from workers.failpoints import failpoint
from workers.record_runs import RecordRuns
from workers.spark_writer import read_staged_chunks
from workers.staging import StagedPartition
from workers.writes import BadRecord, RawStagedWriter

CHUNK_BYTES = 1 << 20
BUCKET = "_sinkadmin_bucket"
# Hudi's own delete flag: a record with it set to true deletes its key.
IS_DELETED = "_hoodie_is_deleted"


def incoming_root(settings: HudiSettings, commit_id: uuid.UUID | str) -> str:
    """Where the participants leave a commit's rows for the coordinator's merge."""
    return f"{settings.base_path}/{HOODIE}/.temp/sinkadmin/{commit_id}"


class PartitionRows(RecordRuns):
    """One staged partition's records as rows for the table: data columns, then the keying columns."""

    def __init__(
        self, config: SinkConfig, settings: HudiSettings, topic: str, partition: int, value_schemas: Sequence[str]
    ) -> None:
        super().__init__(config, value_schemas, ignore_nulls=True)
        self.settings = settings
        self.spec = settings.spec()
        self.topic = topic
        self.partition = partition
        self.pieces: list[pa.Table] = []
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
            self.settle(values[:500])
        tombstones = [i for i, v in enumerate(values) if v is None and errors[i] is None]
        if tombstones and self.settings.upsert:
            self._tombstones([offsets[i] for i in tombstones], [keys[i] for i in tombstones])
        done = 0
        while done < len(values):
            decoded, count = self.decode(values[done:], errors[done:])
            run = offsets[done : done + count]
            bad = list(decoded.bad)
            if not self.settings.upsert:
                self.skipped += decoded.skipped
            rows = self._keyed(decoded.columns, [run[p] for p in decoded.positions], bad, decoded.positions)
            self.bad.extend(BadRecord(self.topic, self.partition, run[i], why) for i, why in sorted(bad))
            if rows is not None and len(rows):
                self.pieces.append(rows)
            done += count

    def _keyed(
        self, rows: pa.Table, offsets: list[int], bad: list[tuple[int, str]], positions: list[int]
    ) -> pa.Table | None:
        """The decoded records with their keying columns; records that cannot be keyed go to ``bad``."""
        s = self.settings
        n = len(rows)
        if n == 0:
            return None
        refused: dict[int, str] = {}
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
        if s.record_key_fields:
            key = record_keys(rows, s.record_key_fields)
        else:
            key = pa.array([f"{self.topic}+{self.partition}+{o}" for o in offsets], pa.string())
        paths = self._partition_paths(rows)
        deleting = np.zeros(n, dtype=bool)
        if s.upsert:
            if s.delete_field and s.delete_field in rows.column_names:
                marked = pc.equal(rows.column(s.delete_field).cast(pa.string()), s.delete_marker or "")
                deleting |= np.asarray(marked.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
            if IS_DELETED in rows.column_names and pa.types.is_boolean(rows.schema.field(IS_DELETED).type):
                flagged = rows.column(IS_DELETED).fill_null(False)
                deleting |= np.asarray(flagged.to_numpy(zero_copy_only=False), dtype=bool)
        keyed = rows.append_column("_hoodie_record_key", key).append_column("_hoodie_partition_path", paths)
        keyed = keyed.append_column(DELETE, pa.array(deleting, pa.bool_()))
        keyed = keyed.append_column(TOMBSTONE, pa.array(np.zeros(n, dtype=bool), pa.bool_()))
        keyed = keyed.append_column(SEQUENCE, pa.array(offsets, pa.int64()))
        if s.upsert:
            keyed = keyed.append_column(BUCKET, pa.array(buckets(key, s.num_buckets), pa.int32()))
        return keyed

    def _tombstones(self, offsets: list[int], keys: list[bytes | None]) -> None:
        """Null values delete their Kafka key's row; a partitioned table cannot place them (no partition values)."""
        s = self.settings
        found: list[tuple[int, str]] = []
        for offset, raw in zip(offsets, keys, strict=True):
            key = self._key_of(raw)
            if key is None:
                self.bad.append(
                    BadRecord(self.topic, self.partition, offset, "a tombstone without a key deletes nothing")
                )
            elif s.partition_fields:
                self.bad.append(
                    BadRecord(
                        self.topic,
                        self.partition,
                        offset,
                        "a tombstone carries no partition field values, so it cannot find its row in a partitioned "
                        "table: delete with hoodie.payload.delete.field or _hoodie_is_deleted instead",
                    )
                )
            else:
                found.append((offset, key))
        if not found:
            return
        key_column = pa.array([k for _, k in found], pa.string())
        n = len(found)
        self.pieces.append(
            pa.table(
                {
                    "_hoodie_record_key": key_column,
                    "_hoodie_partition_path": pa.array([""] * n, pa.string()),
                    DELETE: pa.array([True] * n, pa.bool_()),
                    TOMBSTONE: pa.array([True] * n, pa.bool_()),
                    SEQUENCE: pa.array([o for o, _ in found], pa.int64()),
                    BUCKET: pa.array(buckets(key_column, s.num_buckets), pa.int32()),
                }
            )
        )

    def _key_of(self, raw: bytes | None) -> str | None:
        """A Kafka key as a record key: the key fields of a JSON object key, else the key's text."""
        if raw is None:
            return None
        text = raw.decode("utf-8", "replace")
        fields = self.settings.record_key_fields
        try:
            parsed = json.loads(text)
        except ValueError:
            return text
        if isinstance(parsed, dict) and all(f in parsed for f in fields):
            values = [parsed[f] for f in fields]
            return (
                str(values[0])
                if len(fields) == 1
                else ",".join(f"{f}:{v}" for f, v in zip(fields, values, strict=True))
            )
        return text if not isinstance(parsed, (str, int, float)) else str(parsed)

    @staticmethod
    def _missing(rows: pa.Table, name: str) -> list[int]:
        if name not in rows.column_names:
            return list(range(len(rows)))
        return np.nonzero(np.asarray(rows.column(name).is_null().to_numpy(zero_copy_only=False)))[0].tolist()

    def _partition_paths(self, rows: pa.Table) -> pa.Array:
        fields = self.spec.partition_fields
        if not fields:
            return pa.array([""] * len(rows), pa.string())
        columns = [
            rows.column(f).cast(pa.string()).to_pylist() if f in rows.column_names else [None] * len(rows)
            for f in fields
        ]
        cache: dict[tuple[Any, ...], str] = {}
        paths = []
        for values in zip(*columns, strict=True):
            if values not in cache:
                cache[values] = partition_path(self.spec, values)
            paths.append(cache[values])
        return pa.array(paths, pa.string())

    def finish(self, path: str) -> DataFile | None:
        """Write the rows to ``path``; the write status of the file, with its counts per partition path and bucket."""
        if not self.pieces:
            return None
        # In offset order (tombstones were set aside from their chunks' records): the
        # commit's merge takes the rows' order for the stream's.
        rows = pa.concat_tables(self.pieces, promote_options="permissive").sort_by(SEQUENCE)
        folder = path.rsplit("/", 1)[0]
        Path(folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, path, compression="lz4")
        counts: dict[str, dict[str, int]] = {}
        bucket_column = rows.column(BUCKET).to_pylist() if BUCKET in rows.column_names else [0] * len(rows)
        for p, b in zip(rows.column("_hoodie_partition_path").to_pylist(), bucket_column, strict=True):
            per = counts.setdefault(p, {})
            per[str(b)] = per.get(str(b), 0) + 1
        return DataFile(
            table=self.spec.name,
            path=path,
            topic=self.topic,
            partition=self.partition,
            records=len(rows),
            bytes=Path(path).stat().st_size,
            partition_values=json.dumps(counts, sort_keys=True),
        )


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
        written = rows.finish(f"{incoming_root(settings, self.commit_id)}/{name}")
        return {
            "files": [written.as_dict()] if written is not None else [],
            "bad": [[b.offset, b.reason] for b in rows.bad],
            "skipped": rows.skipped,
        }


class HudiWriter(RawStagedWriter):
    """The participants' WritePort for the Hudi sink: records are staged raw, and keyed at the commit's end."""

    def job(self, commit_id: uuid.UUID, staged: tuple[StagedPartition, ...], value_schemas: tuple[str, ...]) -> HudiJob:
        return HudiJob(self.config, commit_id, staged, value_schemas)
