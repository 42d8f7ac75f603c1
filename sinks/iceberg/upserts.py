"""Keyed upserts on Iceberg tables, copy-on-write (``iceberg.tables.upsert-mode-enabled``, ``iceberg.tables.cdc-field``).

The participants write the commit's records to data files as for appends.
The coordinator's commit then, for each table:

1. reads the identifier columns (and the CDC field) of the commit's files, in
   stream order (by topic, partition and offset: each file the writers write
   for upserts says its rows' offsets in its footer, ``stream_metadata``,
   since a partitioned table's rows of one Kafka partition go to a file per
   Iceberg partition): the last record of each key wins; a record whose CDC field starts with
   ``D`` deletes its key (Iceberg's sink: D delete, U update, I insert;
   here an insert of a key that is there replaces it, as upsert mode does);
2. finds the table's live data files that may hold those keys (by their
   column bounds when the keys are few) and has Spark rewrite, in one job,
   each one that does hold some, without them, and the commit's own files
   without their superseded and deleting records;
3. replaces the rewritten files and adds the commit's files in one OVERWRITE
   snapshot carrying the commit's id and offsets, which also checks that
   every file it removes is still live.

A coordinator that takes over finds the snapshot (done) or redoes the work:
the files of a rewrite that never committed are referenced by no snapshot
and go with orphan removal. A zombie's overwrite fails the catalog's
check, and its retry finds the commit's snapshot.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sinks.iceberg.key_index import INTEGER_ENTRY_BYTES, KeyIndexCache, WantedKeys
from sinks.iceberg.writes import file_io_properties, table_filesystem
from workers.failpoints import failpoint

if TYPE_CHECKING:
    from sinks.iceberg.spark_commits import SparkTables
    from sinks.iceberg.tables import CommittedTable

log = logging.getLogger(__name__)
KEY_SEPARATOR = "\x1f"
# Bounds-based pruning only for this many keys: an In filter of more costs pyiceberg more than it saves.
MAX_FILTERED_KEYS = 1000


def key_column(rows: pa.Table, id_columns: Sequence[str]) -> pa.Array:
    """Each row's key as text: the identifier column, or the columns joined (a missing column is null)."""
    columns = [
        key_text(rows.column(c).combine_chunks()) if c in rows.column_names else pa.nulls(len(rows), pa.string())
        for c in id_columns
    ]
    if len(columns) == 1:
        return columns[0]
    return pc.binary_join_element_wise(*columns, KEY_SEPARATOR, null_handling="replace", null_replacement="\x00")


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# How key_column writes keys as text: a change of it changes this, so that the files' key indexes written the
# old way are rebuilt (sinks.iceberg.key_index; tests/test_key_index.py holds the texts this version writes).
KEY_TEXT_FORMAT = "1"


def key_text(column: pa.Array) -> pa.Array:
    """An identifier column's values as text: a UUID, fixed or binary column's bytes in hexadecimal (Arrow's
    cast would take them for UTF-8), others as Arrow casts them."""
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return pa.array([None if v is None else v.hex() for v in column.to_pylist()], pa.string())
    if not pa.types.is_fixed_size_binary(column.type):
        return column.cast(pa.string())
    width = column.type.byte_width
    column = pa.concat_arrays([column])  # (its bytes from offset 0)
    data = np.frombuffer(column.buffers()[1], dtype=np.uint8, count=len(column) * width)
    text = np.empty(len(data) * 2, dtype=np.uint8)
    text[0::2], text[1::2] = _HEX_DIGITS[data >> 4], _HEX_DIGITS[data & 15]
    offsets = np.arange(0, len(text) + 1, 2 * width, dtype=np.int32)
    return pa.StringArray.from_buffers(
        len(column), pa.py_buffer(offsets), pa.py_buffer(text.tobytes()), column.buffers()[0], column.null_count
    )


def deleting(rows: pa.Table, cdc_field: str | None) -> np.ndarray:
    """Rows whose CDC operation deletes their key (it starts with D or d, trimmed, as the Iceberg sink reads it).
    The field may be nested, named by its path (``_cdc.op``, the Iceberg sink's DebeziumTransform's)."""
    column = _nested(rows, cdc_field) if cdc_field else None
    if column is None:
        return np.zeros(len(rows), dtype=bool)
    marked = pc.starts_with(_operations(column), "D").fill_null(False)
    return np.asarray(marked.to_numpy(zero_copy_only=False), dtype=bool)


# The CDC operations an upsert knows, by their first letter: the Iceberg sink's I, U and D, and Debezium's
# c (create) and r (read: a snapshot's row), which insert.
KNOWN_OPERATIONS = ("I", "U", "D", "C", "R")


@dataclass(frozen=True)
class UnappliableRows:
    """The decoded rows an upsert cannot apply, with why (``sinks.iceberg.arrow_writer.ArrowPartitionWriter``
    applies it to what its decoder decoded): a row without a value for an identifier column, and, with a CDC
    field, a row whose operation is none of ``KNOWN_OPERATIONS``. Each is a bad record (``errors.tolerance``),
    never written: the sink's refusal (Kafka Connect's TASK_PUT stage), not its converter's."""

    id_columns: tuple[str, ...]
    cdc_field: str | None

    def __call__(self, rows: pa.Table) -> list[tuple[int, str]]:
        refused: dict[int, str] = {}
        for name in self.id_columns:
            if name in rows.column_names:
                for row in np.nonzero(rows.column(name).is_null().to_numpy(zero_copy_only=False))[0].tolist():
                    refused.setdefault(
                        row, f"no value for {name}, an identifier column of upsert mode: the row has no key"
                    )
        column = _nested(rows, self.cdc_field) if self.cdc_field else None
        if column is not None:
            first = pc.utf8_slice_codeunits(_operations(column), 0, 1)
            known = pc.is_in(first, pa.array(KNOWN_OPERATIONS)).fill_null(False)
            for row in np.nonzero(~np.asarray(known.to_numpy(zero_copy_only=False), dtype=bool))[0].tolist():
                value = column[row].as_py()
                refused.setdefault(
                    row,
                    f"iceberg.tables.cdc-field {self.cdc_field} is {value!r}: no operation an upsert knows "
                    "(I, C or R inserts, U updates, D deletes)",
                )
        return sorted(refused.items())


