"""The JSON decoder every sink and both data planes share: JSON objects to Arrow columns.

With ``sinkadmin.writer=spark`` (the default) Spark's Python workers run it
over each staged file (``workers.spark_writer``); with ``arrow`` each
participant runs it as it consumes, with no JVM. Either way the same records
give the same rows and the same bad-record decisions, on every sink. Values
are plain JSON, the payload of Kafka Connect's schema envelope, or Avro
(decoded to JSON by the participant while staging).

Two JSON readers decode plain JSON. Into columns of boolean, integer,
floating-point and string types (and structs and lists of them: all that
schema inference makes from plain JSON), arrow-rs's reader (through arro3),
several times faster than Arrow C++'s (bench/spark_decoding.py). Neither
converts all that the Iceberg sink's RecordConverter converts: a number,
boolean, object or array into a string column (its text), text into a boolean
column (Java's ``parseBoolean``) or a number column (parsed as Java parses
it), a number with a fraction into an integer column (truncated toward zero,
Java's ``longValue()``), text into a decimal column (rounded half up to its
scale). A chunk they refuse for a value of another type is read again
with each such value converted (``_as_converted``, by ``json_values``'s
conversions); what does not convert (an overflow, text that is no number, a
boolean for a number...) fails. Arrow C++'s
reader, stricter on both, serves columns of date, timestamp or decimal types
(arrow-rs would take a number into a timestamp column as microseconds, Kafka
Connect takes milliseconds) and schema evolution, which needs its typing of
fields the columns lack. It takes only text in a timestamp or date column: a
chunk with a number there is read again with that field as a number, epoch
milliseconds or days, as the RecordConverter reads one (``_read_cpp``): a long,
or a double truncated toward zero when one has a fraction or an exponent.

Columns of the types neither reader reads from JSON (UUID, binary, fixed,
time and map) are converted by Python (``json_values``): a UUID, binary or
fixed column from the text the readers read for it; a column with a time or
map anywhere within it from each record parsed again. As the Iceberg sink's
RecordConverter converts them: a UUID from its text, binary
and fixed from base64 text, a time from ISO-8601 text or milliseconds since
midnight, a map from an object. Only tables with such columns pay for it.

Undecodable records are found without giving up the fast path: a chunk that
fails to parse is split in halves until the bad records stand alone, so a
poison record costs O(log chunk) parses, not one per record; and, where the
reader's refusal may be a value to convert, one pass of Python's parse over
the chunk first (bench/typed_columns_cost.py measures none of this: its
records all fit).
"""

from __future__ import annotations

import decimal
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import arro3.core
import arro3.io
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from connectors.smt.debezium import ColumnarDebezium, ColumnarUnwrap
from workers.json_text import json_text, parse_json
from workers.json_values import column_of, column_of_text, converter, python_decoded, read_as_text
from workers.schemas import (
    binary_paths,
    envelope_decimals_as_text,
    inferred_from_parsed,
    is_connect_envelope,
    new_fields_of,
    widened,
)
from workers.writes import narrow_type

if TYPE_CHECKING:
    from connectors.smt.debezium import Columnar

NOT_AN_OBJECT = "value is not a JSON object"
NO_PAYLOAD = "the Kafka Connect envelope has no payload (schemas.enable=true needs one)"
PRESENT = "_payload_present"
# With ``unwrap``: what became of each change event read (a column beside the rows): a row, dropped, or for the
# transformation itself to take (``UNWRAP_FALLBACK``).
UNWRAP_KIND = "_unwrap_kind"
UNWRAP_ROW, UNWRAP_SKIP, UNWRAP_FALLBACK = 0, 1, 2
DELETED = "__deleted"
# DebeziumTransform's field of each row: the event's op (I, U or D), ts, offset, source, target and key.
CDC = "_cdc"
# What a change event's ``source`` is read with for DebeziumTransform's ``_cdc.source`` (``schema``, else ``db``).
SOURCE = pa.struct([("schema", pa.string()), ("db", pa.string()), ("table", pa.string())])
# A decoder's way through the chain for the values it cannot unwrap in columns, given them with their keys and
# offsets (``workers.transformed.RecordTransformer.transform_values``).
Fallback = Callable[
    [Sequence[bytes | None], Sequence[str | None], Sequence[bytes | None] | None, Sequence[int] | None],
    tuple[list[int], list[bytes | None], list[str | None]],
]
DOES_NOT_FIT = "value is not valid JSON, or a field does not fit its column type"


def _rust_readable(arrow_type: pa.DataType) -> bool:
    """Whether arrow-rs's JSON reader fills a column of this type as the Iceberg sink converts
    JSON to it (see the module doc)."""
    if pa.types.is_struct(arrow_type):
        return all(_rust_readable(f.type) for f in arrow_type)
    if pa.types.is_list(arrow_type):
        return _rust_readable(arrow_type.value_type)
    return (
        pa.types.is_boolean(arrow_type)
        or pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_string(arrow_type)
    )


@dataclass
class Decoded:
    """The records of a chunk that decoded: their columns and their positions in the chunk."""

    columns: pa.Table
    positions: list[int]
    bad: list[tuple[int, str]] = field(default_factory=list)
    skipped: int = 0
    # With schema evolution, when the records have fields the table's
    # columns lack (not in ``columns``): every field of theirs as the reader
    # typed it (workers.schemas.inferred_from_parsed), for the sink to find the new ones.
    records_schema: pa.Schema | None = None

    def placed(self, origin: Sequence[int], dropped: int, schema: pa.Schema) -> Decoded:
        """These rows, bad records and skipped ones, of values a chain made from the records at ``origin`` (it
        dropped ``dropped`` more, counted as skipped), at those records' positions, in ``schema`` (Arrow C++'s
        reader makes every column nullable)."""
        return Decoded(
            self.columns.cast(schema),
            [origin[p] for p in self.positions],
            [(origin[p], reason) for p, reason in self.bad],
            self.skipped + dropped,
        )


