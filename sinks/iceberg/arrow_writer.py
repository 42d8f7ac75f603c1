"""The arrow data plane of the Iceberg sink, and the decode Spark's Python workers run for it.

Each staged partition's records are routed to their tables
(``iceberg.tables.route-field``, ``sinks.iceberg.routing``), decoded by the
shared JSON decoder (``workers.json_decoder``) into each table's columns, split by its Iceberg
partition with Iceberg's own transforms (pyiceberg on Arrow arrays: a bucket
is the hash every Iceberg engine computes) and written as zstd Parquet under
the table's location. With ``sinkadmin.writer=arrow`` each participant does
this as it consumes, so the end of a commit only closes files; with spark
(the default) Spark's Python workers do it over the staged files
(``sinks.iceberg.spark_writer``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.partitioning import partition_record_value
from pyiceberg.schema import Schema

from connectors.config import SinkConfig
from sinks.iceberg.routing import router_for
from sinks.iceberg.tables import iceberg_schema, missing_fields, partition_values_json
from sinks.iceberg.upserts import UnappliableRows, stream_metadata
from sinks.iceberg.writes import TargetTable, Unshaped, shaped, table_filesystem
from workers.chain_decoder import ChainDecoder
from workers.events import DataFile
from workers.json_decoder import Decoded, JsonDecoder, text_column, utf8_lossy
from workers.staging import RawStagingFile, RecordChunk, StagedFile, StagedPartition, raw_staging_path
from workers.transformed import RecordTransformer, sink_values
from workers.writes import BadRecord, bad_records, publish, with_envelope_hint


def split_by_partition(rows: pa.Table, table: TargetTable) -> list[tuple[tuple[Any, ...], pa.Table]]:
    """The rows grouped by the table's Iceberg partition (one partition per file, as Iceberg
    requires), each with its partition's values as the table's partition record holds them.

    The transforms are Iceberg's own (pyiceberg on Arrow arrays), so a bucket
    is the hash every Iceberg engine computes, and a file's partition need not
    be read back from its column bounds.
    """
    return [(values, rows if at is None else rows.take(at)) for values, at in partition_rows(rows, table)]


def partition_rows(rows: pa.Table, table: TargetTable) -> list[tuple[tuple[Any, ...], pa.Array | None]]:
    """``split_by_partition``'s groups as the positions of their rows, in order (None: every row)."""
    spec, schema = table.spec, table.schema
    if not spec.fields or rows.num_rows == 0:
        return [((), None)]
    names = [f"_k{i}" for i in range(len(spec.fields))]
    keys = []
    for pf in spec.fields:
        source = schema.find_field(pf.source_id)
        keys.append(pf.transform.pyarrow_transform(source.field_type)(rows.column(source.name)))
    index = pa.table([*keys, pa.array(np.arange(rows.num_rows))], names=[*names, "_row"])
    groups = index.group_by(names, use_threads=False).aggregate([("_row", "list")])
    split = []
    for j in range(groups.num_rows):
        values = tuple(
            partition_record_value(pf, groups.column(n)[j].as_py(), schema)
            for pf, n in zip(spec.fields, names, strict=True)
        )
        split.append((values, groups.column("_row_list")[j].values))
    return split