def _operations(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A CDC field's operations as the Iceberg sink reads them: text, trimmed, upper case."""
    return pc.utf8_upper(pc.utf8_trim_whitespace(column.cast(pa.string())))


def _nested(rows: pa.Table, path: str) -> pa.ChunkedArray | None:
    """The column at a dotted path (``_cdc.op``: the field ``op`` of the struct column ``_cdc``), if present."""
    top, *inner = path.split(".")
    if top not in rows.column_names:
        return None
    column = rows.column(top)
    for name in inner:
        if not pa.types.is_struct(column.type) or column.type.get_field_index(name) < 0:
            return None
        column = pc.struct_field(column, name)
    return column


# The footer key (Parquet key-value metadata) of a data file written for upserts: the Kafka partition of its
# rows and their offsets, in the file's order (``stream_metadata``).
STREAM_METADATA = "sinkadmin.stream"


def stream_metadata(topic: str, partition: int, offsets: np.ndarray) -> dict[str, str]:
    """A data file's footer entry saying its rows' offsets in their Kafka partition (the differences between
    them compressed: consecutive offsets take a few bytes)."""
    steps = np.diff(np.asarray(offsets, dtype="<i8"), prepend=np.int64(0)).astype("<i8")
    packed = base64.b64encode(zlib.compress(steps.tobytes())).decode()
    return {
        STREAM_METADATA: json.dumps({"topic": topic, "partition": partition, "rows": len(steps), "offsets": packed})
    }


def stream_of(metadata: Mapping[bytes, bytes] | None, rows: int) -> tuple[str, int, np.ndarray] | None:
    """A data file's Kafka partition and its rows' offsets from its footer (``stream_metadata``); None when it
    has none (a file written before it, or by another writer) or one that does not fit its ``rows``."""
    raw = (metadata or {}).get(STREAM_METADATA.encode())
    if raw is None:
        return None
    try:
        entry = json.loads(raw)
        steps = np.frombuffer(zlib.decompress(base64.b64decode(entry["offsets"])), dtype="<i8")
        if entry["rows"] != rows or len(steps) != rows:
            return None
        return str(entry["topic"]), int(entry["partition"]), np.cumsum(steps).astype(np.int64)
    except (ValueError, KeyError, TypeError, zlib.error):
        return None


def _stream_order(streams: Sequence[tuple[str, int, np.ndarray] | None], sizes: Sequence[int]) -> np.ndarray:
    """The commit's rows (concatenated in the files' order) in stream order: by Kafka partition, in the order
    the files first name them, then by offset. A file without its offsets is a stream of its own, its rows in
    its order, where it stands."""
    groups: dict[tuple[str, int] | int, int] = {}
    group_of, offsets = [], []
    for n, (stream, size) in enumerate(zip(streams, sizes, strict=True)):
        key: tuple[str, int] | int = (stream[0], stream[1]) if stream is not None else n
        group_of.append(np.full(size, groups.setdefault(key, len(groups)), dtype=np.int64))
        offsets.append(stream[2] if stream is not None else np.arange(size, dtype=np.int64))
    if not sizes:
        return np.zeros(0, dtype=np.int64)
    # (np.lexsort sorts by its last key first, and is stable.)
    return np.lexsort((np.concatenate(offsets), np.concatenate(group_of))).astype(np.int64)


@dataclass(frozen=True)
class Winners:
    """What the commit's own records come to: per file, the rows that stay; and every key they touch."""

    dropped: tuple[tuple[int, ...], ...]  # per incoming file (in order), the rows to leave out
    keys: pa.Array  # every key the commit writes or deletes
    # The same keys as the identifier column's values (one column only), but null; left empty when the keys
    # are more than MAX_FILTERED_KEYS (so many filter no file by value).
    typed_keys: tuple[Any, ...]
    sizes: tuple[int, ...] = ()  # per incoming file, its rows
    # The keys the commit deletes without writing them first: a delete of one the table lacks changes nothing
    # and is counted (``ABSENT_KEY_DELETES``).
    deleted_keys: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    # With an ordering field: each key's winner (aligned with ``keys``): its stream position, whether it
    # writes (not deletes), and its ordering value, which the table's row of the key must not exceed.
    winner_at: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    winner_writes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    orders: pa.Array | None = None
    # The same keys as integers, sorted, when the one identifier column is of an integer type: the live
    # files' keys are then looked up as numbers (in their key indexes, or with integer_where), not as text.
    integer_keys: np.ndarray | None = None
    # Whether a record has no value in the one identifier column (its key then matches the rows without one).
    null_key: bool = False

    def dropping(self, stale: pa.Array) -> tuple[tuple[int, ...], ...]:
        """``dropped``, and the rows of the winners of the ``stale`` keys (those the table holds a later row
        of, by the ordering field): per file, the rows to leave out."""
        if not len(stale):
            return self.dropped
        index = np.asarray(pc.index_in(stale, self.keys).to_numpy(zero_copy_only=False), dtype=np.int64)
        at = self.winner_at[index][self.winner_writes[index]]
        bounds = np.cumsum((0, *self.sizes))
        return tuple(
            tuple(sorted({*dropped, *(at[(at >= bounds[n]) & (at < bounds[n + 1])] - bounds[n]).tolist()}))
            for n, dropped in enumerate(self.dropped)
        )


def winners(
    paths: Sequence[str],
    id_columns: Sequence[str],
    cdc_field: str | None,
    ordering_field: str | None = None,
    io_properties: Mapping[str, str] = {},
) -> Winners:
    """The last record of each key across the commit's files, and the keys. The files are given by Kafka
    partition; a file's rows are ordered among those of its partition by the offsets its footer gives
    (``stream_metadata``), else where it stands.

    ``ordering_field`` (``sinkadmin.upsert.ordering-field``): the record with the greatest value of it wins
    instead, of equal ones (or none) the later in the stream."""
    columns = list(dict.fromkeys([*id_columns, *(f for f in (cdc_field, ordering_field) if f)]))
    keys: list[pa.Array] = []
    deletes: list[np.ndarray] = []
    orderings: list[pa.Array | None] = []
    singles: list[pa.Array] = []  # (the one identifier column of each file that has it)
    sizes = []
    streams = []
    for path in paths:
        fs, at = table_filesystem(path, io_properties)
        parquet = pq.ParquetFile(at, filesystem=fs)
        names = parquet.schema_arrow.names
        present = list(dict.fromkeys(c.split(".")[0] for c in columns if c.split(".")[0] in names))
        rows = parquet.read(columns=present)
        streams.append(stream_of(parquet.metadata.metadata, len(rows)))
        keys.append(key_column(rows, id_columns))
        deletes.append(deleting(rows, cdc_field))
        if ordering_field:
            found = _nested(rows, ordering_field)
            orderings.append(found.combine_chunks() if found is not None else None)
        if len(id_columns) == 1 and id_columns[0] in rows.column_names:
            singles.append(rows.column(id_columns[0]).combine_chunks())
        sizes.append(len(rows))
    if not paths:
        return Winners((), pa.array([], pa.string()), ())
    every = pa.concat_arrays(keys) if keys else pa.array([], pa.string())
    # Each record's rank in the order that decides which wins: the stream's, or the ordering field's (ties in
    # the stream's). ``stream_order``: the records by rank.
    stream_order = _stream_order(streams, sizes)
    rank = np.empty_like(stream_order)
    rank[stream_order] = np.arange(len(every), dtype=np.int64)
    values = None
    if ordering_field:
        values, stream_order = _ordered(orderings, sizes, rank)
        rank = np.empty_like(stream_order)
        rank[stream_order] = np.arange(len(every), dtype=np.int64)
    removes = np.concatenate(deletes)
    last = (
        pa.table({"key": every, "rank": rank, "writes": ~removes})
        .group_by("key", use_threads=False)
        .aggregate([("rank", "max"), ("writes", "any")])
    )
    keep = np.zeros(len(every), dtype=bool)
    winner = stream_order[last.column("rank_max").to_numpy()]
    keep[winner] = True
    keep &= ~removes
    only_deleted = removes[winner] & ~np.asarray(last.column("writes_any").to_numpy(zero_copy_only=False), dtype=bool)
    deleted_keys = last.column("key").combine_chunks().filter(pa.array(only_deleted))
    dropped = []
    start = 0
    for size in sizes:
        dropped.append(tuple(np.nonzero(~keep[start : start + size])[0].tolist()))
        start += size
    distinct = last.column("key").combine_chunks()
    null_key = any(column.null_count for column in singles)
    typed_keys: tuple[Any, ...] = ()
    if len(id_columns) == 1 and len(distinct) - null_key <= MAX_FILTERED_KEYS:
        typed_keys = tuple(dict.fromkeys(v for column in singles for v in column.to_pylist() if v is not None))
    return Winners(
        tuple(dropped),
        distinct,
        typed_keys,
        tuple(sizes),
        deleted_keys,
        winner_at=winner,
        winner_writes=~removes[winner],
        orders=values.take(pa.array(winner)) if values is not None else None,
        integer_keys=_integers(singles) if len(singles) == len(paths) else None,
        null_key=null_key,
    )


def _integers(columns: Sequence[pa.Array]) -> np.ndarray | None:
    """The distinct values of an identifier column, as sorted int64, when every file has it of a type int64
    holds; None otherwise (text, or a null in it)."""
    exact = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32())
    if not columns or any(c.type not in exact or c.null_count for c in columns):
        return None
    return np.unique(np.concatenate([c.cast(pa.int64()).to_numpy() for c in columns]))