class JsonDecoder:
    """JSON objects to the columns of the first table: plain JSON, or the ``payload`` of
    Kafka Connect's schema envelope (``envelope``). Both data planes decode with it:
    the participants (arrow) and Spark's Python workers (spark), so the same records
    give the same rows and the same bad-record decisions on both."""

    MIN_BLOCK = 1 << 20

    def __init__(
        self,
        data_schema: pa.Schema,
        evolve: bool = False,
        envelope: bool = False,
        unwrap: Columnar | None = None,
        fallback: Fallback | None = None,
        cpp_reader: bool = False,
    ) -> None:
        """``cpp_reader``: read with Arrow C++'s reader whatever the columns (as a decoder of all of a table's
        columns, some of which only it reads, would read these: the two differ in what else fits a column).

        ``unwrap``: the values are Debezium change events, and the decoder applies ``ExtractNewRecordState``
        (``ColumnarUnwrap``) or the Iceberg sink's ``DebeziumTransform`` (``ColumnarDebezium``) to them as it
        reads them: each event's row is read from its ``after`` (or, a delete rewritten or DebeziumTransform's,
        its ``before``) straight into the columns. An event it cannot tell that way (no ``op``, no state, a
        value that is not an event, or does not parse so) goes through ``fallback``, the transformation record
        by record, then is decoded as it comes out: so each value comes to what the transformation and this
        decoder without ``unwrap`` make of it."""
        self.data_schema = data_schema
        self.envelope = envelope
        self._binary_paths = binary_paths(data_schema) if envelope else frozenset()
        self.unwrap = unwrap
        self.fallback = fallback
        if unwrap is not None and (evolve or envelope or fallback is None):
            raise ValueError("a decoder unwraps plain JSON values, without schema evolution, and with a fallback")
        # Columns of types neither reader reads, converted by Python (json_values): a UUID, binary or fixed
        # column from the text the readers read (``text_fields``), the others from the records parsed again.
        self._converters = {}
        for f in data_schema:
            if python_decoded(f.type):
                try:
                    self._converters[f.name] = converter(f.type)
                except ValueError as exc:
                    raise ValueError(f"column {f.name} ({f.type}): {exc}") from exc
        self.text_fields = [f for f in data_schema if f.name in self._converters and read_as_text(f.type)]
        self.python_fields = [f for f in data_schema if f.name in self._converters and not read_as_text(f.type)]
        read_fields = [
            f.with_type(pa.string()) if f in self.text_fields else f
            for f in data_schema
            if f.name not in self._converters or f in self.text_fields
        ]
        columns = pa.schema([f.with_type(narrow_type(f.type, dates_as_text=True)) for f in read_fields])
        # An envelope's payload is read as a struct of the columns; its
        # `schema` is an unknown field, skipped by both readers.
        self.parse_schema = pa.schema([pa.field("payload", pa.struct(list(columns)))]) if envelope else columns
        self.columns_schema = columns
        read_schema = pa.schema(read_fields)
        self.needs_cast = columns != read_schema
        # What a parsed chunk is cast to: the columns, and for an envelope
        # whether each record had a payload.
        self.cast_schema = read_schema.append(pa.field(PRESENT, pa.bool_())) if envelope else read_schema
        # A column the transformation writes itself (a rewritten event's __deleted) is not read from the row.
        self._written_deleted = isinstance(unwrap, ColumnarUnwrap) and unwrap.rewrite and DELETED in columns.names
        # With ``unwrap``: the decoder of the values the fallback (the transformation) makes.
        self._plain: JsonDecoder | None = None
        # The columns as decoded rows have them (``_with_python_columns``): in unwrap mode each may be null,
        # since a chunk's events that are not rows are read beside them; the rows are held to the columns after.
        self._output_schema = data_schema
        # Whether the values' rows can be read from their events in columns at all (not when columns are
        # converted from the parsed records: those would need each event's state picked record by record).
        self._columnar = unwrap is not None and not self.python_fields
        # add.fields' columns: each table column the transformation adds, with the field it takes (its struct
        # in the event, or None for the event's own).
        self._added: dict[str, tuple[str | None, str]] = {}
        # With DebeziumTransform: the type of its ``_cdc`` column (if the table has one), of the column's ``key``
        # field (or an empty struct: a key is then only read to tell it is JSON), and whether keys are JSON.
        self._cdc: pa.StructType | None = None
        self._key_type = pa.struct([])
        self._keys_json = False
        self._targets: list[str] = []
        # The fields a change event is read with (``unwrap``).
        fields: dict[str, pa.DataType] | None = None
        if isinstance(unwrap, ColumnarDebezium):
            self._plain = JsonDecoder(data_schema, cpp_reader=cpp_reader)
            columns = _relaxed(columns)
            found = _debezium_fields(columns, unwrap.target_pattern)
            if found is None:
                self._columnar = False
                fields = {"op": pa.string()}
            else:
                fields, self._cdc = found
                if self._cdc is not None and "key" in self._cdc.names:
                    self._key_type = self._cdc.field("key").type
            self._keys_json = unwrap.json_keys
            self._targets = _target_parts(unwrap.target_pattern)
        elif unwrap is not None:
            self._plain = JsonDecoder(data_schema, cpp_reader=cpp_reader)
            columns = _relaxed(columns)
            self._added = {added: (struct, name) for struct, name, added in unwrap.fields if added in columns.names}
            # (An added field's column is read from the row too: the row keeps its own when the event has no
            # such field, which the columns cannot always tell from a null one.)
            row = pa.struct([f for f in columns if not (self._written_deleted and f.name == DELETED)])
            # (An empty struct tells an event's ``before`` from null without reading its fields.)
            before = row if unwrap.rewrite else pa.struct([])
            fields = _event_fields(row, before, self._added, columns)
            if fields is None or len(self._added) != sum(added in columns.names for *_, added in unwrap.fields):
                self._columnar = False  # (fields added twice, or that clash with the envelope's: record by record)
                fields = {"op": pa.string(), "after": row, "before": before}
            elif self._written_deleted and (DELETED in self._added or columns.field(DELETED).type != pa.string()):
                self._columnar = False  # (a __deleted column of another type: the plain decoder says what of it)
        if fields is not None:
            self.parse_schema = pa.schema(list(fields.items()))
            self.columns_schema = columns
            relaxed_read = _relaxed(read_schema)
            self.cast_schema = relaxed_read.append(pa.field(UNWRAP_KIND, pa.int8()))
            self._output_schema = _relaxed(data_schema)
            self.needs_cast = columns != relaxed_read
        if evolve and envelope:
            raise ValueError("an envelope's new fields come from its schema, not from typing its values")
        # With schema evolution the reader also types the fields the table
        # lacks, as it would for a table it knew nothing of; without, it
        # skips them (as the Iceberg sink ignores them).
        self.evolve = evolve
        self._options = pj.ParseOptions(
            explicit_schema=self.parse_schema, unexpected_field_behavior="infer" if evolve else "ignore"
        )
        # (Not for a name with a NUL in it: arro3 hands names on as C text, which ends at the NUL.)
        # (Not with a date column, read as text: arrow-rs would refuse a number of days there, which the C++
        # reader takes, ``_read_cpp``.)
        dates = _date_paths(read_fields)
        self.rust_reader = (
            not evolve
            and not cpp_reader
            and not dates
            and all(_rust_readable(f.type) for f in self.parse_schema)
            and not any("\x00" in name for name in _names(self.parse_schema))
        )
        self._rust_schema = arro3.core.Schema.from_arrow(self.parse_schema)
        # With DebeziumTransform: how keys are read, as objects and in Kafka Connect's schema envelope (the
        # struct to take from what is read), each schema with arro3's.
        self._key_reads = [
            (read, arro3.core.Schema.from_arrow(read), inner)
            for read, inner in (
                (pa.schema(list(self._key_type)), None),
                (pa.schema([("payload", self._key_type)]), "payload"),
            )
            if self._keys_json
        ]
        # With schema evolution, what the records of the chunks parsed so far have, as read (new fields).
        self._read_schema: pa.Schema | None = None
        # The timestamp and date fields of what is read (by their paths as Arrow C++'s reader names them), which a
        # JSON number fills as the Iceberg sink's RecordConverter takes one: epoch milliseconds, days since the
        # epoch. The reader refuses a number in them (a date is read as text), so a chunk with one is read again
        # with such a field as a number (``_read_cpp``): a long, or a double where one has a fraction or an exponent
        # (truncated, as Java's ``longValue()`` and ``intValue()`` truncate it). Those read so the last time, and
        # the options of each way.
        self._time_paths = {} if self.rust_reader else _time_paths(self.parse_schema, dates)
        self._numeric: frozenset[str] = frozenset()
        self._fractional = False
        self._numeric_options = {(frozenset[str](), False): self._options}
        # The columns the readers read (and the fields within them) whose values of another type the Iceberg
        # sink's RecordConverter converts, by the names of the records' fields: a number, boolean, object or array
        # in a string column is its text; text in a boolean or number column is parsed, a fraction in an integer
        # column truncated, a decimal's text rounded to its scale (``_as_converted``). Not with ``unwrap``: its
        # fallback's plain decoder does so. (A UUID, binary or fixed column read as text converts a number to its
        # text, which is then no UUID, and the converter says so: as the Java sink refuses a number there.)
        readers = pa.struct([f for f in data_schema if f.name not in self._converters])
        conversions = None if unwrap is not None else _conversions(readers)
        self._conversions = {"payload": conversions} if envelope and conversions else conversions

    def decode(
        self,
        values: Sequence[bytes | None],
        errors: Sequence[str | None],
        keys: Sequence[bytes | None] | None = None,
        offsets: Sequence[int] | None = None,
    ) -> Decoded:
        """The values' rows, and which are bad or skipped. ``keys`` and ``offsets``, the records', are read with
        ``unwrap`` only (DebeziumTransform's ``_cdc``)."""
        if self.unwrap is not None:
            return self._decode_unwrapping(values, errors, keys, offsets)
        self._read_schema = None
        lines: list[bytes] = []
        positions: list[int] = []
        bad: list[tuple[int, str]] = []
        skipped = 0
        for i, raw in enumerate(values):
            if errors[i] is not None:
                bad.append((i, str(errors[i])))
                continue
            if raw is None:
                skipped += 1  # a tombstone: nothing to write
                continue
            value = raw
            if self.envelope:
                # (Connect's Decimals are base64 in the envelope's payload: read as the decimals they are, but in a
                # binary column, as tables made before had them.)
                try:
                    value = envelope_decimals_as_text(raw, self._binary_paths)
                except ValueError as exc:
                    bad.append((i, str(exc)))
                    continue
            if value[:1] == b"{":
                lines.append(value)
                positions.append(i)
            else:
                # Arrow's reader only takes objects (and must never be shown
                # a bare `null`): anything else is refused here, with why.
                stripped = value.strip()
                if stripped[:1] == b"{":
                    lines.append(stripped)
                    positions.append(i)
                else:
                    bad.append((i, _not_an_object(stripped)))
        tables: list[pa.Table] = []
        good: list[int] = []
        if lines:
            self._read_lines(lines, positions, tables, good, bad)
        columns = pa.concat_tables(tables) if tables else _empty(self.data_schema)
        if self.envelope and tables:
            present = columns.column(PRESENT).combine_chunks()
            columns = columns.drop_columns([PRESENT])
            if present.false_count:
                # Kafka Connect's JsonConverter refuses an envelope without
                # a payload; a null value is a tombstone, not an envelope.
                kept = present.to_pylist()
                bad += [(p, NO_PAYLOAD) for p, k in zip(good, kept, strict=True) if not k]
                good = [p for p, k in zip(good, kept, strict=True) if k]
                columns = columns.filter(present)
        bad.sort()
        records_schema = inferred_from_parsed(self._read_schema) if self._read_schema is not None else None
        return Decoded(columns, good, bad, skipped, records_schema)

    def _parse(self, lines: Sequence[bytes]) -> pa.Table:
        data = b"\n".join(lines)
        records = None
        if self.python_fields:
            # (Parsed here for the columns Python converts. With schema evolution, Arrow C++'s reader is given
            # the records without those fields: it would type them as new fields, and refuse one whose
            # values differ in JSON type from record to record, a time as text in one and a number in another.)
            records = [parse_json(line) for line in lines]
            if self.evolve:
                names = {f.name for f in self.python_fields}
                data = b"\n".join(json_text({k: v for k, v in r.items() if k not in names}) for r in records)
        table = self._read_rust(data, len(lines)) if self.rust_reader else self._read_cpp(data)
        if table.num_rows != len(lines):
            # A value holding more than one JSON value (or, for Arrow C++'s
            # reader, which takes a line for a record, a line break).
            raise ValueError("value holds more than one JSON value")
        read = None
        if isinstance(self.unwrap, ColumnarDebezium):
            table = self._debezium_rows(table, lines)
        elif self.unwrap is not None:
            table = self._unwrapped(table)
        elif self.envelope:
            payload = table.column("payload").combine_chunks()
            table = pa.Table.from_struct_array(payload).append_column(PRESENT, payload.is_valid())
        elif self.evolve:
            read = table.schema
            if records is not None:
                # New fields inside the columns Python converts, which the reader was not shown.
                read = pa.schema([*read, *self._new_fields_in_python_columns(records)])
            if table.schema != self.parse_schema:
                # The table's columns only (casting a struct drops its new fields).
                table = table.select(self.parse_schema.names)
                if table.schema != self.parse_schema:
                    table = table.cast(self.parse_schema)
        if self.needs_cast:
            table = table.cast(self.cast_schema)
        if self._converters:
            table = self._with_python_columns(table, records)
        table.validate(full=True)  # e.g. invalid UTF-8 in a string
        if read is not None and read != self.parse_schema:
            # The new fields of records that decoded (those of a bad record are not the table's to take); of
            # every part, when parts are parsed apart to isolate a bad record.
            self._read_schema = read if self._read_schema is None else widened(self._read_schema, read, promote=True)
        return table

    def _unwrapped(self, events: pa.Table) -> pa.Table:
        """The rows of change events read with ``op``, ``after`` and ``before`` (``unwrap``), in the columns'
        order, and beside them (``UNWRAP_KIND``) what each event is: a row (its ``after``; a delete rewritten,
        its ``before``), dropped (a delete), or for the transformation to take record by record (no ``op``, no
        state: a value that may be no event, or a truncate)."""
        assert isinstance(self.unwrap, ColumnarUnwrap)
        has_op = events.column("op").combine_chunks().is_valid()
        after = events.column("after").combine_chunks()
        before = events.column("before").combine_chunks()
        has_after, has_before = after.is_valid(), before.is_valid()
        row = pc.and_(has_op, has_after)
        delete = pc.and_(pc.and_(has_op, pc.invert(has_after)), has_before)
        if self.unwrap.rewrite:
            states, taken = pc.if_else(has_after, after, before), pc.or_(row, delete)
        else:
            states, taken = after, row
        rows = pa.Table.from_struct_array(states)
        unclear = pa.array(np.zeros(len(events), dtype=bool))
        written = {DELETED: pc.if_else(has_after, "false", "true")} if self._written_deleted else {}
        for added, (struct, name) in self._added.items():
            # Debezium's: the field of its struct; a struct that is null gives null; a struct without the field,
            # or none at all, gives the event's own field of that name if it has one. An event where the columns
            # cannot tell which (the struct's field null, the event's own set) goes record by record.
            own = events.column(name).combine_chunks() if name in events.column_names else None
            if struct is None:
                assert own is not None
                written[added] = own
                continue
            holder = events.column(struct).combine_chunks()
            inner = pc.if_else(
                holder.is_valid(),
                pc.struct_field(holder, name),
                pa.nulls(len(holder), own.type if own is not None else holder.type.field(name).type),
            )
            if own is not None:
                unclear = pc.or_(unclear, pc.and_(inner.is_null(), own.is_valid()))
            written[added] = inner
        for added, value in list(written.items()):
            if added in self._added and added in rows.column_names:
                # Null added: the event had the field null, or lacked it and the row keeps its own.
                unclear = pc.or_(unclear, pc.and_(value.is_null(), rows.column(added).is_valid()))
        kind = pc.if_else(
            pc.and_(taken, pc.invert(unclear)),
            UNWRAP_ROW,
            pc.if_else(pc.and_(delete, pc.invert(taken)), UNWRAP_SKIP, UNWRAP_FALLBACK),
        ).cast(pa.int8())
        arrays = [written[name] if name in written else rows.column(name) for name in self.columns_schema.names]
        return pa.Table.from_arrays(
            [*arrays, kind], schema=self.columns_schema.append(pa.field(UNWRAP_KIND, pa.int8()))
        )

    def _debezium_rows(self, events: pa.Table, lines: Sequence[bytes]) -> pa.Table:
        """The rows of change events read with ``op``, ``after``, ``before``, ``source`` and ``ts_ms`` for
        DebeziumTransform, in the columns' order, and beside them (``UNWRAP_KIND``) what each event is: a row
        (its ``after``; a delete's ``before``), dropped (no such state: "payload is not a map, skipping"), or for
        the transformation to take record by record (no ``op``, no source's names, or a ``source`` whose
        ``schema`` the columns cannot tell absent from null). Their ``_cdc`` has no offset or key yet
        (``_with_offsets_and_keys``)."""
        n = len(events)
        op = events.column("op").combine_chunks()
        has_op = op.is_valid()
        deletes = pc.fill_null(pc.equal(op, "d"), False)
        state = pc.if_else(deletes, events.column("before").combine_chunks(), events.column("after").combine_chunks())
        has_state = pc.and_(has_op, state.is_valid())
        source = events.column("source").combine_chunks()
        schema, db, table = (pc.struct_field(source, name) for name in ("schema", "db", "table"))
        named = pc.coalesce(schema, db)
        known = pc.and_(pc.and_(source.is_valid(), named.is_valid()), table.is_valid())
        # The transformation takes ``schema`` when the source has it, even null: a null one is told from an
        # absent one by the event's text (or, with an escape in it, record by record).
        maybe = np.flatnonzero(pc.and_(pc.and_(has_state, known), schema.is_null()).to_numpy(zero_copy_only=False))
        unclear = np.zeros(n, dtype=bool)
        unclear[maybe] = [b'"schema"' in lines[i] or b"\\u" in lines[i] for i in maybe.tolist()]
        if self._targets:
            # (A name with a brace in it could make a placeholder of the pattern's as replaced in turn.)
            for names in (named, table):
                unclear |= pc.fill_null(pc.match_substring_regex(names, r"[{}]"), False).to_numpy(zero_copy_only=False)
        taken = pc.and_(pc.and_(has_state, known), pa.array(~unclear))
        kind = pc.if_else(
            taken, UNWRAP_ROW, pc.if_else(pc.and_(has_op, pc.invert(has_state)), UNWRAP_SKIP, UNWRAP_FALLBACK)
        ).cast(pa.int8())
        rows = pa.Table.from_struct_array(state)
        written = {}
        if self._cdc is not None:
            letters = pc.if_else(deletes, "D", pc.if_else(pc.fill_null(pc.equal(op, "u"), False), "U", "I"))
            where = pc.binary_join_element_wise(named, table, ".")
            if self._targets:
                parts = {"{db}": named, "{table}": table}
                target = pc.binary_join_element_wise(*(parts.get(p, p) for p in self._targets), "")
                if isinstance(target, pa.Scalar):
                    target = pa.repeat(target, n)  # (a pattern without placeholders)
            else:
                target = where
            made = {"op": letters, "source": where, "target": target}
            if "ts" in self._cdc.names:
                made["ts"] = events.column("ts_ms").combine_chunks()
            written[CDC] = pa.StructArray.from_arrays(
                [made[f.name].cast(f.type) if f.name in made else pa.nulls(n, f.type) for f in self._cdc],
                fields=list(self._cdc),
            )
        arrays = [written[name] if name in written else rows.column(name) for name in self.columns_schema.names]
        return pa.Table.from_arrays(
            [*arrays, kind], schema=self.columns_schema.append(pa.field(UNWRAP_KIND, pa.int8()))
        )

    def _json_keys(self, keys: Sequence[bytes | None]) -> tuple[np.ndarray, pa.Array]:
        """Which of ``keys`` the stage reads without an error, as it reads a JSON key (parsed, and an object in
        Kafka Connect's schema envelope taken as its ``payload``), and each as ``_cdc.key``'s type: a key that is
        an object, read by the JSON reader straight into that type; null for a missing key, one that is no
        object, and one not read (not JSON, or not of that type: it goes record by record, and is bad there)."""
        n = len(keys)
        told = np.zeros(n, dtype=bool)
        # The keys that are objects, as they are and in an envelope, each with its position.
        objects: tuple[list[bytes], list[int]] = ([], [])
        wrapped: tuple[list[bytes], list[int]] = ([], [])
        for i, key in enumerate(keys):
            if key is None:
                told[i] = True
                continue
            try:
                # (The stage's parser: whether a key is JSON is its to say, not the reader's, which takes more.)
                parsed = parse_json(key)
            except ValueError:
                continue
            line = key
            if is_connect_envelope(parsed):
                found = wrapped if isinstance(parsed["payload"], dict) else None
                try:
                    # (Connect's Decimals in it as their text, as the stage reads them: envelope_decimals_as_text.)
                    line = envelope_decimals_as_text(key)
                except ValueError:
                    continue  # (the stage's error: record by record)
            else:
                found = objects if isinstance(parsed, dict) else None
            if found is None:
                told[i] = True  # (no object: no _cdc.key)
            else:
                found[0].append(line)
                found[1].append(i)
        index = np.full(n, -1, dtype=np.int64)
        parts: list[pa.Array] = []
        count = 0
        for (lines, at), (read, reader, inner) in zip((objects, wrapped), self._key_reads, strict=True):
            for part, positions in self._read_keys(lines, at, read, reader):
                parts.append(pc.struct_field(part, inner) if inner else part)
                index[positions] = np.arange(count, count + len(positions))
                told[positions] = True
                count += len(positions)
        structs = pa.concat_arrays(parts) if parts else pa.nulls(0, self._key_type)
        return told, structs.take(pa.array(index, mask=index < 0))

    @staticmethod
    def _read_keys(
        lines: list[bytes], at: list[int], read: pa.Schema, reader: arro3.core.Schema
    ) -> list[tuple[pa.StructArray, list[int]]]:
        """Keys (each one JSON object) read with ``read`` as structs, in parts with their positions; a part that
        does not fit is halved until the key that does not stands alone, and left out."""
        if not lines:
            return []
        try:
            table = read_rust(b"\n".join(lines), read, reader, len(lines))
            if table.num_rows != len(lines):
                raise ValueError("a key holds more than one JSON value")
        except Exception:
            if len(lines) == 1:
                return []
            middle = len(lines) // 2
            return JsonDecoder._read_keys(lines[:middle], at[:middle], read, reader) + JsonDecoder._read_keys(
                lines[middle:], at[middle:], read, reader
            )
        if not read.names:
            return [(pa.array([{}] * len(lines), pa.struct([])), at)]  # (an object of no fields the type has)
        return [(table.to_struct_array().combine_chunks(), at)]

    def _decode_unwrapping(
        self,
        values: Sequence[bytes | None],
        errors: Sequence[str | None],
        keys: Sequence[bytes | None] | None,
        offsets: Sequence[int] | None,
    ) -> Decoded:
        """``decode`` with ``unwrap``: the events' rows read in columns; the values that cannot be read so go
        through ``fallback`` (the transformation), then are decoded as plain JSON."""
        assert self._plain is not None and self.fallback is not None
        debezium = isinstance(self.unwrap, ColumnarDebezium)
        if debezium:
            assert keys is not None and offsets is not None, "DebeziumTransform reads keys and offsets"
        lines: list[bytes] = []
        positions: list[int] = []
        bad: list[tuple[int, str]] = []
        skipped = 0
        deferred: list[int] = []
        tombstones: list[int] = []
        for i, value in enumerate(values):
            if errors[i] is not None:
                bad.append((i, str(errors[i])))
            elif value is None:
                tombstones.append(i)  # dropped by the transformation, or kept and skipped, alike
            elif self._columnar and value[:1] == b"{":
                lines.append(value)
                positions.append(i)
            else:
                deferred.append(i)
        parts: list[pa.Table] = []
        at: list[int] = []
        events: pa.Table | None = None
        good: list[int] = []
        if lines:
            tables: list[pa.Table] = []
            self._read_lines(lines, positions, tables, good, bad, failed=deferred)
            if tables:
                events = pa.concat_tables(tables)
        kind = events.column(UNWRAP_KIND).to_numpy() if events is not None else np.zeros(0, dtype=np.int8)
        where = np.asarray(good, dtype=np.int64)
        # (DebeziumTransform's: the positions whose keys were read, in order, and those keys as _cdc.key's type.)
        asked = np.zeros(0, dtype=np.int64)
        key_structs: pa.Array | None = None
        if debezium and self._keys_json:
            # A key that is not JSON makes its record bad even when the transformation drops it, as the stage
            # reads every record's key first: those the decoder cannot tell are, go record by record.
            assert keys is not None
            dropped = np.asarray(tombstones, dtype=np.int64)
            asked = np.sort(np.concatenate([dropped, where[kind != UNWRAP_FALLBACK]]))
            told, key_structs = self._json_keys([keys[p] for p in asked.tolist()])
            if not told.all():
                untold = asked[~told]
                gone = np.isin(dropped, untold)
                deferred += dropped[gone].tolist()
                tombstones = dropped[~gone].tolist()
                kind = np.where(np.isin(where, untold), UNWRAP_FALLBACK, kind)
        skipped += len(tombstones)
        if events is not None:
            skipped += int(np.count_nonzero(kind == UNWRAP_SKIP))
            deferred += where[kind == UNWRAP_FALLBACK].tolist()
            keep = kind == UNWRAP_ROW
            rows = events.drop_columns([UNWRAP_KIND]).filter(pa.array(keep))
            taken = where[keep]
            if debezium and self._cdc is not None:
                rows = self._with_offsets_and_keys(rows, taken, offsets, key_structs, asked)
            try:
                parts.append(rows.cast(self.data_schema))
                at += taken.tolist()
            except (pa.ArrowInvalid, ValueError):
                deferred += taken.tolist()  # (a row without a value its column requires: the fallback says why)
        if deferred:
            deferred.sort()
            kept, out_values, out_errors = self.fallback(
                [values[i] for i in deferred],
                [None] * len(deferred),
                [keys[i] for i in deferred] if keys is not None else None,
                [offsets[i] for i in deferred] if offsets is not None else None,
            )
            plain = self._plain.decode(out_values, out_errors).placed(
                [deferred[k] for k in kept], len(deferred) - len(kept), self.data_schema
            )
            parts.append(plain.columns)
            at += plain.positions
            bad += plain.bad
            skipped += plain.skipped
        columns, at = in_order(parts, at) if parts else (_empty(self.data_schema), [])
        bad.sort()
        return Decoded(columns, at, bad, skipped)

    def _with_offsets_and_keys(
        self,
        rows: pa.Table,
        taken: np.ndarray,
        offsets: Sequence[int] | None,
        key_structs: pa.Array | None,
        asked: np.ndarray,
    ) -> pa.Table:
        """``rows`` (of the values at ``taken``) with their records' offsets and keys (``key_structs``, of the
        positions ``asked``) in ``_cdc``."""
        assert self._cdc is not None and offsets is not None
        cdc = rows.column(CDC).combine_chunks()
        children = [cdc.field(i) for i in range(cdc.type.num_fields)]
        for i, f in enumerate(cdc.type):
            if f.name == "offset":
                children[i] = pa.array(np.asarray(offsets, dtype=np.int64)[taken]).cast(f.type)
            elif f.name == "key" and key_structs is not None:
                children[i] = key_structs.take(pa.array(np.searchsorted(asked, taken))).cast(f.type)
        filled = pa.StructArray.from_arrays(children, fields=list(cdc.type))
        return rows.set_column(rows.schema.get_field_index(CDC), rows.schema.field(CDC), filled)

    def _new_fields_in_python_columns(self, records: Sequence[Any]) -> list[pa.Field]:
        """The struct columns Python converts, each as a struct of the fields the ``records`` have in it
        and the column lacks (at any depth of its structs); those without any left out."""
        found = []
        for f in self.python_fields:
            if pa.types.is_struct(f.type):
                values = [r.get(f.name) if isinstance(r, dict) else None for r in records]
                if new := new_fields_of(values, f.type):
                    found.append(pa.field(f.name, pa.struct(new)))
        return found

    def _with_python_columns(self, table: pa.Table, records: Sequence[Any] | None) -> pa.Table:
        """``table`` with the columns Python converts, in the data schema's order: ``text_fields`` from the
        text read, ``python_fields`` from the parsed ``records``. A value one cannot take raises
        ValueError, which isolates its record."""
        converted = {
            f.name: column_of_text(table.column(f.name), f, self._converters[f.name]) for f in self.text_fields
        }
        if records is not None:
            if self.envelope:
                records = [r.get("payload") if isinstance(r, dict) else None for r in records]
            converted |= {f.name: column_of(records, f, self._converters[f.name]) for f in self.python_fields}
        arrays = [converted[f.name] if f.name in converted else table.column(f.name) for f in self._output_schema]
        fields = list(self._output_schema)
        if self.envelope:
            arrays.append(table.column(PRESENT))
            fields.append(pa.field(PRESENT, pa.bool_()))
        if self.unwrap is not None:
            arrays.append(table.column(UNWRAP_KIND))
            fields.append(pa.field(UNWRAP_KIND, pa.int8()))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def _read_rust(self, data: bytes, rows: int) -> pa.Table:
        return read_rust(data, self.parse_schema, self._rust_schema, rows)

    def _read_cpp(self, data: bytes) -> pa.Table:
        """``data`` read by Arrow C++'s reader (``_read_cpp_with``), a timestamp or date field read as a number
        where the reader says it holds one (and as text again where it says it holds text), each field turned once
        at most: so a chunk whose values give a field the one kind or the other is read whole, one that mixes both
        in a field is not (and is halved). Such fields are read as longs, or, once the reader finds a number that
        is none (a fraction, an exponent), as doubles. The way the last chunk was read is tried first; a chunk
        that does not read so is read from the columns' own types, turning fields as it needs, so that what a
        chunk read no way fails with is the same whatever came before."""
        if self._numeric:
            try:
                return _as_read(self._read_cpp_with(data, self._numeric, self._fractional), self.parse_schema)
            except (pa.ArrowInvalid, ValueError):
                pass  # (a long beyond a double's exact ones, read as a double, reads as a long from the types)
        numeric, turned, fractional = frozenset[str](), set[str](), False
        while True:
            try:
                table = self._read_cpp_with(data, numeric, fractional)
            except pa.ArrowInvalid as exc:
                found = TURNED.search(str(exc))
                path = found.group(1) if found else None
                to_number = found is not None and found.group(2) == "string" and found.group(3) == "number"
                if path not in self._time_paths or path in turned or (path in numeric) == to_number:
                    if numeric and not fractional and NOT_A_LONG.search(str(exc)):
                        # (Perhaps in another column: then the doubles fail alike, and say so below.)
                        fractional = True
                        continue
                    if not numeric:
                        raise
                    # (Arrow C++ names no field for a number that does not parse: say which were read as numbers.)
                    read = ", ".join(f"Column({p})" for p in sorted(numeric))
                    raise pa.ArrowInvalid(f"{exc} ({read} read as a number: epoch milliseconds, or days)") from None
                turned.add(path)
                numeric = numeric | {path} if to_number else numeric - {path}
                continue
            self._numeric, self._fractional = numeric, fractional
            return _as_read(table, self.parse_schema) if numeric else table

    def _read_cpp_with(self, data: bytes, numeric: frozenset[str], fractional: bool = False) -> pa.Table:
        options = self._numeric_options.get((numeric, fractional))
        if options is None:
            options = self._numeric_options[numeric, fractional] = pj.ParseOptions(
                explicit_schema=_with_numbers(self.parse_schema, {self._time_paths[p] for p in numeric}, fractional),
                unexpected_field_behavior=self._options.unexpected_field_behavior,
            )
        # The whole chunk as one block, parsed on this thread. Arrow's
        # streaming reader, not read_json: read_json starts a read-ahead
        # thread and its pool for every call and waits on it, which held a
        # task idle for a sizeable share of its time on a busy host (py-spy)
        # and cost more CPU per chunk; handing blocks to Arrow's thread pool
        # cost more CPU too, and the tasks already keep every core busy
        # (docs/benchmarks.md, "Measurements behind the runtime's design").
        # One block also means one schema for the chunk, whatever it infers.
        reader = pj.open_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(block_size=max(self.MIN_BLOCK, len(data) + 1), use_threads=False),
            parse_options=options,
        )
        return reader.read_all()

    def _read_lines(
        self,
        lines: Sequence[bytes],
        positions: Sequence[int],
        tables: list[pa.Table],
        good: list[int],
        bad: list[tuple[int, str]],
        failed: list[int] | None = None,
    ) -> None:
        """Parse the values (``_isolate``), in runs of those that hold one line and close it, each other one
        alone, in their order: the readers take a line break for whitespace, so a value that ends open (not
        valid JSON) would run on into the next line and, with one after it holding two values, put rows at
        the wrong positions; a value with a line break in it is pretty-printed, or not JSON."""
        start = 0
        for i, line in enumerate(lines):
            if (line[-1:] == b"}" or line.rstrip()[-1:] == b"}") and b"\n" not in line and b"\r" not in line:
                continue
            if start < i:
                self._isolate(lines[start:i], positions[start:i], tables, good, bad, failed)
            self._isolate(lines[i : i + 1], positions[i : i + 1], tables, good, bad, failed)
            start = i + 1
        if start < len(lines):
            self._isolate(lines[start:], positions[start:], tables, good, bad, failed)

    def _isolate(
        self,
        lines: Sequence[bytes],
        positions: Sequence[int],
        tables: list[pa.Table],
        good: list[int],
        bad: list[tuple[int, str]],
        failed: list[int] | None = None,
        looked: bool = False,
    ) -> None:
        """Parse ``lines``, halving a part that fails until its bad records stand alone: those are ``bad``, or
        given to ``failed`` (their positions) when there is one. A part the reader refuses for a value of another
        type than its column's is read again with the values the Iceberg sink's RecordConverter converts
        converted (``_as_converted``), and so is a record alone that fails for any reason (``looked``: the lines
        were looked through for such values already: they are converted, or hold none)."""
        try:
            tables.append(self._parse(lines))
            good.extend(positions)
            return
        except (pa.ArrowInvalid, ValueError) as exc:
            # (Not ArrowNotImplementedError: a type the reader lacks is the
            # writer's fault, not the records'; it fails the write.)
            # (A record alone is read converted whatever the reader said first, a duplicate key or another field,
            # as it is in a part read again so: its result is its own, whatever else its chunk holds.)
            if not looked and self._conversions and (len(lines) == 1 or _CONVERTIBLE.search(str(exc))):
                converted = _as_converted(lines, self._conversions)
                if converted is not None:
                    self._isolate(converted, positions, tables, good, bad, failed, looked=True)
                    return
                # (None of these holds one, the refused value being in a UUID or time column: nor do the halves.)
                looked = True
            if len(lines) > 1:
                middle = len(lines) // 2
                self._isolate(lines[:middle], positions[:middle], tables, good, bad, failed, looked)
                self._isolate(lines[middle:], positions[middle:], tables, good, bad, failed, looked)
                return
            if failed is not None:
                failed.append(positions[0])
                return
            error = exc
        # One value alone: it may be pretty-printed (line breaks are only
        # whitespace between JSON tokens).
        line = lines[0].replace(b"\r", b" ").replace(b"\n", b" ")
        try:
            tables.append(self._parse([line]))
            good.append(positions[0])
        except (pa.ArrowInvalid, ValueError) as exc:
            error = exc
            bad.append((positions[0], f"{DOES_NOT_FIT}: {_reason(error)}"))