class ArrowTableOutput:
    """Open data files of one partition for one table: one per Iceberg partition value.

    Decoded rows wait in memory until ``row_group_bytes`` of them make a row
    group: records are decoded in small chunks, as they arrive, but files
    keep row groups of a useful size.

    ``stream``: the Kafka partition the rows are of, when each file must say its rows' offsets (upserts: a
    partitioned table's files do not keep the stream's order between them, ``sinks.iceberg.upserts``).
    """

    def __init__(
        self,
        table: TargetTable,
        tmp_dir: str,
        prefix: str,
        row_group_bytes: int,
        stream: tuple[str, int] | None = None,
    ) -> None:
        self.table = table
        self.row_group_bytes = row_group_bytes
        self.stream = stream
        self.pending: dict[tuple[Any, ...], list[tuple[pa.Table, np.ndarray | None]]] = {}
        self.pending_bytes: dict[tuple[Any, ...], int] = {}
        self.offsets: dict[str, list[np.ndarray]] = {}
        self.arrow_schema = table.arrow_schema
        self.fs, self.tmp_path = table_filesystem(tmp_dir, table.io_properties)
        self.prefix = prefix
        self.writers: dict[tuple[Any, ...], tuple[pq.ParquetWriter, str]] = {}
        self.records: dict[str, int] = {}

    def write(self, rows: pa.Table, offsets: np.ndarray | None = None) -> None:
        """Rows in their records' order; ``offsets``: theirs (needed with a ``stream``)."""
        if not rows.num_rows:
            return
        if self.stream is None:
            offsets = None
        elif offsets is None or len(offsets) != rows.num_rows:
            raise ValueError("rows written for upserts need their offsets, one per row")
        if rows.schema != self.arrow_schema:
            # The table's columns in its order: a column the records lack is null.
            rows = pa.Table.from_arrays(
                [
                    rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
                    for f in self.arrow_schema
                ],
                schema=self.arrow_schema,
            )
        for key, at in partition_rows(rows, self.table):
            part = rows if at is None else rows.take(at)
            if not part.num_rows:
                continue
            part_offsets = None if offsets is None else (offsets if at is None else offsets[at.to_numpy()])
            self.pending.setdefault(key, []).append((part, part_offsets))
            self.pending_bytes[key] = self.pending_bytes.get(key, 0) + part.nbytes
            if self.pending_bytes[key] >= self.row_group_bytes:
                self._flush(key)

    def _flush(self, key: tuple[Any, ...]) -> None:
        parts = self.pending.pop(key, [])
        self.pending_bytes.pop(key, None)
        if parts:
            opened = self.writers.get(key)
            if opened is None:
                if not self.writers:
                    self.fs.create_dir(self.tmp_path, recursive=True)
                path = f"{self.tmp_path}/{self.prefix}-{len(self.writers):03d}.parquet"
                writer = pq.ParquetWriter(path, self.arrow_schema, compression="zstd", filesystem=self.fs)
                opened = self.writers[key] = (writer, path)
            rows = pa.concat_tables([rows for rows, _ in parts])
            opened[0].write_table(rows, row_group_size=rows.num_rows)
            self.records[opened[1]] = self.records.get(opened[1], 0) + rows.num_rows
            if self.stream is not None:
                self.offsets.setdefault(opened[1], []).extend(o for _, o in parts if o is not None)

    def close(self) -> list[StagedFile]:
        for key in list(self.pending):
            self._flush(key)
        files = []
        for key, (writer, path) in self.writers.items():
            if self.stream is not None:
                offsets = np.concatenate(self.offsets.pop(path, [np.zeros(0, dtype=np.int64)]))
                writer.add_key_value_metadata(stream_metadata(*self.stream, offsets))
            writer.close()
            partition = partition_values_json(self.table.spec, key)
            files.append(StagedFile(self.table.target.name, self.table.location, path, self.records[path], partition))
        self.writers.clear()
        return files

    def discard(self) -> None:
        self.pending.clear()
        self.pending_bytes.clear()
        self.offsets.clear()
        for writer, path in self.writers.values():
            writer.close()
            self.fs.delete_file(path)
        self.writers.clear()


def unshaped_records(config: SinkConfig, run: RecordChunk, why: str) -> tuple[list[tuple[int, str]], int]:
    """The records of a missing table that none of them could create (``Unshaped``): all bad (position, reason),
    each with its converter's reason (not JSON, not an object, no envelope), else ``why``; and the tombstones
    skipped among them."""
    envelope = config.value_converter == "json" and config.schemas_enable
    consumed = len(run)
    kept = list(range(consumed))
    values: Sequence[bytes | None] = run.values
    errors: Sequence[str | None] = run.errors
    if config.decoder_transforms is not None:
        # (The values as the decoders' chain makes them: those it drops are skipped, as a decoder skips them.)
        transformer = RecordTransformer(config, config.decoder_transforms)
        kept, values, errors = transformer.transform_chunk(run)
    decoded = JsonDecoder(pa.schema([]), envelope=envelope).decode(values, errors)
    bad = [(kept[i], reason) for i, reason in decoded.bad] + [(kept[i], why) for i in decoded.positions]
    return sorted(bad), decoded.skipped + consumed - len(kept)