# The largest span of integer keys (greatest less least) looked up in a table of one byte per value (16 MiB):
# beyond it, by hashing (a table lookup is several times a hash's speed, and what a commit's lookup costs).
TABLE_LOOKUP_SPAN = 1 << 24


def _integer_keyed(schema: pa.Schema, present: Sequence[str]) -> bool:
    """Whether a file's identifier column is one, of an integer type int64 holds (its keys are then indexed as
    numbers)."""
    if len(present) != 1:
        return False
    kind = schema.field(present[0]).type
    return pa.types.is_integer(kind) and not pa.types.is_uint64(kind)


def integer_where(column: pa.ChunkedArray | pa.Array, keys: np.ndarray) -> np.ndarray | None:
    """The positions of ``column``'s values that are in ``keys`` (sorted int64), or None when the column is
    not of an integer type without nulls (then keys are compared as text)."""
    if not pa.types.is_integer(column.type) or column.null_count or pa.types.is_uint64(column.type):
        return None
    values = column.to_numpy() if isinstance(column, pa.Array) else column.combine_chunks().to_numpy()
    values = values.astype(np.int64, copy=False)
    if not keys.size:
        return np.zeros(0, dtype=np.int64)
    low, high = int(keys[0]), int(keys[-1])
    if high - low < TABLE_LOOKUP_SPAN:
        table = np.zeros(high - low + 1, dtype=bool)
        table[keys - low] = True
        inside = np.nonzero((values >= low) & (values <= high))[0]
        return inside[table[values[inside] - low]].astype(np.int64)
    return np.nonzero(np.isin(values, keys))[0].astype(np.int64)


