"""A connector's chain of transforms applied by the sink's decoder to columns, not by the tasks record by record.

For a chain ``TransformChain.columnar`` takes (decision 012): Filters of records
as consumed first, if any, which drop records by their topic, headers or null
value before the values are read (``_unfiltered``); a Debezium transformation,
which the JSON decoder applies as it reads each event
(``JsonDecoder``'s ``unwrap``), then transformations that only move, drop or
insert the value's fields (Kafka's InsertField$Value and ReplaceField$Value,
the Iceberg sink's CopyValue), or those alone. Each of the table's columns is
traced back through them (``ColumnarChain.sources``), then read from the
value's field it comes from (a renamed field under its old name, a copied one
from its source), or filled from the record (its topic, partition, offset or
timestamp, or InsertField's static value, as the plain decoder reads the JSON
the transformation writes), or null (a field dropped). No record is parsed
into Python, transformed and written as JSON again.

A column that may come from one of several fields, a record at a time (``a``
renamed to ``b`` beside a ``b`` of the value's own: the later in the value
wins), reads each, and a record whose value's text holds more than one of them
goes through the chain. So do the records the decoder finds bad (the chain may
fail on one first, with its own reason), a record without the timestamp
InsertField would insert, and every record of a table one of whose columns
cannot be traced (a field inserted, copied or added by the unwrap to every
value, beside another it may be) or must hold a field the chain drops: through
the chain itself, then the plain decoder, as the tasks' stage and the sink
would take them. So each record comes to the same row, or the same bad record
with the same reason, either way (tests/test_chain_decoder.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.config import SinkConfig
from connectors.smt import ConnectRecord, TransformChain
from connectors.smt.record import Source
from workers.json_decoder import Decoded, JsonDecoder, in_order
from workers.json_text import json_text, parse_json
from workers.staging import RecordChunk
from workers.transformed import RecordTransformer


class ChainDecoder:
    """The decoder of a table's columns that applies the connector's chain (``SinkConfig.decoder_transforms``)
    to them, in the form ``SinkConfig.decoder_columnar`` gives."""

    def __init__(self, data_schema: pa.Schema, config: SinkConfig) -> None:
        chain, columnar = config.decoder_transforms, config.decoder_columnar
        assert chain is not None and columnar is not None, "a chain the sink's decoders apply"
        self.data_schema = data_schema
        # The whole chain, record by record, then the plain decoder: for what the columns cannot take.
        self._chain = RecordTransformer(config, chain)
        # Filters of records as consumed, which drop them before their values are read.
        self._filters = TransformChain(columnar.filters) if columnar.filters else None
        self._plain = JsonDecoder(data_schema)
        sources = columnar.sources(data_schema.names)
        # Each column read from a field of the value (under the field's name; from any one of several, a record
        # at a time), filled from the record (what InsertField inserts), or null.
        self._read: dict[str, tuple[str, ...]] = {}
        self._meta: dict[str, Source] = {}
        # The keys of the fields a column may be read from instead of another source, as the value's text has them,
        # and how many of them it may hold: a record whose value holds more (or an escape, which may spell one)
        # goes through the chain, which takes the one later in the value.
        self._either: list[tuple[list[bytes], int]] = []
        for name, source in (sources or {}).items():
            if source.meta is not None:
                self._meta[name] = source
            elif source.fields:
                self._read[name] = source.fields
            if len(source.fields) + (source.meta is not None) > 1:
                self._either.append(([json_text(f) for f in source.fields], int(source.meta is None)))
        # A key with a character JSON may escape otherwise than as ``\u`` (``x\/y``): any escape may spell it.
        self._escapes = (
            b"\\"
            if any(set(key[1:-1].decode()) & set('/"\\\b\f\n\r\t') for keys, _ in self._either for key in keys)
            else b"\\u"
        )
        # Each field read, with its column's type (one of several a column may come from as nullable: a record has
        # one at most); a field copied to two columns is read once, if they read it alike.
        reads = [
            (
                read,
                data_schema.field(name)
                .with_name(read)
                .with_nullable(data_schema.field(name).nullable or len(fields) > 1),
            )
            for name, fields in self._read.items()
            for read in fields
        ]
        fields_read = dict(reads)
        self._required = [
            name for name, fields in self._read.items() if len(fields) > 1 and not data_schema.field(name).nullable
        ]
        self._absent = [name for name in data_schema.names if name not in self._read and name not in self._meta]
        # (The reader the plain decoder of the table's columns uses: arrow-rs's and Arrow C++'s take different
        # values for some types, a fraction into an integer column, a numeric string into a number column.)
        cpp_reader = not self._plain.rust_reader
        self.columnar = (
            sources is not None
            and all(fields_read[read] == field for read, field in reads)
            and not any(not data_schema.field(name).nullable for name in self._absent)
        )
        self._inner: JsonDecoder | None = None
        self._meta_decoders: dict[str, JsonDecoder] = {}
        if self.columnar:
            inner_schema = pa.schema(list(fields_read.values()))
            unwrap_chain = TransformChain((columnar.unwrap_step,)) if columnar.unwrap_step is not None else None
            self._inner = JsonDecoder(
                inner_schema,
                unwrap=columnar.unwrap,
                fallback=RecordTransformer(config, unwrap_chain).transform_values if unwrap_chain else None,
                cpp_reader=cpp_reader,
            )
            # (Each column InsertField fills, read from the JSON it writes by a decoder of its own.)
            self._meta_decoders = {
                name: JsonDecoder(pa.schema([data_schema.field(name)]), cpp_reader=cpp_reader) for name in self._meta
            }

    def decode(self, chunk: RecordChunk) -> Decoded:
        """The chunk's rows, and which records are bad or skipped, as the chain then the plain decoder make them."""
        if self._filters is not None:
            kept = self._unfiltered(chunk)
            if len(kept) < len(chunk):
                return self._decode(chunk.take(kept)).placed(kept, len(chunk) - len(kept), self.data_schema)
        return self._decode(chunk)

    def _unfiltered(self, chunk: RecordChunk) -> list[int]:
        """The positions of the records the chain's leading Filters keep. A record they would drop as consumed (its
        topic, its headers, a null value: no value read) is dropped once read as the tasks' stage reads it, and
        the Filters still drop it. One whose key or value its converter cannot read is kept: the decoder finds it
        bad, and the chain says why, as the stage does."""
        filters = self._filters
        assert filters is not None

        def dropped(null: bool, headers: list[tuple[str, Any]] | None) -> bool:
            """Whether the Filters drop a record of the chunk as consumed: by its topic, headers and null value."""
            consumed = ConnectRecord(chunk.topic, chunk.partition, 0, None, None, None if null else b"", headers or [])
            return filters.apply(consumed) is None

        # (Records without headers are dropped or not by their null value alone: tested once for each.)
        plain = {null: dropped(null, None) for null in (False, True)}
        kept: list[int] = []
        for i, value in enumerate(chunk.values):
            if chunk.errors[i] is None:
                null = value is None or value.strip(b" \t\n\r") == b"null"
                headers = chunk.headers[i] if chunk.headers else None
                if plain[null] if not headers else dropped(null, list(headers)):
                    try:
                        if filters.apply(self._chain.record(chunk, i)) is None:
                            continue
                    except ValueError:
                        pass
            kept.append(i)
        return kept

    def _decode(self, chunk: RecordChunk) -> Decoded:
        if self._inner is None:
            return self._through_chain(chunk, list(range(len(chunk))))
        read = self._inner.decode(chunk.values, chunk.errors, chunk.keys, chunk.offsets)
        deferred = [p for p, _ in read.bad]
        positions = read.positions
        columns = {
            name: reads_column(read.columns, reads) if len(reads) > 1 else read.columns.column(reads[0])
            for name, reads in self._read.items()
        }
        if self._either and positions:
            unclear = self._unclear([chunk.values[p] or b"" for p in positions], read.columns)
            for name in self._required:
                # (A required column none of whose fields a record has: the chain says why it is bad.)
                unclear |= columns[name].is_null().to_numpy(zero_copy_only=False)
            positions, columns = self._kept(positions, columns, np.flatnonzero(~unclear).tolist(), deferred)
        if self._meta and positions:
            filled, told = self._filled(chunk, positions)
            positions, columns = self._kept(positions, columns | filled, told, deferred)
        n = len(positions)
        arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in self.data_schema]
        parts = [pa.Table.from_arrays(arrays, schema=self.data_schema)]
        at = list(positions)
        bad: list[tuple[int, str]] = []
        skipped = read.skipped
        if deferred:
            fallback = self._through_chain(chunk, sorted(deferred))
            parts.append(fallback.columns)
            at += fallback.positions
            bad = fallback.bad
            skipped += fallback.skipped
        table, at = in_order(parts, at)
        return Decoded(table, at, bad, skipped)

    def _unclear(self, values: list[bytes], read: pa.Table) -> np.ndarray:
        """Which values may hold more of the fields a column may come from than the columns tell apart, or an
        escape (which may spell one): those are found in the values' text, each key searched for once in it all,
        and the values holding the rarer keys of a column's (``read``: the fields as read) looked at one by one."""
        n = len(values)
        unclear = np.zeros(n, dtype=bool)
        text = b"\n".join(values)
        ends = np.cumsum(np.fromiter(map(len, values), np.int64, n) + 1).tolist()

        def holding(key: bytes) -> list[int]:
            """The values whose text holds ``key``."""
            found: list[int] = []
            at = text.find(key)
            while at >= 0:
                found.append(bisect.bisect_right(ends, at))
                at = text.find(key, ends[found[-1]])
            return found

        # An escape: a backslash (found as one character, several times faster than two), before a ``u`` unless a
        # key may be spelled with others (``_escapes``).
        at = text.find(b"\\")
        while at >= 0:
            if text[at : at + len(self._escapes)] == self._escapes:
                i = bisect.bisect_right(ends, at)
                unclear[i] = True
                at = text.find(b"\\", ends[i])
            else:
                at = text.find(b"\\", at + 2)
        for keys, most in self._either:
            # (More than ``most`` of a column's keys in a value: if ``most`` is one, the value holds one of them
            # besides any one, so the values holding the others need a look: all but the one read the most.)
            rare = keys if most == 0 else sorted(keys, key=lambda key: -read.column(parse_json(key)).null_count)[:-1]
            for i in sorted({i for key in rare for i in holding(key)}):
                unclear[i] |= most == 0 or sum(key in values[i] for key in keys) > most
        return unclear

    @staticmethod
    def _kept(
        positions: list[int], columns: dict[str, pa.ChunkedArray], told: list[int], deferred: list[int]
    ) -> tuple[list[int], dict[str, pa.ChunkedArray]]:
        """``positions`` and the rows of ``columns`` at the indices ``told``; the other positions added to
        ``deferred``."""
        if len(told) == len(positions):
            return positions, columns
        taken = np.zeros(len(positions), dtype=bool)
        taken[told] = True
        deferred += np.asarray(positions, dtype=np.int64)[~taken].tolist()
        at = pa.array(told, pa.int64())
        return [positions[i] for i in told], {name: column.take(at) for name, column in columns.items()}

    def _filled(self, chunk: RecordChunk, positions: Sequence[int]) -> tuple[dict[str, pa.Array], list[int]]:
        """The columns InsertField fills from the records at ``positions``, as the plain decoder reads the JSON it
        would have written (so a value that does not fit its column does not either way), and the indices of the
        positions that took them: not a record without the timestamp to insert, nor one a value of which does not
        fit. A record's offset or timestamp into an integer or double column is cast (as the reader reads a JSON
        integer: a value beyond a narrower column's range does not fit); the topic, partition and static value are
        read once for the chunk."""
        n = len(positions)
        took = np.ones(n, dtype=bool)
        filled: dict[str, pa.Array] = {}
        for name, source in self._meta.items():
            field = self.data_schema.field(name)
            decoder = self._meta_decoders[name]
            if source.meta in ("offset", "timestamp"):
                numbers = chunk.offsets if source.meta == "offset" else chunk.timestamps
                read = pa.array([numbers[p] for p in positions], pa.int64())
                # (No timestamp: the chain inserts none, and the value keeps its own field.)
                took &= read.is_valid().to_numpy(zero_copy_only=False)
                filled[name] = _numbers_read(read, field.type, decoder, took)
                continue
            value: str | int | None = (
                chunk.topic
                if source.meta == "topic"
                else chunk.partition
                if source.meta == "partition"
                else source.value
            )
            once = decoder.decode([f"{{{_json(name)}:{_json(value)}}}".encode()], [None])
            if once.bad:
                took[:] = False
                filled[name] = pa.nulls(n, field.type)
            else:
                filled[name] = once.columns.column(0).take(pa.array(np.zeros(n, np.int64)))
        return filled, np.flatnonzero(took).tolist()

    def _through_chain(self, chunk: RecordChunk, positions: list[int]) -> Decoded:
        """The records at ``positions`` through the chain record by record, then the plain decoder, in the table's
        schema."""
        kept, values, errors = self._chain.transform_chunk(chunk.take(positions))
        return self._plain.decode(values, errors).placed(
            [positions[k] for k in kept], len(positions) - len(kept), self.data_schema
        )


