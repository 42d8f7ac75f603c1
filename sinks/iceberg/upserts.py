"""Keyed upserts on Iceberg tables, copy-on-write (``iceberg.tables.upsert-mode-enabled``, ``iceberg.tables.cdc-field``).

The participants write the commit's records to data files as for appends.
The coordinator's commit then, for each table:

1. reads the identifier columns (and the CDC field) of the commit's files, in
   stream order (files by topic, partition and name; rows in offset order):
   the last record of each key wins; a record whose CDC field starts with
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

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from workers.failpoints import failpoint

if TYPE_CHECKING:
    from sinks.iceberg.tables import CommittedTable

log = logging.getLogger(__name__)
KEY_SEPARATOR = "\x1f"
# Bounds-based pruning only for this many keys: an In filter of more costs pyiceberg more than it saves.
MAX_FILTERED_KEYS = 1000


def key_column(rows: pa.Table, id_columns: Sequence[str]) -> pa.Array:
    """Each row's key as text: the identifier column, or the columns joined (a missing column is null)."""
    columns = [
        rows.column(c).cast(pa.string()).combine_chunks()
        if c in rows.column_names
        else pa.nulls(len(rows), pa.string())
        for c in id_columns
    ]
    if len(columns) == 1:
        return columns[0]
    return pc.binary_join_element_wise(*columns, KEY_SEPARATOR, null_handling="replace", null_replacement="\x00")


def deleting(rows: pa.Table, cdc_field: str | None) -> np.ndarray:
    """Rows whose CDC operation deletes their key (it starts with D or d, trimmed, as the Iceberg sink reads it).
    The field may be nested, named by its path (``_cdc.op``, the Iceberg sink's DebeziumTransform's)."""
    column = _nested(rows, cdc_field) if cdc_field else None
    if column is None:
        return np.zeros(len(rows), dtype=bool)
    operations = pc.utf8_upper(pc.utf8_trim_whitespace(column.cast(pa.string())))
    marked = pc.starts_with(operations, "D").fill_null(False)
    return np.asarray(marked.to_numpy(zero_copy_only=False), dtype=bool)


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


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


@dataclass(frozen=True)
class Winners:
    """What the commit's own records come to: per file, the rows that stay; and every key they touch."""

    dropped: tuple[tuple[int, ...], ...]  # per incoming file (in order), the rows to leave out
    keys: pa.Array  # every key the commit writes or deletes
    typed_keys: tuple[Any, ...]  # the same keys as the identifier column's values (one column only)


def winners(paths: Sequence[str], id_columns: Sequence[str], cdc_field: str | None) -> Winners:
    """The last record of each key across the commit's files (in the order given), and the keys."""
    columns = list(dict.fromkeys([*id_columns, *([cdc_field] if cdc_field else [])]))
    keys: list[pa.Array] = []
    deletes: list[np.ndarray] = []
    typed: list[Any] = []
    sizes = []
    for path in paths:
        fs, at = _filesystem(path)
        names = pq.read_schema(at, filesystem=fs).names
        present = list(dict.fromkeys(c.split(".")[0] for c in columns if c.split(".")[0] in names))
        rows = pq.read_table(at, columns=present, filesystem=fs)
        keys.append(key_column(rows, id_columns))
        deletes.append(deleting(rows, cdc_field))
        if len(id_columns) == 1 and id_columns[0] in rows.column_names:
            typed.extend(rows.column(id_columns[0]).to_pylist())
        sizes.append(len(rows))
    if not paths:
        return Winners((), pa.array([], pa.string()), ())
    every = pa.concat_arrays(keys) if keys else pa.array([], pa.string())
    position = np.arange(len(every), dtype=np.int64)
    last = pa.table({"key": every, "at": position}).group_by("key", use_threads=False).aggregate([("at", "max")])
    keep = np.zeros(len(every), dtype=bool)
    keep[last.column("at_max").to_numpy()] = True
    keep &= ~np.concatenate(deletes) if deletes else keep
    dropped = []
    start = 0
    for size in sizes:
        dropped.append(tuple(np.nonzero(~keep[start : start + size])[0].tolist()))
        start += size
    distinct = last.column("key").combine_chunks()
    typed_keys = tuple(dict.fromkeys(v for v in typed if v is not None)) if len(id_columns) == 1 else ()
    return Winners(tuple(dropped), distinct, typed_keys)


@dataclass(frozen=True)
class RewriteUnit:
    """One file to rewrite: a live file of the table (rows of the commit's keys go) or one of the commit's own
    files (the ``dropped`` rows go)."""

    path: str
    own: bool
    dropped: tuple[int, ...] = ()