def _ordered(
    orderings: Sequence[pa.Array | None], sizes: Sequence[int], stream_rank: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """The records' ordering values (concatenated in the files' order), and their positions there sorted by
    them, ascending (a null, or a file without the field, first), ties by ``stream_rank`` (each record's rank
    in the stream): the last of a key in it wins."""
    types = [o.type for o in orderings if o is not None and not pa.types.is_null(o.type)]
    # (A field a later file types wider, after schema evolution, is compared in that wider type.)
    common = types[-1] if types else pa.null()
    values = pa.concat_arrays(
        [o.cast(common) if o is not None else pa.nulls(size, common) for o, size in zip(orderings, sizes, strict=True)]
    )
    by = pa.table({"value": values, "at": stream_rank})
    order = pc.sort_indices(by, sort_keys=[("value", "ascending", "at_start"), ("at", "ascending")])
    return values, np.asarray(order.to_numpy(), dtype=np.int64)


def later_in_table(current: pa.Array, incoming: pa.Array) -> np.ndarray:
    """Where the table's row of a key is later, by the ordering field, than the commit's record of it (the
    arrays aligned): a greater value, or a value where the record has none. On equal values the commit's
    record is the later (as Hudi's event-time ordering breaks ties)."""
    if pa.types.is_null(incoming.type):
        return np.asarray(current.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    current = current.cast(incoming.type)
    later = pc.if_else(incoming.is_null(), current.is_valid(), pc.fill_null(pc.greater(current, incoming), False))
    return np.asarray(later.to_numpy(zero_copy_only=False), dtype=bool)


@dataclass(frozen=True)
class RewriteUnit:
    """One file to rewrite: a live file of the table (rows of the commit's keys go, and the rows its position
    ``deletes`` files delete already) or one of the commit's own files (the ``dropped`` rows go)."""

    path: str
    own: bool
    dropped: tuple[int, ...] = ()
    deletes: tuple[str, ...] = ()


def _where(keys: pa.Array, wanted: pa.Array) -> np.ndarray:
    """The positions of ``keys`` that are in ``wanted``."""
    hit = pc.is_in(keys, wanted).fill_null(False)
    return np.nonzero(np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool))[0].astype(np.int64)


def _deletes_found(hit_keys: pa.Array, deleted_keys: pa.Array) -> list[str]:
    """The keys of ``deleted_keys`` among ``hit_keys`` (those of the rows found), each once: deletes that found
    their key. (Keys, not rows: a table may hold a key twice, written by another writer.)"""
    if not len(deleted_keys) or not len(hit_keys):
        return []
    return list(pc.unique(hit_keys.filter(pc.is_in(hit_keys, deleted_keys))).to_pylist())


@dataclass(frozen=True)
class UpsertJob:
    """The Spark job of an upsert commit (pickled to Spark's Python workers): ``run_unit(n)`` runs ``units[n]``
    against the commit's ``keys`` (``deleted_keys``: those it deletes without writing them)."""

    units: tuple[Any, ...]
    id_columns: tuple[str, ...]
    keys: pa.Array
    commit_id: str
    deleted_keys: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    # With an ordering field: the field, and the ordering value of each key's record (aligned with ``keys``).
    ordering_field: str | None = None
    orders: pa.Array | None = None
    integer_keys: np.ndarray | None = None  # (Winners.integer_keys)
    # The catalog's properties the table's files are reached with (sinks.iceberg.writes.table_filesystem).
    io_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Where the live files' key indexes are kept, and the commit's keys as the indexes look them up (``keys``
    # hashed, or integer keys as they are); None: the identifier columns are read each time.
    key_cache: KeyIndexCache | None = None
    wanted: WantedKeys | None = field(default=None, repr=False)

    @property
    def count(self) -> int:
        return len(self.units)

    def live_units(self, paths: Sequence[str], deletes: Mapping[str, tuple[str, ...]]) -> list[Any]:
        """The units of the table's live files at ``paths`` (``deletes``: each one's delete files)."""
        raise NotImplementedError

    def own_units(self, paths: Sequence[str], dropped: Sequence[tuple[int, ...]], sizes: Sequence[int]) -> list[Any]:
        """The units of the commit's own files at ``paths``, whose ``dropped`` rows are left out."""
        raise NotImplementedError

    def _hits(self, path: str, deleted: Sequence[str] = ()) -> tuple[np.ndarray, pa.Array, list[str]]:
        """For the live data file at ``path``: the positions of the rows the commit replaces or deletes (its
        identifier columns, and the ordering field, are read; rows the ``deleted`` delete files delete are
        not live) and their keys; and the keys whose row there is later than the commit's record by the
        ordering field, which stays (the record is then stale).

        Keys are looked up in the file's key index (``key_cache``: built from its identifier columns the first
        time, then read instead of them), integer keys as numbers; without an index, in the columns."""
        fs, at = table_filesystem(path, self.io_properties)
        parquet = pq.ParquetFile(at, filesystem=fs)
        schema = parquet.schema_arrow
        present = [c for c in self.id_columns if c in schema.names]
        ordering = [self.ordering_field.split(".")[0]] if self.ordering_field else []
        positions = hit = None
        indexed = None
        integers = self.wanted is not None and self.wanted.keys is None
        if self.key_cache is not None and self.wanted is not None and (not integers or _integer_keyed(schema, present)):
            # (The keys' text depends on the columns' types, on key_column and on Arrow's casts.)
            types = ",".join(str(schema.field(c).type) for c in present)

            def read_keys() -> pa.Array:
                columns = parquet.read(columns=present)
                return columns.column(0).combine_chunks() if integers else key_column(columns, self.id_columns)

            indexed = self.key_cache.file_keys(
                path,
                self.id_columns,
                parquet.metadata.num_rows,
                read_keys,
                rendering=f"{KEY_TEXT_FORMAT};pyarrow {pa.__version__};{','.join(present)}:{types}",
                integers=integers,
            )
        if indexed is not None and self.wanted is not None:
            positions, hit = indexed.where(self.wanted)
            wanted = ordering if self.orders is not None and positions.size else []
        else:
            wanted = [*present, *ordering]
        names = schema.names
        rows = parquet.read(columns=[c for c in dict.fromkeys(wanted) if c in names])
        keys = None  # (every row's key as text: only when they were looked up as text, in the columns)
        if positions is None and self.integer_keys is not None and self.id_columns[0] in rows.column_names:
            positions = integer_where(rows.column(self.id_columns[0]), self.integer_keys)
        if positions is None:
            keys = key_column(rows, self.id_columns)
            positions = _where(keys, self.keys)
        if positions.size and deleted:
            size = parquet.metadata.num_rows
            gone = np.zeros(size, dtype=bool)
            dead = deleted_positions(deleted, path, self.io_properties)
            gone[dead[dead < size]] = True  # (a position past the file's rows deletes nothing)
            live = ~gone[positions]
            positions = positions[live]
            hit = hit.filter(pa.array(live)) if hit is not None else None
        if hit is None:
            taken = pa.array(positions)
            hit = keys.take(taken) if keys is not None else key_column(rows.take(taken), self.id_columns)
        if self.orders is None or not positions.size:
            return positions, hit, []
        incoming = self.orders.take(pc.index_in(hit, self.keys))
        column = _nested(rows, self.ordering_field) if self.ordering_field else None
        current = (
            column.combine_chunks().take(pa.array(positions))
            if column is not None
            else pa.nulls(len(positions), incoming.type)
        )
        later = later_in_table(current, incoming)
        return positions[~later], hit.filter(pa.array(~later)), hit.filter(pa.array(later)).to_pylist()


@dataclass(frozen=True)
class UpsertRewrite(UpsertJob):
    """Copy-on-write: ``run_unit(n)`` rewrites ``units[n]`` (RewriteUnits)."""

    def live_units(self, paths: Sequence[str], deletes: Mapping[str, tuple[str, ...]]) -> list[Any]:
        return [RewriteUnit(path, own=False, deletes=deletes[path]) for path in paths]

    def own_units(self, paths: Sequence[str], dropped: Sequence[tuple[int, ...]], sizes: Sequence[int]) -> list[Any]:
        # One per file, in order (a file without rows to leave out stays as it is).
        return [RewriteUnit(path, own=True, dropped=d) for path, d in zip(paths, dropped, strict=True)]

    def run_unit(self, index: int) -> dict[str, Any]:
        """``{"path", "records", "found"}`` of the rewritten file (records 0: nothing stays, no file), or
        ``{"path": None}`` when the file holds none of the keys and stays as it is. ``found``: the keys of the
        rows the commit's deletes removed, each once."""
        failpoint("upsert.rewrite")  # (a test's executor dies here: some files rewritten, no snapshot)
        unit = self.units[index]
        fs, at = table_filesystem(unit.path, self.io_properties)
        found: list[str] = []
        stale: list[str] = []
        if unit.own:
            if not unit.dropped:
                return {"path": None, "found": []}
            rows = pq.read_table(at, filesystem=fs)
            keep = np.ones(len(rows), dtype=bool)
            keep[list(unit.dropped)] = False
        else:
            hit, hit_keys, stale = self._hits(unit.path, unit.deletes)
            if not hit.size:
                return {"path": None, "found": [], "stale": stale}
            found = _deletes_found(hit_keys, self.deleted_keys)
            rows = pq.read_table(at, filesystem=fs)
            keep = np.ones(len(rows), dtype=bool)
            keep[hit] = False
            # Rows deleted by position already (merge-on-read commits before the table's mode changed) stay
            # deleted: the rewritten file leaves them out, and the delete files, which name the old file only,
            # no longer apply to anything live (compaction drops them).
            if unit.deletes:
                keep[deleted_positions(unit.deletes, unit.path, self.io_properties)] = False
        kept = rows.filter(pa.array(keep))
        if len(kept) == 0:
            return {"path": unit.path, "records": 0, "found": found, "stale": stale}
        target = _beside(unit.path, "upsert", self.commit_id)
        pq.write_table(kept, table_filesystem(target, self.io_properties)[1], filesystem=fs, compression="zstd")
        return {"path": target, "records": len(kept), "found": found, "stale": stale}


def _beside(path: str, kind: str, commit_id: str) -> str:
    """A new file's URI in the directory of the file at ``path``, named after it, ``kind`` and the commit."""
    directory, _, name = path.rpartition("/")
    stem = name.removesuffix(".parquet").split(f"-{kind}-")[0]
    return f"{directory}/{stem}-{kind}-{commit_id}-{uuid.uuid4().hex[:8]}.parquet"


# A position delete file's columns, with the field ids Iceberg's table spec reserves for them.
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": b"2147483546"}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"2147483545"}),
    ]
)