def _empty(schema: pa.Schema) -> pa.Table:
    """A table of no rows of ``schema``. (``Schema.empty_table`` cannot make one with a UUID in a list, struct or
    map: Arrow 26 makes no empty array of an extension type nested so.)"""
    return pa.Table.from_batches([], schema=schema)


# What the readers say of a value of another type than its column's, which ``_as_converted`` may convert:
# arrow-rs's (a string field; a boolean; a number it cannot parse), then Arrow C++'s (a string field, which it
# says of a date or timestamp field too, read as text; a number or boolean field; a number it cannot parse).
_CONVERTIBLE = re.compile(
    r"expected string got |expected boolean got |failed to parse |changed from \w+ to |Failed to convert JSON to "
)


def _conversions(struct: pa.StructType) -> dict[str, Any] | None:
    """The fields within ``struct`` that the Iceberg sink's RecordConverter converts a value of another type
    into, by name: a leaf's conversion (``json_values.converter`` of its type: a string's text, a boolean's,
    an integer's or a floating-point number's parse of text, an integer's truncation of a fraction, a decimal's
    rounding), the same of a struct's for a struct, ``[leaves]`` for a list's items; None when it has none."""
    found: dict[str, Any] = {}
    for f in struct:
        leaves = _conversions_of(f.type)
        if leaves is not None:
            found[f.name] = leaves
    return found or None