def _json(value: str | int | None) -> str:
    return json_text(value).decode()


def reads_column(table: pa.Table, reads: Sequence[str]) -> pa.ChunkedArray:
    """The column read from whichever of the fields ``reads`` a record has (it has one at most)."""
    return pc.coalesce(*(table.column(read) for read in reads))


def _numbers_read(numbers: pa.Int64Array, arrow_type: pa.DataType, decoder: JsonDecoder, took: np.ndarray) -> pa.Array:
    """Integers (a record's offset or timestamp, null for none) as the decoder reads them from JSON into a column
    of ``arrow_type`` (``decoder``'s one column): cast into an integer column they fit, or a double; read from
    their JSON otherwise. ``took`` is cleared where one does not fit."""
    if pa.types.is_signed_integer(arrow_type):
        bounds = np.iinfo(arrow_type.to_pandas_dtype())
        values = numbers.fill_null(0).to_numpy()
        fits = (values >= bounds.min) & (values <= bounds.max)
        took &= fits
        return pa.array(np.where(fits, values, 0).astype(arrow_type.to_pandas_dtype()), arrow_type, mask=~fits)
    if pa.types.is_float64(arrow_type):
        return numbers.cast(arrow_type, safe=False)  # (rounded to the nearest double, as the reader parses one)
    lines = [b"{%s:%d}" % (json_text(decoder.data_schema.names[0]), v) for v in numbers.fill_null(0).to_pylist()]
    decoded = decoder.decode(lines, [None] * len(lines))
    index = np.full(len(lines), -1, dtype=np.int64)
    index[decoded.positions] = np.arange(len(decoded.positions))
    took &= index >= 0
    return decoded.columns.column(0).take(pa.array(index, mask=index < 0))