def deleted_positions(delete_files: Sequence[str], data_file: str, io_properties: Mapping[str, str] = {}) -> np.ndarray:
    """The positions of ``data_file`` that the position delete files at ``delete_files`` delete (a position
    two of them delete is there twice)."""
    found = [np.zeros(0, dtype=np.int64)]
    for path in delete_files:
        fs, at = table_filesystem(path, io_properties)
        parquet = pq.ParquetFile(at, filesystem=fs)
        holds = _holds_only(parquet.metadata, data_file)
        if holds is False:
            continue
        if holds:
            # (Every row is of this data file, as in the delete files an upsert writes: its paths not read.)
            found.append(parquet.read(columns=["pos"]).column("pos").to_numpy())
            continue
        rows = parquet.read(columns=["file_path", "pos"])
        mine = rows.filter(pc.equal(rows.column("file_path"), data_file))
        found.append(mine.column("pos").to_numpy())
    return np.concatenate(found)


def _holds_only(metadata: pq.FileMetaData, data_file: str) -> bool | None:
    """From a position delete file's ``file_path`` statistics: True when each of its rows is of ``data_file``,
    False when none is, None when they do not say (no statistics, or rows of several files). (A truncated
    minimum is a prefix, a truncated maximum a bound above: neither equals a path it does not hold.)"""
    leaves = [metadata.schema.column(j).path for j in range(metadata.num_columns)]
    if "file_path" not in leaves or metadata.num_row_groups == 0:
        return None
    column = leaves.index("file_path")
    verdicts = set()
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            return None
        if stats.min == data_file == stats.max:
            verdicts.add(True)
        elif not isinstance(stats.min, str) or not isinstance(stats.max, str):
            return None
        elif data_file < stats.min or stats.max < data_file:
            verdicts.add(False)
        else:
            return None
    return verdicts.pop() if len(verdicts) == 1 else None