class TableLane:
    """One table's share of a staged partition: the decoder of its columns, and its open data files."""

    def __init__(
        self, config: SinkConfig, table: TargetTable, tmp_name: str, file_prefix: str, stream: tuple[str, int]
    ) -> None:
        self.config = config
        # (In upsert mode each file says its rows' offsets in this Kafka partition: ArrowTableOutput.)
        self.stream = stream if config.settings.upsert_mode else None
        self.name = table.target.name
        self.tmp_name = tmp_name
        self.file_prefix = file_prefix
        self.table = table
        self.output: ArrowTableOutput | None = None
        # Files closed when the table's schema changed (each file has one schema).
        self.closed: list[StagedFile] = []
        self.schemas = 0
        self.decoder: JsonDecoder | ChainDecoder | None = None
        # In upsert mode, the decoded rows the table cannot apply (``refuse``).
        self.unappliable: UnappliableRows | None = None
        self.value_column = "value"  # string and bytes values: the table's one data column
        self.open(table)

    def open(self, table: TargetTable) -> None:
        """Decoder and open files for the table's current schema (those open until now are closed)."""
        self.table = table
        data_fields = [f for f in table.schema.fields if not f.name.startswith("_kafka_")]
        settings = self.config.settings
        if self.config.value_converter in ("json", "avro"):
            # (Avro values reach the sinks as JSON: the participant decodes them while staging.)
            envelope = self.config.value_converter == "json" and self.config.schemas_enable
            evolve = settings.evolve_schema and self.config.value_converter == "json" and not envelope
            # In upsert mode, the rows the table could not key, or whose CDC operation is unknown: bad records.
            unappliable = self.unappliable = (
                UnappliableRows(table.id_columns, settings.cdc_field) if settings.upsert_mode else None
            )
            # An upsert's key columns are required (identifier fields) but read as nullable: a row without its
            # key is then refused with that reason (UnappliableRows), not as a value that does not fit.
            keys = set(unappliable.id_columns) if unappliable is not None else set()
            columns = pa.schema(
                [
                    field.with_nullable(True) if field.name in keys else field
                    for field in (table.arrow_schema.field(f.name) for f in data_fields)
                ]
            )
            # (The refusals are the writer's own, not the decoder's ``reject``: the sink's, not its converter's,
            # in the dead letters' error context.)
            if self.config.decoder_transforms is not None:
                # The connector's chain, applied to the columns (SinkConfig.columnar_chain).
                self.decoder = ChainDecoder(columns, self.config)
            else:
                self.decoder = JsonDecoder(columns, evolve=evolve, envelope=envelope)
        else:
            self.unappliable = None
            self.value_column = data_fields[0].name if data_fields else "value"
        if self.output is not None:
            self.closed.extend(self.output.close())
        # Unique temporary names per schema: the files are renamed when published.
        prefix = self.file_prefix + (f"-s{self.schemas}" if self.schemas else "")
        self.schemas += 1
        tmp_dir = f"{table.location.rstrip('/')}/data/_tmp/{self.tmp_name}"
        self.output = ArrowTableOutput(table, tmp_dir, prefix, self.config.buffer_bytes, self.stream)

    def decode(self, chunk: RecordChunk) -> Decoded:
        if isinstance(self.decoder, ChainDecoder):
            return self.decoder.decode(chunk)
        if self.decoder is not None:
            return self.decoder.decode(chunk.values, chunk.errors)
        column, bad = text_column(chunk.values, as_string=self.config.value_converter == "string")
        bad += [(i, str(e)) for i, e in enumerate(chunk.errors) if e is not None]
        bad_positions = {i for i, _ in bad}
        positions = [i for i in range(len(chunk)) if i not in bad_positions]
        if bad_positions:
            column = column.take(positions)
        return Decoded(pa.table({self.value_column: column}), positions, sorted(bad))

    def refuse(self, decoded: Decoded) -> list[tuple[int, str]]:
        """The decoded rows an upsert cannot apply (``UnappliableRows``): their positions in the chunk, and why.
        A sink's refusal, after its converter's decoding: Kafka Connect's TASK_PUT in the dead letters' error
        context. (``ArrowPartitionWriter`` takes them out of every table's rows.)"""
        if self.unappliable is None or not decoded.positions:
            return []
        return [(decoded.positions[row], reason) for row, reason in self.unappliable(decoded.columns)]

    def write(self, rows: pa.Table, offsets: np.ndarray | None) -> None:
        assert self.output is not None
        self.output.write(rows, offsets)

    def close(self) -> list[StagedFile]:
        files = self.closed + (self.output.close() if self.output is not None else [])
        self.closed = []
        return files

    def discard(self) -> None:
        if self.output is not None:
            self.output.discard()
        for closed in self.closed:
            table_filesystem(closed.location, self.table.io_properties)[0].delete_file(closed.path)
        self.closed.clear()


# Resolves a table for a partition's records: its name, and the records it may be created from (a missing
# table; ``shaped``). Raises Unshaped when none of them can create it.
TableFor = Callable[[str, Callable[[], Sequence[bytes | None]]], TargetTable]