def _conversions_of(arrow_type: pa.DataType) -> Any:
    if pa.types.is_struct(arrow_type):
        return _conversions(arrow_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        inner = _conversions_of(arrow_type.value_type)
        return None if inner is None else [inner]
    if (
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_decimal(arrow_type)
    ):
        return converter(arrow_type)
    return None


def _as_converted(lines: Sequence[bytes], conversions: dict[str, Any]) -> list[bytes] | None:
    """``lines`` with each value that the fields' ``conversions`` convert to another as converted, each such line
    written again as JSON; None when none has one. A line that does not parse stays as it is."""
    changed = False
    converted = list(lines)
    for i, line in enumerate(lines):
        try:
            record = parse_json(line)
        except ValueError:
            continue
        if isinstance(record, dict) and _converted_in(record, conversions):
            converted[i] = json_text(record)
            changed = True
    return converted if changed else None


def _converted_in(value: Any, conversions: Any) -> bool:
    """Put each value within ``value``, a parsed record, that its field's conversion (in ``conversions``: a
    struct's by name, a list's items as ``[conversions]``) converts to another as converted, as JSON carries it
    (a decimal as its text, which the readers read exactly); whether there was any. A value the conversion
    refuses, or makes a number JSON has none for (NaN, an infinity), stays for the reader to refuse."""
    changed = False
    if isinstance(conversions, dict) and isinstance(value, dict):
        items = [(name, inner) for name, inner in conversions.items() if value.get(name) is not None]
    elif isinstance(conversions, list) and isinstance(value, list):
        items = [(j, conversions[0]) for j, item in enumerate(value) if item is not None]
    else:
        return False
    for at, inner in items:
        if isinstance(inner, dict | list):
            changed |= _converted_in(value[at], inner)
            continue
        given = value[at]
        try:
            found = inner(given, str(at))
        except ValueError:
            continue
        if (isinstance(found, float) and not math.isfinite(found)) or _read_as_is(given, found):
            continue
        value[at] = str(found) if isinstance(found, decimal.Decimal) else found
        changed = True
    return changed


def _read_as_is(given: Any, found: Any) -> bool:
    """Whether the readers read ``given`` as its conversion, ``found``, so that its line need not be written again:
    the same value, an integer into a floating-point column, or a number into a decimal column. (The readers read
    a number's text exactly, where the parse here makes a double of it: a number that fits a decimal is read
    from the record's text, whatever its chunk, and one with more digits than the scale is refused.)"""
    if type(found) is type(given):
        return bool(found == given)
    if isinstance(found, decimal.Decimal):
        return isinstance(given, int | float) and not isinstance(given, bool)
    return isinstance(found, float) and type(given) is int


def _event_fields(
    row: pa.DataType, before: pa.DataType, added: dict[str, tuple[str | None, str]], columns: pa.Schema
) -> dict[str, pa.DataType] | None:
    """The fields a change event is read with for ``add.fields``' columns (``added``): ``op``, ``after``,
    ``before``, each added field's struct with the field in it, and the event's own field of each name (which
    Debezium takes when the struct lacks it). None when two of them would need one name with two types."""
    fields: dict[str, pa.DataType] = {"op": pa.string(), "after": row, "before": before}
    structs: dict[str, dict[str, pa.DataType]] = {}

    def need(name: str, arrow_type: pa.DataType) -> bool:
        return fields.setdefault(name, arrow_type) == arrow_type and name not in ("after", "before")

    for column, (struct, name) in added.items():
        arrow_type = columns.field(column).type
        if not need(name, arrow_type):
            return None
        if struct is not None and structs.setdefault(struct, {}).setdefault(name, arrow_type) != arrow_type:
            return None
    for struct, members in structs.items():
        if struct in fields:
            return None
        fields[struct] = pa.struct(list(members.items()))
    return fields


# A ``\\u0000`` escape, with the run of backslashes it ends: a NUL where the run is odd (an even one is escaped
# backslashes, then text).
NUL_ESCAPE = re.compile(rb"(\\+)u0000")
# Unicode's private use area (of the basic plane): a character of it stands in for NUL while arrow-rs reads.
PRIVATE_USE = range(0xE000, 0xF900)
# A private-use character written as an escape.
PRIVATE_USE_ESCAPE = re.compile(rb"\\u([eE][0-9a-fA-F]{3}|[fF][0-8][0-9a-fA-F]{2})")


def read_rust(data: bytes, schema: pa.Schema, reader: arro3.core.Schema, rows: int) -> pa.Table:
    """JSON lines read by arrow-rs's reader into ``schema`` (``reader``: it, as arro3's, made once by the
    caller); ValueError with its reason for lines that do not decode.

    arro3 hands the reader's error through Arrow's C stream interface, as C text: an error quoting a NUL
    character of the data (a raw one, or ``\\u0000`` in a string that does not fit its column) panics in
    pyo3-arrow and aborts the process, so one such record would crash its task at every try. Data with one is
    read with a private-use character standing in for it (one neither the data nor the schema's names hold),
    put back in the strings read and shown as ``\\u0000`` in the reason."""
    if b"\x00" not in data and b"\\u0000" not in data:
        return _read_rust(data, reader, rows)
    taken = {ord(c) for c in data.decode("utf-8", "ignore") if ord(c) in PRIVATE_USE}
    taken |= {int(m.group(1), 16) for m in PRIVATE_USE_ESCAPE.finditer(data)}
    taken |= {ord(c) for name in _names(schema) for c in name if ord(c) in PRIVATE_USE}
    free = next((c for c in PRIVATE_USE if c not in taken), None)
    if free is None:
        raise ValueError("the values hold a NUL character and every character that could stand in for it")
    stand_in, escape = chr(free), b"\\u%04x" % free

    def unescaped(match: re.Match[bytes]) -> bytes:
        run = match.group(1)
        return run[:-1] + escape if len(run) % 2 else match.group(0)

    replaced = NUL_ESCAPE.sub(unescaped, data.replace(b"\x00", stand_in.encode()))
    try:
        table = _read_rust(replaced, reader, rows)
    except ValueError as exc:
        # (arrow-rs quotes the character, or its first byte, or its code.)
        reason = str(exc).replace(stand_in, "\\u0000").replace(f"0x{free:04X}", "0x0000")
        raise ValueError(reason.replace(f"'{chr(stand_in.encode()[0])}'", "'\\u0000'")) from None
    return pa.Table.from_arrays(
        [
            _nul_restored(pa.concat_arrays(c.chunks) if c.num_chunks else c.combine_chunks(), stand_in)
            for c in table.columns
        ],
        schema=table.schema,
    )


def _names(schema: pa.Schema) -> Iterator[str]:
    """Every field name of ``schema``, at any depth of its structs and lists."""

    def of(kind: pa.DataType) -> Iterator[str]:
        if pa.types.is_struct(kind):
            for f in kind:
                yield f.name
                yield from of(f.type)
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            yield from of(kind.value_type)

    for f in schema:
        yield f.name
        yield from of(f.type)


def _read_rust(data: bytes, schema: arro3.core.Schema, rows: int) -> pa.Table:
    """arrow-rs's read of ``data`` (whose NUL characters ``read_rust`` stood in for), its error a ValueError."""
    try:
        batches = arro3.io.read_json(data, schema, batch_size=max(rows, 1)).read_all()
    except Exception as exc:
        # (arro3 raises plain Exceptions; with our own schema, only for records that do not decode.)
        raise ValueError(str(exc)) from exc
    return pa.table(batches)


def _nul_restored(array: pa.Array, stand_in: str) -> pa.Array:
    """``array`` with ``stand_in`` back to NUL in its strings, at any depth of its structs and lists."""
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pc.replace_substring(array, stand_in, "\x00")
    if pa.types.is_struct(kind):
        children = [_nul_restored(array.field(i), stand_in) for i in range(kind.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=array.is_null())
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        values = _nul_restored(array.values, stand_in)
        return type(array).from_arrays(array.offsets, values, type=kind, mask=array.is_null())
    return array


def _debezium_fields(
    columns: pa.Schema, pattern: str | None
) -> tuple[dict[str, pa.DataType], pa.StructType | None] | None:
    """The fields a change event is read with for DebeziumTransform, and the table's ``_cdc`` type if it has
    that column; None when the columns cannot make ``_cdc`` as the transformation does (a column of another
    shape, or a target pattern with braces of its own)."""
    if pattern is not None and any("{" in p or "}" in p for p in _target_parts(pattern) if p not in PLACEHOLDERS):
        return None
    row = pa.struct([f for f in columns if f.name != CDC])
    fields: dict[str, pa.DataType] = {"op": pa.string(), "after": row, "before": row, "source": SOURCE}
    if CDC not in columns.names:
        return fields, None
    cdc = columns.field(CDC).type
    if not pa.types.is_struct(cdc):
        return None
    for f in cdc:
        if f.name in ("op", "source", "target") and not pa.types.is_string(f.type):
            return None
        if f.name == "offset" and f.type != pa.int64():
            return None  # (a narrower one may not hold an offset: the plain decoder says which)
        if f.name == "key" and not (pa.types.is_struct(f.type) and _rust_readable(f.type)):
            return None
        if f.name == "ts":
            # (A timestamp, as the Java sink's tables type it, reads the event's epoch milliseconds: _read_cpp.)
            if not (_rust_readable(f.type) or pa.types.is_timestamp(f.type)):
                return None
            fields["ts_ms"] = f.type
    return fields, cdc


# The placeholders of DebeziumTransform's cdc.target.pattern.
PLACEHOLDERS = ("{db}", "{table}")


def _target_parts(pattern: str | None) -> list[str]:
    """``cdc.target.pattern`` split into its text and its placeholders (none without a pattern)."""
    return [p for p in re.split(r"(\{db\}|\{table\})", pattern) if p] if pattern else []


# Arrow C++'s reader's error for a field that holds a JSON value of another kind than its type takes.
TURNED = re.compile(r"Column\((.*)\) changed from (\w+) to (\w+) in row")
# What Arrow C++'s reader says of a number an integer field cannot take: a fraction, an exponent, or beyond 64 bits.
NOT_A_LONG = re.compile(r"Failed to convert JSON to int(64|32), couldn't parse")
# The doubles a field read as them holds exactly up to here: beyond, a long read as a double could be another long.
EXACT_DOUBLES = 2**53
# The struct a change event's or an envelope's row is read in (``JsonDecoder.parse_schema``).
ROW_HOLDERS = ("payload", "after", "before")


def _leaves(fields: Iterable[pa.Field], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], pa.DataType]]:
    """Each field of ``fields`` that is no struct or list, at any depth, with its path (``[]`` for a list's items)."""
    for f in fields:
        if pa.types.is_struct(f.type):
            yield from _leaves(f.type, (*path, f.name))
        elif pa.types.is_list(f.type):
            yield from _leaves([f.type.value_field.with_name("[]")], (*path, f.name))
        else:
            yield (*path, f.name), f.type