@dataclass(frozen=True)
class DeleteUnit:
    """One data file whose rows the commit deletes by position: a live file of the table (the rows of the
    commit's keys that no earlier ``deletes`` file already deletes), or one of the commit's own files (its
    ``dropped`` rows, superseded within the commit)."""

    path: str
    own: bool
    dropped: tuple[int, ...] = ()
    deletes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PositionDeletes(UpsertJob):
    """Merge-on-read: ``run_unit(n)`` writes the position delete file of ``units[n]`` (DeleteUnits), beside its
    data file. Only the identifier columns (and the ordering field) of a live file are read; no data file is
    rewritten."""

    def live_units(self, paths: Sequence[str], deletes: Mapping[str, tuple[str, ...]]) -> list[Any]:
        return [DeleteUnit(path, own=False, deletes=deletes[path]) for path in paths]

    def own_units(self, paths: Sequence[str], dropped: Sequence[tuple[int, ...]], sizes: Sequence[int]) -> list[Any]:
        # The commit's own files stay as written, less any whose every row goes (superseded within the
        # commit, or stale): a delete file for each of the others with rows to leave out.
        return [
            DeleteUnit(path, own=True, dropped=d)
            for path, d, size in zip(paths, dropped, sizes, strict=True)
            if 0 < len(d) < size
        ]

    def run_unit(self, index: int) -> dict[str, Any]:
        """``{"path", "records", "size", "first", "last", "found"}``: the delete file written (records: the
        positions it deletes, first and last of them), or ``{"path": None}`` when the file holds none of the
        keys. ``found``: the keys of the rows the commit's deletes removed, each once."""
        failpoint("upsert.rewrite")  # (a test's executor dies here: some files written, no snapshot)
        unit = self.units[index]
        found: list[str] = []
        stale: list[str] = []
        if unit.own:
            positions = np.asarray(unit.dropped, dtype=np.int64)
        else:
            positions, hit_keys, stale = self._hits(unit.path, unit.deletes)
            found = _deletes_found(hit_keys, self.deleted_keys)
        if not positions.size:
            return {"path": None, "found": found, "stale": stale}
        positions.sort()
        target = _beside(unit.path, "deletes", self.commit_id)
        fs, at = table_filesystem(target, self.io_properties)
        rows = pa.table(
            [pa.array([unit.path] * len(positions), pa.string()), pa.array(positions)], schema=POSITION_DELETE_SCHEMA
        )
        pq.write_table(rows, at, filesystem=fs, compression="zstd")
        return {
            "path": target,
            "records": len(positions),
            "size": fs.get_file_info(at).size,
            "first": int(positions[0]),
            "last": int(positions[-1]),
            "found": found,
            "stale": stale,
        }


# The table property that picks how an upsert commit writes (Iceberg's, read by Spark's MERGE INTO, which
# is what an upsert commit is), its values, and the default: Iceberg's.
MERGE_MODE = "write.merge.mode"
COPY_ON_WRITE, MERGE_ON_READ = "copy-on-write", "merge-on-read"
MERGE_MODES = (COPY_ON_WRITE, MERGE_ON_READ)
# The snapshot summary's count of deletes whose key the table did not hold (each a no-op).
ABSENT_KEY_DELETES = "sinkadmin.absent-key-deletes"
# ... and of keys whose record was older, by the ordering field, than the table's row of the key (not applied).
STALE_RECORDS = "sinkadmin.stale-records"


@dataclass(frozen=True)
class UnitsRun:
    """What an upsert commit's units did: each unit with its outcome (the live files' first), the rows left
    out of each of the commit's own files, and the keys whose record was stale."""

    outcomes: list[tuple[Any, dict[str, Any]]]
    dropped: tuple[tuple[int, ...], ...]
    stale: pa.Array


def _run_units(
    run_units: Callable[[UpsertJob], list[dict[str, Any]]],
    template: UpsertJob,
    live_units: Sequence[Any],
    ordered: Sequence[Any],
    found: Winners,
) -> UnitsRun:
    """Run the units of the table's live files and of the commit's own files (``ordered``), as jobs like
    ``template``: in one job, or, with an ordering field, the live files' first, since a key the table holds
    a later row of leaves the commit's record of it out of its own file too."""
    paths = [f.path for f in ordered]
    if found.orders is None:
        units = [*live_units, *template.own_units(paths, found.dropped, found.sizes)]
        outcomes = run_units(replace(template, units=tuple(units))) if units else []
        return UnitsRun(list(zip(units, outcomes, strict=True)), found.dropped, pa.array([], pa.string()))
    live_outcomes = run_units(replace(template, units=tuple(live_units))) if live_units else []
    stale = pa.array([key for outcome in live_outcomes for key in outcome.get("stale", ())], pa.string())
    dropped = found.dropping(stale)
    own = template.own_units(paths, dropped, found.sizes)
    own_outcomes = run_units(replace(template, units=tuple(own))) if own else []
    return UnitsRun(
        [*zip(live_units, live_outcomes, strict=True), *zip(own, own_outcomes, strict=True)], dropped, stale
    )