@dataclass(frozen=True)
class UpsertRewrite:
    """The Spark job of an upsert commit: Spark task n rewrites ``units[n]`` (pickled to Spark's Python workers)."""

    units: tuple[RewriteUnit, ...]
    id_columns: tuple[str, ...]
    keys: pa.Array
    commit_id: str

    @property
    def count(self) -> int:
        return len(self.units)

    def run_unit(self, index: int) -> dict[str, Any]:
        """``{"path", "records"}`` of the rewritten file (records 0: nothing stays, no file), or ``{"path": None}``
        when the file holds none of the keys and stays as it is."""
        failpoint("upsert.rewrite")  # (a test's executor dies here: some files rewritten, no snapshot)
        unit = self.units[index]
        fs, at = _filesystem(unit.path)
        if unit.own:
            if not unit.dropped:
                return {"path": None}
            rows = pq.read_table(at, filesystem=fs)
            keep = np.ones(len(rows), dtype=bool)
            keep[list(unit.dropped)] = False
        else:
            present = [c for c in self.id_columns if c in pq.read_schema(at, filesystem=fs).names]
            hit = pc.is_in(key_column(pq.read_table(at, columns=present, filesystem=fs), self.id_columns), self.keys)
            mask = np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
            if not mask.any():
                return {"path": None}
            rows = pq.read_table(at, filesystem=fs)
            keep = ~mask
        kept = rows.filter(pa.array(keep))
        if len(kept) == 0:
            return {"path": unit.path, "records": 0}
        stem = at.rsplit("/", 1)[0] + "/" + at.rsplit("/", 1)[1].removesuffix(".parquet")
        target = f"{stem.split('-upsert-')[0]}-upsert-{self.commit_id}-{uuid.uuid4().hex[:8]}.parquet"
        pq.write_table(kept, target, filesystem=fs, compression="zstd")
        scheme = unit.path.split("://", 1)[0] + "://" if "://" in unit.path else ""
        prefix = unit.path[: len(unit.path) - len(at)] if scheme else ""
        return {"path": f"{prefix}{target}", "records": len(kept)}


def commit_upserts(
    catalog: Any,
    table_name: str,
    commit: Any,
    ordered: Sequence[Any],
    id_columns: Sequence[str],
    cdc_field: str | None,
    run_units: Any,
    attempts: int = 8,
) -> CommittedTable:
    """Upsert the commit's files (``ordered``: CommitFiles in stream order) into the table by ``id_columns``,
    in one OVERWRITE snapshot, exactly once (as ``sinks.iceberg.tables.commit_to_table`` appends)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException
    from pyiceberg.expressions import AlwaysTrue, In
    from pyiceberg.table import TableProperties
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    from sinks.iceberg.tables import (
        CommittedTable,
        committed_version,
        data_files,
        describe_data_file,
        snapshot_of_commit,
        without_automatic_retries,
    )

    for attempt in range(attempts):
        table = without_automatic_retries(catalog.load_table(table_name))
        existing = snapshot_of_commit(table, commit.connector, commit.commit_id)
        if existing is not None:
            return CommittedTable(existing, committed_version(table))
        missing = [c for c in id_columns if table.schema().find_field(c, case_sensitive=True) is None]
        if missing:
            raise ValueError(f"{table_name} has no column {missing[0]!r} (an identifier column of upsert mode)")
        found = winners([f.path for f in ordered], id_columns, cdc_field)
        row_filter: Any = AlwaysTrue()
        if len(id_columns) == 1 and 0 < len(found.typed_keys) <= MAX_FILTERED_KEYS:
            # (pyiceberg's In is a pydantic model: mypy reads its fields for its signature.)
            row_filter = In(id_columns[0], found.typed_keys)  # type: ignore[arg-type, call-arg]
        live = {}
        if len(found.keys):
            for task in table.scan(row_filter=row_filter).plan_files():
                if task.delete_files:
                    raise ValueError(
                        f"{table_name} has delete files (written by another engine): upsert mode rewrites data "
                        "files and would bring deleted rows back; compact the table's deletes first"
                    )
                if task.file.spec_id != table.metadata.default_spec_id:
                    # A rewritten file is described under the current spec with its input's partition.
                    raise ValueError(
                        f"{task.file.file_path} of {table_name} was written under an older partition spec: "
                        "rewrite the table's data files under the current spec before upserting into it"
                    )
                live[task.file.file_path] = task.file
        units = tuple(RewriteUnit(path, own=False) for path in sorted(live)) + tuple(
            RewriteUnit(f.path, own=True, dropped=dropped) for f, dropped in zip(ordered, found.dropped, strict=True)
        )
        job = UpsertRewrite(units, tuple(id_columns), found.keys, commit.commit_id)
        outcomes = run_units(job) if units else []
        # The live files' units come first, then the commit's own files' in ``ordered``'s order.
        replaced, added = [], []
        for unit, outcome in zip(units[: len(live)], outcomes[: len(live)], strict=True):
            if outcome["path"] is not None:
                replaced.append(live[unit.path])
                if outcome["records"]:
                    added.append(describe_data_file(table, outcome["path"], live[unit.path].partition))
        own_kept = []
        for own, outcome in zip(ordered, outcomes[len(live) :], strict=True):
            if outcome["path"] is None:
                own_kept.append(own)
            elif outcome["records"]:
                own_kept.append(replace(own, path=outcome["path"]))
        failpoint("upsert.before_snapshot")  # (a test's coordinator dies here: files rewritten, no snapshot)
        added += data_files(table, own_kept)
        try:
            with table.transaction() as tx:
                if tx.table_metadata.name_mapping() is None:
                    mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
                    tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
                overwrite = _OverwriteFiles(
                    operation=Operation.OVERWRITE if replaced else Operation.APPEND,
                    transaction=tx,
                    io=table.io,
                    snapshot_properties=commit.summary(),
                )
                with overwrite:
                    for data_file in replaced:
                        overwrite.delete_data_file(data_file)
                    for data_file in added:
                        overwrite.append_data_file(data_file)
        except (CommitFailedException, ValidationException):
            # Another writer committed first (a zombie's successor, or the zombie): re-check.
            log.info(
                "upsert %s on %s raced another writer (attempt %d); re-checking",
                commit.commit_id,
                table_name,
                attempt + 1,
            )
            continue
        snapshot = table.current_snapshot()
        assert snapshot is not None
        return CommittedTable(int(snapshot.snapshot_id), committed_version(table))
    raise CommitFailedException(f"could not commit {commit.commit_id} to {table_name} after {attempts} attempts")