def _date_paths(fields: Sequence[pa.Field]) -> set[tuple[str, ...]]:
    """The paths of the date fields among ``fields``, at any depth."""
    return {path for path, arrow_type in _leaves(fields) if pa.types.is_date(arrow_type)}


def _time_paths(schema: pa.Schema, dates: set[tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The timestamp fields of ``schema`` and its date fields (``dates``, read as text: under a row's holder
    too), by their path as Arrow C++'s reader names it (``/a/b``, ``/list/[]``), each with its path."""
    return {
        "/" + "/".join(path): path
        for path, arrow_type in _leaves(schema)
        if pa.types.is_timestamp(arrow_type)
        or (
            pa.types.is_string(arrow_type)
            and (path in dates or (len(path) > 1 and path[0] in ROW_HOLDERS and path[1:] in dates))
        )
    }


def _with_numbers(schema: pa.Schema, paths: set[tuple[str, ...]], fractional: bool = False) -> pa.Schema:
    """``schema`` with the fields at ``paths`` read as numbers: a timestamp as a long (milliseconds), a date
    (text) as a date (the reader takes days); with ``fractional``, both as doubles."""

    def turned(arrow_type: pa.DataType, path: tuple[str, ...]) -> pa.DataType:
        if path in paths:
            if fractional:
                return pa.float64()
            return pa.int64() if pa.types.is_timestamp(arrow_type) else pa.date32()
        if pa.types.is_struct(arrow_type):
            return pa.struct([f.with_type(turned(f.type, (*path, f.name))) for f in arrow_type])
        if pa.types.is_list(arrow_type):
            return pa.list_(arrow_type.value_field.with_type(turned(arrow_type.value_type, (*path, "[]"))))
        return arrow_type

    return pa.schema([f.with_type(turned(f.type, (f.name,))) for f in schema], metadata=schema.metadata)


def _as_read(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A table read with some timestamp and date fields as numbers (``_with_numbers``) in ``schema``'s types: the
    milliseconds as the timestamp's unit (one beyond its range does not fit), the days as a date's text; doubles
    truncated toward zero first. Fields keep the nullability the reader gave them, as it gives it reading those
    fields as text."""

    def converted(array: pa.Array, arrow_type: pa.DataType, path: str) -> pa.Array:
        if array.type == arrow_type:
            return array
        if pa.types.is_floating(array.type):
            whole = pc.trunc(array)
            if pc.any(pc.invert(pc.less(pc.abs(whole), EXACT_DOUBLES))).as_py():
                # (Infinite or NaN ones included: not JSON, but the reader may take them.)
                raise ValueError(
                    f"Column({path}): a number beyond 2^53, read as a double (which does not hold it exactly)"
                )
            longs = whole.cast(pa.int64())
            if pa.types.is_timestamp(arrow_type):
                array = longs
            else:
                try:
                    array = longs.cast(pa.int32()).cast(pa.date32())
                except pa.ArrowInvalid:
                    raise ValueError(f"Column({path}): days a date cannot hold") from None
        if pa.types.is_struct(arrow_type):
            # (With schema evolution the reader gives a struct the new fields of its values too: kept as read.)
            children = [
                converted(child, arrow_type.field(read.name).type, f"{path}/{read.name}")
                if arrow_type.get_field_index(read.name) >= 0
                else child
                for child, read in zip(array.flatten(), array.type, strict=True)
            ]
            fields = [read.with_type(child.type) for read, child in zip(array.type, children, strict=True)]
            return pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null())
        if pa.types.is_list(arrow_type):
            values = converted(array.flatten(), arrow_type.value_type, f"{path}/[]")
            offsets = pc.subtract(array.offsets, array.offsets[0])
            list_type = pa.list_(array.type.value_field.with_type(values.type))
            return pa.ListArray.from_arrays(offsets, values, type=list_type, mask=array.is_null())
        if pa.types.is_timestamp(arrow_type):
            per_milli = {"s": 0, "ms": 1, "us": 1_000, "ns": 1_000_000}[arrow_type.unit]
            try:
                if not per_milli:
                    raise pa.ArrowInvalid("seconds")
                return pc.multiply_checked(array, per_milli).cast(arrow_type)
            except pa.ArrowInvalid:
                raise ValueError(f"Column({path}): epoch milliseconds a {arrow_type} cannot hold") from None
        return array.cast(arrow_type)  # (a date's days as its text, which the cast to the columns reads back)

    fields, arrays = [], []
    for read in table.schema:
        wanted = schema.field(read.name).type if read.name in schema.names else read.type
        column = pa.chunked_array(
            [converted(chunk, wanted, f"/{read.name}") for chunk in table.column(read.name).chunks],
            type=None if table.column(read.name).num_chunks else wanted,
        )
        fields.append(read.with_type(column.type))
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _relaxed(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable, at every depth."""

    def nullable(arrow_type: pa.DataType) -> pa.DataType:
        if pa.types.is_struct(arrow_type):
            return pa.struct([f.with_type(nullable(f.type)).with_nullable(True) for f in arrow_type])
        if pa.types.is_list(arrow_type):
            return pa.list_(arrow_type.value_field.with_type(nullable(arrow_type.value_type)).with_nullable(True))
        return arrow_type

    return pa.schema([f.with_type(nullable(f.type)).with_nullable(True) for f in schema], metadata=schema.metadata)


def in_order(tables: Sequence[pa.Table], positions: Sequence[int]) -> tuple[pa.Table, list[int]]:
    """Rows of ``tables`` (their positions, in the tables' order) put back in their positions' order."""
    table = pa.concat_tables(tables)
    order = np.argsort(np.asarray(positions, dtype=np.int64), kind="stable")
    if np.all(order[:-1] < order[1:]):
        return table, list(positions)
    return table.take(pa.array(order)), [positions[int(i)] for i in order]


def _reason(exc: BaseException) -> str:
    first_line = str(exc).split("\n")[0]
    for prefix in ("JSON parse error: ", "C Data interface error: ", "Json error: "):
        first_line = first_line.removeprefix(prefix)
    return first_line


def _not_an_object(value: bytes) -> str:
    try:
        # (As UTF-8, as Kafka Connect's JsonConverter reads it: json.loads would guess UTF-16 or 32 from the
        # first bytes of binary garbage, and say that codec failed.)
        parsed = json.loads(value.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return f"{DOES_NOT_FIT}: not UTF-8 text ({exc.reason} at byte {exc.start})"
    except ValueError as exc:
        return f"{DOES_NOT_FIT}: {exc}"
    return f"{NOT_AN_OBJECT} (it is {type(parsed).__name__ if parsed is not None else 'null'})"


def text_column(values: Sequence[bytes | None], as_string: bool) -> tuple[pa.Array, list[tuple[int, str]]]:
    """Raw values as binary or UTF-8 text; values that are not UTF-8 are bad for a string column."""
    array = pa.array(values, pa.binary())
    if not as_string:
        return array, []
    try:
        return array.cast(pa.string()), []
    except pa.ArrowInvalid:
        bad, text = [], []
        for i, value in enumerate(values):
            try:
                text.append(value.decode() if value is not None else None)
            except UnicodeDecodeError as exc:
                bad.append((i, f"value is not UTF-8 text: {exc}"))
                text.append(None)
        return pa.array(text, pa.string()), bad


def utf8_lossy(values: Sequence[bytes | None]) -> pa.Array:
    array = pa.array(values, pa.binary())
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([v.decode("utf-8", "replace") if v is not None else None for v in values], pa.string())