# What to do about delete files an upsert cannot read.
COMPACT_DELETES = "compact them into the data files first: rewrite_data_files with the option delete-file-threshold=1"


def _live_tasks(table: Any, table_name: str, row_filter: Any) -> list[Any]:
    """The scan tasks of the table's live data files the filter may match, each with its delete files. Delete
    files an upsert cannot read (another writer's: Flink's equality deletes; a v3 table's deletion vectors are
    Spark's to apply, sinks.iceberg.spark_commits) are refused: the rows they delete would count as live."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    try:
        tasks = list(table.scan(row_filter=row_filter).plan_files())
    except ValueError as exc:
        if "equality deletes" not in str(exc):
            raise
        # (pyiceberg's own refusal: "PyIceberg does not yet support equality deletes".)
        raise ValueError(
            f"{table_name} has equality delete files, which an upsert cannot apply: {COMPACT_DELETES}"
        ) from exc
    for task in tasks:
        for delete_file in task.delete_files:
            if delete_file.content != DataFileContent.POSITION_DELETES or delete_file.file_format != FileFormat.PARQUET:
                raise ValueError(
                    f"{table_name} has delete files an upsert cannot apply ({delete_file.file_path}: "
                    f"{delete_file.content.name.lower()} in {delete_file.file_format.name}; it reads position "
                    f"deletes in Parquet): {COMPACT_DELETES}"
                )
    return tasks


def merge_mode(properties: Mapping[str, str]) -> str:
    mode = properties.get(MERGE_MODE, COPY_ON_WRITE).strip().lower()
    if mode not in MERGE_MODES:
        raise ValueError(f"{MERGE_MODE}={mode!r}: an upsert commit writes {' or '.join(MERGE_MODES)}")
    return mode


class Laps:
    """The time of each phase of a piece of work, from the end of the one before (the first: from its making)."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.phases: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        self.phases[phase] = time.monotonic() - self.began - sum(self.phases.values())

    def __str__(self) -> str:
        return ", ".join(f"{phase} {seconds:.3f} s" for phase, seconds in self.phases.items())


