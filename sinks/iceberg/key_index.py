"""Each data file's keys, indexed once and kept on local disk, for the key lookups of upsert commits
(decision 020).

An upsert commit finds the rows its keys replace in the table's live data files (``sinks.iceberg.upserts``).
Keys that arrive in no order (UUIDs) touch every file, so without an index each commit reads the identifier
columns of the whole table and hashes them against its keys: the cost grows with the table, not the commit.

A data file never changes once written (Iceberg's files are immutable, and named uniquely), so what its keys
are is known for good the first time it is read. This cache keeps, per data file, its keys sorted by their
64-bit hash, with each key's row position: a commit's lookup in it is a binary search of the commit's hashes,
then an exact comparison of the keys whose hashes match (a hash collision never matches a wrong row). Integer
keys are their own hashes: their entry holds the values, and a match needs no comparison. The entry is an
Arrow IPC file, memory-mapped: only the pages of the keys compared are read.

It is a cache, not state: an entry is checked against the data file's path, identifier columns and row count
before use, and anything missing, stale, torn or unreadable is rebuilt from the data file. Deletes are not in
it (a position delete file leaves its data file as it was): the commit subtracts them as before. Entries are
evicted oldest-used first beyond a size budget; those of files compaction replaced are never used again, and
go that way. The units that use it run where Spark runs them, so each machine keeps its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import ipc

log = logging.getLogger(__name__)

# The entries' layout: a change of it (or of how keys are hashed) changes the version, and entries of another
# version are rebuilt. (How a key is written as text is the ``rendering`` an entry is checked against too.)
VERSION = "2"
SUFFIX = ".keys.arrow"
PARTIAL = ".partial-"
# What an entry of integer keys holds per row: the key and its position, 8 bytes each.
INTEGER_ENTRY_BYTES = 16
# A partial entry older than this was left by a process that died writing it.
ABANDONED_SECONDS = 3600


def key_hashes(keys: pa.Array) -> np.ndarray:
    """Each key's 64-bit MurmurHash3 (x64, 128-bit variant's first half) of its bytes (text that is not valid
    UTF-8 included, as another engine may have written it), as int64. No key may be null."""
    raw = keys.cast(pa.binary()).to_pylist()
    return np.fromiter((mmh3.hash64(key)[0] for key in raw), dtype=np.int64, count=len(keys))


@dataclass(frozen=True)
class FileKeys:
    """A data file's keys (nulls left out: a row without a key is never looked up), sorted by ``hashes``, each
    with its row ``positions`` in the file. Integer keys are their own hashes: ``keys`` is then None, and a
    match of ``hashes`` is a match of the keys."""

    hashes: np.ndarray  # int64, ascending
    positions: np.ndarray  # int64, aligned with hashes
    keys: pa.Array | None  # string, aligned with hashes; None: integer keys, ``hashes`` themselves

    @classmethod
    def of(cls, keys: pa.Array) -> FileKeys:
        """The index of a file whose rows' keys are ``keys`` (in row order)."""
        present = _present(keys)
        valid = keys.take(pa.array(present))
        hashes = key_hashes(valid)
        order = np.argsort(hashes, kind="stable")
        return cls(hashes[order], present[order].astype(np.int64), valid.take(pa.array(order)))

    @classmethod
    def of_integers(cls, column: pa.Array) -> FileKeys:
        """The index of a file whose one identifier column, of an integer type that int64 holds, is ``column``."""
        present = _present(column)
        values = column.take(pa.array(present)).cast(pa.int64()).to_numpy()
        order = np.argsort(values, kind="stable")
        return cls(values[order], present[order].astype(np.int64), None)

    def where(self, wanted: WantedKeys) -> tuple[np.ndarray, pa.Array]:
        """The positions of the file's rows whose key is one of ``wanted``'s, ascending, and those rows' keys
        as text (aligned with the positions)."""
        if (self.keys is None) != (wanted.keys is None):
            raise ValueError("integer keys are looked up in an index of integer keys, text keys in one of text")
        if len(self.hashes) < len(wanted.hashes) and wanted.distinct:
            # A file smaller than the commit: each of its hashes is searched among the wanted ones, which are
            # distinct, so a row matches one wanted key at most.
            at = np.minimum(np.searchsorted(wanted.hashes, self.hashes), len(wanted.hashes) - 1)
            rows = np.nonzero(wanted.hashes[at] == self.hashes)[0] if len(wanted.hashes) else at[:0]
            which = at[rows]
        else:
            # Each wanted hash's place among the file's (the wanted ones sorted: the search walks the file's
            # once); for those found there, the run of equal hashes from it (one row, but for a collision or a
            # key the file holds more than once).
            size = len(self.hashes)
            first = np.searchsorted(self.hashes, wanted.hashes, side="left")
            found = np.nonzero(self.hashes[np.minimum(first, size - 1)] == wanted.hashes)[0] if size else first[:0]
            ends = np.searchsorted(self.hashes, wanted.hashes[found], side="right")
            counts = ends - first[found]
            which = np.repeat(found, counts)
            # (Each run's rows: its start, plus 0, 1, ... within the run.)
            rows = np.repeat(first[found] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        # (``which``: the place among the wanted hashes of each row's match.)
        if self.keys is None or wanted.keys is None or wanted.order is None:
            # (Integers: the hash is the key. Their text is Arrow's cast, as ``upserts.key_text`` writes it.)
            positions = self.positions[rows]
            order = np.argsort(positions, kind="stable")
            return positions[order], pa.array(self.hashes[rows[order]]).cast(pa.string())
        # Only the rows whose keys are equal, not just their hashes.
        equal = pc.equal(self.keys.take(pa.array(rows)), wanted.keys.take(pa.array(wanted.order[which])))
        matched = rows[np.asarray(equal.to_numpy(zero_copy_only=False), dtype=bool)]
        positions = self.positions[matched]
        order = np.argsort(positions, kind="stable")
        return positions[order], self.keys.take(pa.array(matched[order]))


def _present(keys: pa.Array) -> np.ndarray:
    return np.nonzero(np.asarray(keys.is_valid().to_numpy(zero_copy_only=False), dtype=bool))[0]


@dataclass(frozen=True)
class WantedKeys:
    """A commit's keys, looked up in the files' indexes: their ``hashes``, sorted, and the ``order`` that sorts
    the keys by them (``keys.take(order)`` is aligned with ``hashes``); ``distinct`` when no two share a hash.
    Made once per commit. Integer keys are their own hashes, sorted already (``keys`` and ``order`` None)."""

    keys: pa.Array | None
    hashes: np.ndarray
    order: np.ndarray | None
    distinct: bool

    @classmethod
    def of(cls, keys: pa.Array) -> WantedKeys:
        hashes = key_hashes(keys)
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        return cls(keys, hashes, order, not bool(np.any(hashes[1:] == hashes[:-1])))

    @classmethod
    def of_integers(cls, keys: np.ndarray) -> WantedKeys:
        """Integer keys, distinct and sorted (``upserts.Winners.integer_keys``)."""
        return cls(None, keys, None, True)


# The cache directories this process could not write to (a path that the coordinator's settings name but a
# Spark executor's machine lacks, a disk that is full or read-only): no index is built for them again.
_UNWRITABLE: set[str] = set()


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


@dataclass(frozen=True)
class KeyIndexCache:
    """The cache's ``directory`` on the machine the lookups run on, and its budget in bytes."""

    directory: str
    budget_bytes: int

    def entry(self, data_file: str, id_columns: Sequence[str], rendering: str = "", integers: bool = False) -> Path:
        kind = ["integers"] if integers else []  # (a file's entries of both kinds are two entries)
        name = hashlib.sha256("\x1f".join([data_file, *id_columns, rendering, *kind]).encode()).hexdigest()[:40]
        return Path(self.directory) / f"{name}{SUFFIX}"

    def file_keys(
        self,
        data_file: str,
        id_columns: Sequence[str],
        rows: int,
        read_keys: Callable[[], pa.Array],
        rendering: str = "",
        integers: bool = False,
    ) -> FileKeys | None:
        """The index of the data file at ``data_file`` (``rows`` rows), from its entry, or built from its keys
        (``read_keys``: each row's key as text, in row order; with ``integers``, its one identifier column, of
        an integer type) and kept. ``rendering`` says how that text was made (the columns' types, the code and
        library that wrote them): an entry of another is stale.

        None where the directory cannot be written (this process found it so before): an index kept nowhere
        would cost its building at every commit, more than looking the keys up in the file."""
        if self.directory in _UNWRITABLE:
            return None
        entry = self.entry(data_file, id_columns, rendering, integers)
        identity = {
            "version": VERSION,
            "data_file": data_file,
            "id_columns": "\x1f".join(id_columns),
            "rendering": rendering,
            "keys": "integers" if integers else "text",
            "rows": str(rows),
        }
        found = self._load(entry, identity)
        if found is not None:
            return found
        keys = read_keys()
        if len(keys) != rows:
            raise ValueError(f"{data_file}: {len(keys)} keys read for {rows} rows")
        built = FileKeys.of_integers(keys) if integers else FileKeys.of(keys)
        self._keep(entry, built, identity)
        return built

    def _load(self, entry: Path, identity: dict[str, str]) -> FileKeys | None:
        """The entry, if it is the index ``identity`` describes (else None: it is rebuilt)."""
        try:
            table = ipc.open_file(pa.memory_map(str(entry))).read_all()
            meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
            if meta != identity:
                log.info("key index entry %s is not that of %s now: rebuilt", entry, identity["data_file"])
                return None
            # (One record batch, whose columns are views of the mapped file: nothing is copied, and only the
            # pages a lookup touches are read.)
            hashes, positions = (_one_chunk(table.column(name)) for name in ("hash", "position"))
            keys = _one_chunk(table.column("key")) if "key" in table.schema.names else None
            os.utime(entry)  # (used: evicted last)
        except FileNotFoundError:
            return None
        except (OSError, KeyError, UnicodeDecodeError, pa.ArrowException) as exc:
            log.info("key index entry %s is unreadable (%s): rebuilt", entry, exc)
            return None
        return FileKeys(hashes.to_numpy(), positions.to_numpy(), keys)

    def _keep(self, entry: Path, keys: FileKeys, identity: dict[str, str]) -> None:
        """Write the entry whole under another name, then rename it into place (a reader never sees a torn
        one), and evict beyond the budget. A cache that cannot be written is only not kept."""
        columns = {"hash": keys.hashes, "position": keys.positions}
        table = pa.table(columns if keys.keys is None else {**columns, "key": keys.keys})
        table = table.replace_schema_metadata(identity)
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(dir=entry.parent, prefix=PARTIAL)
            try:
                with os.fdopen(fd, "wb") as out, ipc.new_file(out, table.schema) as writer:
                    writer.write_table(table)
                os.replace(partial, entry)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(partial)
                raise
        except OSError as exc:
            _UNWRITABLE.add(self.directory)
            log.warning(
                "key indexes cannot be kept in %s (%s): this process looks keys up in the data files instead",
                self.directory,
                exc,
            )
            return
        try:
            self.evict()
        except OSError as exc:  # (a cache that cannot be trimmed fails no commit)
            log.warning("key indexes in %s not evicted: %s", self.directory, exc)

    def evict(self) -> None:
        """Remove entries, least recently used first, until the rest fit the budget; and partial ones that a
        process which died writing them left. An entry that cannot be removed (another user's) is passed."""
        entries = []
        now = time.time()
        for found in os.scandir(self.directory):
            try:
                if found.name.endswith(SUFFIX) and found.is_file(follow_symlinks=False):
                    stat = found.stat()
                    entries.append((stat.st_mtime, stat.st_size, found.path))
                elif found.name.startswith(PARTIAL) and now - found.stat().st_mtime > ABANDONED_SECONDS:
                    os.unlink(found.path)
            except OSError:
                continue
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.budget_bytes:
                break
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            total -= size