class ArrowPartitionWriter:
    """Decodes one partition's records chunk by chunk into the commit's data files: the sink
    of a participant's staging buffer (arrow data plane), and what Spark's Python workers run
    over a staged file (spark data plane, ``workers.spark_writer``).

    Each chunk's records are routed to their tables (``sinks.iceberg.routing``), then each table's
    records decoded into its columns (a ``TableLane``). A table is resolved at the first chunk that
    has records for it, from which a missing table is created. A record that one of its tables
    cannot take is bad, and written to none of them.
    """

    DECODE_CHUNK_BYTES = 1 << 20

    def __init__(
        self,
        config: SinkConfig,
        table_for: TableFor,
        evolve_for: Callable[[str, Schema], TargetTable],
        staging_id: uuid.UUID,
        topic: str,
        partition: int,
        start: int,
        staging_dir: Path,
        keep_rejects: bool = True,
    ) -> None:
        self.config = config
        # Undecodable records are copied to a file of their own for the
        # dead-letter topic, unless the caller already has them all (Spark
        # decodes a raw staging file).
        self.keep_rejects = keep_rejects
        self.table_for = table_for
        # Adds fields to a table (schema evolution) and returns it as it is then.
        self.evolve_for = evolve_for
        self.staging_id = staging_id
        self.topic = topic
        self.partition = partition
        self.start = start
        self.staging_dir = staging_dir
        self.attempt = uuid.uuid4().hex[:8]
        # Decode early and in small pieces, so that little is left to do at
        # the commit's end; row groups are still buffer-bytes large.
        self.chunk_bytes = min(config.buffer_bytes, self.DECODE_CHUNK_BYTES)
        # Without a router (one table, no route field) each chunk goes to the table whole: its decoder finds
        # the bad records.
        self.router = router_for(config)
        self.lanes: dict[str, TableLane] = {}
        self.rejects: RawStagingFile | None = None  # the undecodable ones, for the dead-letter topic
        self.bad: list[BadRecord] = []
        self.skipped = 0

    def write(self, chunk: RecordChunk) -> None:
        runs: Mapping[str, list[int] | None]
        if self.router is None:
            runs = {self.config.settings.tables[0].name: None}
            unconverted: dict[int, str] = {}
        else:
            routed = self.router.route(chunk.values, chunk.errors)
            runs, unconverted = routed.tables, dict(routed.bad)
            self.skipped += routed.skipped
        refused: dict[int, str] = {}
        decoded_runs = []
        for name, positions in runs.items():
            run = chunk if positions is None else chunk.take(positions)

            def at(i: int, positions: list[int] | None = positions) -> int:
                return i if positions is None else positions[i]

            lane = self._lane(name, run)
            if isinstance(lane, Unshaped):
                # (No table to write to yet: its records are bad, and a later chunk may create it.)
                bad, skipped = unshaped_records(self.config, run, str(lane))
                for i, reason in bad:
                    unconverted.setdefault(at(i), reason)
                self.skipped += skipped
                continue
            decoded = self._decode(lane, run)
            # (With the metadata columns: an upsert key may be one, ``_kafka_key``, and a row without it refused.)
            decoded.columns = self._with_metadata(decoded, run)
            for i, reason in decoded.bad:
                unconverted.setdefault(at(i), reason)
            refusals = lane.refuse(decoded)
            with_envelope_hint(self.config, refusals, run.values)
            for i, reason in refusals:
                refused.setdefault(at(i), reason)
            self.skipped += decoded.skipped
            decoded_runs.append((lane, decoded, run, at))
        dropped = unconverted.keys() | refused.keys()
        for lane, decoded, run, at in decoded_runs:
            keep = [at(p) not in dropped for p in decoded.positions] if dropped else []
            if not all(keep):
                decoded.columns = decoded.columns.filter(pa.array(keep))
                decoded.positions = [p for p, k in zip(decoded.positions, keep, strict=True) if k]
            if decoded.positions:
                # (The rows' offsets only where the files keep them: upserts, ArrowTableOutput's stream.)
                offsets = np.asarray(run.offsets, dtype=np.int64)[decoded.positions] if lane.stream else None
                lane.write(decoded.columns, offsets)
        self._reject(
            chunk, sorted(unconverted.items()), sorted((p, r) for p, r in refused.items() if p not in unconverted)
        )

    def _lane(self, name: str, run: RecordChunk) -> TableLane | Unshaped:
        """The table's lane, resolved (a missing table created) from ``run``'s records the first time;
        else why none of them can create it."""
        lane = self.lanes.get(name)
        if lane is not None:
            return lane
        try:
            table = shaped(sink_values(self.config, [run]), lambda samples: self.table_for(name, samples))
        except Unshaped as unshaped:
            return unshaped
        tmp_name = f"{self.staging_id}-{self.attempt}"
        prefix = f"{self.topic}+{self.partition}+{self.start}"
        lane = self.lanes[name] = TableLane(self.config, table, tmp_name, prefix, (self.topic, self.partition))
        return lane

    def _decode(self, lane: TableLane, run: RecordChunk) -> Decoded:
        decoded = lane.decode(run)
        if decoded.records_schema is not None:
            additions = missing_fields(lane.table.schema, iceberg_schema(decoded.records_schema))
            if additions is not None:
                # New fields (schema evolution): add them to the table, then decode the records again with
                # them. (A field another task added first keeps its type; records that do not fit it are bad.)
                lane.open(self.evolve_for(lane.name, additions))
                decoded = lane.decode(run)
        return decoded

    def _reject(self, chunk: RecordChunk, unconverted: list[tuple[int, str]], refused: list[tuple[int, str]]) -> None:
        """The chunk's bad records (their positions, and why), kept for the dead letters."""
        if not (unconverted or refused):
            return
        self.bad.extend(bad_records(self.topic, self.partition, chunk.offsets, unconverted, refused))
        if self.rejects is None and self.keep_rejects:
            self.rejects = RawStagingFile(
                raw_staging_path(self.staging_dir, self.topic, self.partition, self.start, f"-rejects-{self.attempt}"),
                self.chunk_bytes,
            )
        if self.rejects is not None:
            self.rejects.write(chunk.take(sorted(i for i, _ in (*unconverted, *refused))))

    def _with_metadata(self, decoded: Decoded, chunk: RecordChunk) -> pa.Table:
        columns = decoded.columns
        wanted = set(self.config.metadata_columns)
        if not wanted:
            return columns
        take = pa.array(decoded.positions, pa.int64()) if len(decoded.positions) != len(chunk) else None

        def picked(array: pa.Array) -> pa.Array:
            return array.take(take) if take is not None else array

        n = len(decoded.positions)
        if "topic" in wanted:
            columns = columns.append_column("_kafka_topic", pa.array([self.topic] * n, pa.string()))
        if "partition" in wanted:
            columns = columns.append_column("_kafka_partition", pa.array([self.partition] * n, pa.int32()))
        if "offset" in wanted:
            columns = columns.append_column("_kafka_offset", picked(pa.array(chunk.offsets, pa.int64())))
        if "timestamp" in wanted:
            millis = pa.array(chunk.timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
            columns = columns.append_column("_kafka_timestamp", picked(millis.cast(pa.timestamp("us", tz="UTC"))))
        if "key" in wanted:

            def key_column(keys: Sequence[bytes | None]) -> pa.Array:
                return pa.array(keys, pa.binary()) if self.config.key_converter == "bytearray" else utf8_lossy(keys)

            chain = self.config.decoder_transforms
            if chain is not None and chain.uses_keys:
                # (The decoder applied a chain that reads keys: each as the stage would have staged it, parsed and
                # written again, so that the column is what it is when the tasks apply the chain.)
                staged = RecordTransformer(self.config, chain).staged_keys([chunk.keys[p] for p in decoded.positions])
                columns = columns.append_column("_kafka_key", key_column(staged))
            else:
                columns = columns.append_column("_kafka_key", picked(key_column(chunk.keys)))
        return columns

    def finish(self, staged: StagedPartition) -> StagedPartition:
        staged.decoded = True
        staged.files = [f for lane in self.lanes.values() for f in lane.close()]
        staged.bad = self.bad
        staged.skipped = self.skipped
        staged.path = self.rejects.close() if self.rejects is not None else None
        return staged

    def discard(self) -> None:
        if self.rejects is not None:
            self.rejects.discard()
        for lane in self.lanes.values():
            lane.discard()


def publish_decoded(commit_id: uuid.UUID, staged: StagedPartition, io_properties: Mapping[str, str]) -> list[DataFile]:
    """The Arrow writer's files of one partition under their final names; their temporary directory goes.
    (``io_properties``: the catalog's, with which the tables' files are reached.)"""
    files = []
    attempt = uuid.uuid4().hex[:8]
    tmp_dirs = set()

    def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
        return table_filesystem(location, io_properties)

    for n, written in enumerate(staged.files):
        files.append(
            publish(
                commit_id,
                attempt,
                written.path,
                n,
                written.table,
                written.location,
                staged,
                written.partition_values,
                filesystem,
            )
        )
        tmp_dirs.add((written.location, written.path.rsplit("/", 1)[0]))
    for location, tmp in tmp_dirs:
        filesystem(location)[0].delete_dir(tmp)
    return files