def commit_upserts(
    catalog: Any,
    table_name: str,
    commit: Any,
    ordered: Sequence[Any],
    id_columns: Sequence[str],
    cdc_field: str | None,
    run_units: Any,
    attempts: int = 8,
    ordering_field: str | None = None,
    key_cache: KeyIndexCache | None = None,
    spark: SparkTables | None = None,
) -> CommittedTable:
    """Upsert the commit's files (``ordered``: CommitFiles in stream order) into the table by ``id_columns``,
    in one snapshot, exactly once (as ``sinks.iceberg.tables.commit_to_table`` appends): merge-on-read or
    copy-on-write as the table's ``write.merge.mode`` says. Keys are looked up in the live files' key indexes
    kept in ``key_cache``, if any. A format v3 table's upserts are made through ``spark``
    (``sinks.iceberg.spark_commits``)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, In, IsNull, LessThanOrEqual, Or

    from sinks.iceberg.row_delta import commit_row_delta, position_delete_file
    from sinks.iceberg.spark_commits import through_spark, upserts_through_spark, written_by_spark
    from sinks.iceberg.tables import (
        CommittedTable,
        committed_version,
        data_files,
        describe_data_file,
        snapshot_of_commit,
        upsert_key,
        without_automatic_retries,
    )

    io_properties = file_io_properties(catalog.properties)
    for attempt in range(attempts):
        table = without_automatic_retries(catalog.load_table(table_name))
        existing = snapshot_of_commit(table, commit.connector, commit.commit_id)
        if existing is not None:
            return CommittedTable(existing, committed_version(table))
        # (No columns configured: the table's identifier fields, as the writers found them.)
        id_columns = upsert_key(id_columns, table.schema())
        if not id_columns:
            raise ValueError(f"{table_name} has no identifier fields and no id-columns are configured")
        missing = [c for c in id_columns if table.schema().find_field(c, case_sensitive=True) is None]
        if missing:
            raise ValueError(f"{table_name} has no column {missing[0]!r} (an identifier column of upsert mode)")
        if written_by_spark(table):
            return upserts_through_spark(
                through_spark(spark, table_name),
                catalog,
                table_name,
                commit,
                ordered,
                id_columns,
                cdc_field,
                run_units,
                ordering_field,
            )
        mode = merge_mode(table.properties)
        if mode == MERGE_ON_READ and table.metadata.format_version < 2:
            raise ValueError(
                f"{table_name} is an Iceberg format v1 table, which has no delete files: set its "
                f"{MERGE_MODE}={COPY_ON_WRITE} or upgrade it to format-version 2"
            )
        laps = Laps()
        found = winners([f.path for f in ordered], id_columns, cdc_field, ordering_field, io_properties)
        laps.lap("winners")
        row_filter: Any = AlwaysTrue()
        if len(id_columns) == 1 and 0 < len(found.typed_keys) <= MAX_FILTERED_KEYS:
            # (pyiceberg's In is a pydantic model: mypy reads its fields for its signature.)
            row_filter = In(id_columns[0], found.typed_keys)  # type: ignore[arg-type, call-arg]
            if found.null_key:
                # (A null key matches the rows without one, which a file of nulls only holds: In would prune it.)
                row_filter = Or(row_filter, IsNull(id_columns[0]))  # type: ignore[arg-type, call-arg]
        elif found.integer_keys is not None and len(found.integer_keys):
            # More keys, of an integer column: the files whose bounds cross the keys' span. Keys that arrive
            # in order (a table's auto-increment ids, inserted then updated soon after) touch a few files of a
            # large table; random keys span it all, and nothing is pruned.
            low, high = int(found.integer_keys[0]), int(found.integer_keys[-1])
            at_least = GreaterThanOrEqual(id_columns[0], low)  # type: ignore[arg-type, call-arg]
            at_most = LessThanOrEqual(id_columns[0], high)  # type: ignore[arg-type, call-arg]
            row_filter = And(at_least, at_most)
        live: dict[str, Any] = {}
        live_deletes: dict[str, tuple[str, ...]] = {}
        if len(found.keys):
            for task in _live_tasks(table, table_name, row_filter):
                if task.file.spec_id != table.metadata.default_spec_id and mode == COPY_ON_WRITE:
                    # A rewritten file is described under the current spec with its input's partition.
                    raise ValueError(
                        f"{task.file.file_path} of {table_name} was written under an older partition spec: "
                        "rewrite the table's data files under the current spec before upserting into it"
                    )
                live[task.file.file_path] = task.file
                live_deletes[task.file.file_path] = tuple(sorted(d.file_path for d in task.delete_files))
        laps.lap("planning")
        replaced: list[Any] = []
        added: list[Any] = []
        deletes: list[Any] = []
        kind = PositionDeletes if mode == MERGE_ON_READ else UpsertRewrite
        # (A null key, which an index leaves out, is looked up in the columns, where it matches the rows without
        # a key, as it always has. Integer keys are indexed as numbers, while the live files' entries fit half
        # the cache's budget: beyond it they would be evicted and built again at each commit, which costs more
        # than the columns' lookup, a read and a table of the keys.)
        indexed = key_cache is not None and bool(live) and not found.keys.null_count
        if indexed and found.integer_keys is not None and key_cache is not None:
            rows = sum(int(f.record_count) for f in live.values())
            indexed = rows * INTEGER_ENTRY_BYTES <= key_cache.budget_bytes // 2
        wanted = None
        if indexed:
            wanted = (
                WantedKeys.of(found.keys) if found.integer_keys is None else WantedKeys.of_integers(found.integer_keys)
            )
        template = kind(
            (),
            tuple(id_columns),
            found.keys,
            commit.commit_id,
            found.deleted_keys,
            ordering_field if found.orders is not None else None,
            found.orders,
            found.integer_keys,
            io_properties,
            key_cache if indexed else None,
            wanted,
        )
        ran = _run_units(run_units, template, template.live_units(sorted(live), live_deletes), ordered, found)
        laps.lap("lookups")
        if mode == MERGE_ON_READ:
            added = data_files(
                table, [f for f, d, size in zip(ordered, ran.dropped, found.sizes, strict=True) if len(d) < size]
            )
            described = {d.file_path: d for d in added} | live
            for unit, outcome in ran.outcomes:
                if outcome["path"] is not None:
                    spec_id = table.metadata.default_spec_id if unit.own else live[unit.path].spec_id
                    deletes.append(position_delete_file(outcome, described[unit.path], spec_id))
        else:
            own_kept = []
            for unit, outcome in ran.outcomes:
                if unit.own:
                    continue
                if outcome["path"] is not None:
                    replaced.append(live[unit.path])
                    if outcome["records"]:
                        added.append(describe_data_file(table, outcome["path"], live[unit.path].partition))
            # The commit's own files' units, one per file in ``ordered``'s order.
            own_outcomes = [outcome for unit, outcome in ran.outcomes if unit.own]
            for own_file, outcome in zip(ordered, own_outcomes, strict=True):
                if outcome["path"] is None:
                    own_kept.append(own_file)
                elif outcome["records"]:
                    own_kept.append(replace(own_file, path=outcome["path"]))
            added += data_files(table, own_kept)
        # (The deletes whose key no live file holds; a key whose table row is later than the delete is held.)
        held = {key for _, outcome in ran.outcomes for key in outcome.get("found", ())} | set(ran.stale.to_pylist())
        absent = len(set(found.deleted_keys.to_pylist()) - held)
        if absent:
            log.info(
                "upsert %s on %s: %d delete(s) of keys the table does not hold", commit.commit_id, table_name, absent
            )
        if len(ran.stale):
            log.info(
                "upsert %s on %s: %d record(s) older than the table's row of their key (%s), not applied",
                commit.commit_id,
                table_name,
                len(ran.stale),
                ordering_field,
            )
        failpoint("upsert.before_snapshot")  # (a test's coordinator dies here: files written, no snapshot)
        properties = {
            **commit.summary(),
            **({ABSENT_KEY_DELETES: str(absent)} if absent else {}),
            **({STALE_RECORDS: str(len(ran.stale))} if len(ran.stale) else {}),
        }
        try:
            commit_row_delta(table, properties, replaced, added, deletes)
        except (CommitFailedException, ValidationException):
            # Another writer committed first (a zombie's successor, or the zombie): re-check.
            log.info(
                "upsert %s on %s raced another writer (attempt %d); re-checking",
                commit.commit_id,
                table_name,
                attempt + 1,
            )
            continue
        laps.lap("snapshot")
        log.info(
            "upsert %s on %s (%s): %d key(s), %d live file(s) looked up, %d unit(s); %s",
            commit.commit_id,
            table_name,
            mode,
            len(found.keys),
            len(live),
            len(ran.outcomes),
            laps,
        )
        snapshot = table.current_snapshot()
        assert snapshot is not None
        return CommittedTable(int(snapshot.snapshot_id), committed_version(table))
    raise CommitFailedException(f"could not commit {commit.commit_id} to {table_name} after {attempts} attempts")
