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
several times faster than Arrow C++'s (bench/spark_decoding.py). It converts
as the Iceberg sink's RecordConverter does: a number with a fraction into an
integer column is truncated toward zero (Java's ``longValue()``) and a string
of digits into a numeric column is parsed; what does not fit (an overflow, a
string that is not a number, a boolean for a number...) fails. Arrow C++'s
reader, stricter on both, serves columns of date, timestamp or decimal types
(arrow-rs would take a number into a timestamp column as microseconds, Kafka
Connect takes milliseconds) and schema evolution, which needs its typing of
fields the columns lack.

Columns of the types neither reader reads from JSON (UUID, binary, fixed,
time and map) are converted by Python (``json_values``): a UUID, binary or
fixed column from the text the readers read for it; a column with a time or
map anywhere within it from each record parsed again. As the Iceberg sink's
RecordConverter converts them: a UUID from its text, binary
and fixed from base64 text, a time from ISO-8601 text or milliseconds since
midnight, a map from an object. Only tables with such columns pay for it.

Undecodable records are found without giving up the fast path: a chunk that
fails to parse is split in halves until the bad records stand alone, so a
poison record costs O(log chunk) parses, not one per record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import arro3.core
import arro3.io
import pyarrow as pa
import pyarrow.json as pj

from workers.json_text import json_text, parse_json
from workers.json_values import column_of, column_of_text, converter, python_decoded, read_as_text
from workers.schemas import inferred_from_parsed, new_fields_of, widened
from workers.writes import narrow_type

NOT_AN_OBJECT = "value is not a JSON object"
NO_PAYLOAD = "the Kafka Connect envelope has no payload (schemas.enable=true needs one)"
PRESENT = "_payload_present"
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
    ) -> None:
        self.data_schema = data_schema
        self.envelope = envelope
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
        if evolve and envelope:
            raise ValueError("an envelope's new fields come from its schema, not from typing its values")
        # With schema evolution the reader also types the fields the table
        # lacks, as it would for a table it knew nothing of; without, it
        # skips them (as the Iceberg sink ignores them).
        self.evolve = evolve
        self._options = pj.ParseOptions(
            explicit_schema=self.parse_schema, unexpected_field_behavior="infer" if evolve else "ignore"
        )
        self.rust_reader = not evolve and all(_rust_readable(f.type) for f in self.parse_schema)
        self._rust_schema = arro3.core.Schema.from_arrow(self.parse_schema)
        # With schema evolution, what the records of the chunks parsed so far have, as read (new fields).
        self._read_schema: pa.Schema | None = None

    def decode(self, values: Sequence[bytes | None], errors: Sequence[str | None]) -> Decoded:
        self._read_schema = None
        lines: list[bytes] = []
        positions: list[int] = []
        bad: list[tuple[int, str]] = []
        skipped = 0
        for i, value in enumerate(values):
            if errors[i] is not None:
                bad.append((i, str(errors[i])))
            elif value is None:
                skipped += 1  # a tombstone: nothing to write
            elif value[:1] == b"{":
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
            self._isolate(lines, positions, tables, good, bad)
        columns = pa.concat_tables(tables) if tables else self.data_schema.empty_table()
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
        if self.envelope:
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
        arrays = [converted[f.name] if f.name in converted else table.column(f.name) for f in self.data_schema]
        fields = list(self.data_schema)
        if self.envelope:
            arrays.append(table.column(PRESENT))
            fields.append(pa.field(PRESENT, pa.bool_()))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def _read_rust(self, data: bytes, rows: int) -> pa.Table:
        try:
            batches = arro3.io.read_json(data, self._rust_schema, batch_size=rows).read_all()
        except Exception as exc:
            # (arro3 raises plain Exceptions; with our own schema, only for
            # records that do not decode.)
            raise ValueError(str(exc)) from exc
        return pa.table(batches)

    def _read_cpp(self, data: bytes) -> pa.Table:
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
            parse_options=self._options,
        )
        return reader.read_all()

    def _isolate(
        self,
        lines: Sequence[bytes],
        positions: Sequence[int],
        tables: list[pa.Table],
        good: list[int],
        bad: list[tuple[int, str]],
    ) -> None:
        try:
            tables.append(self._parse(lines))
            good.extend(positions)
            return
        except (pa.ArrowInvalid, ValueError) as exc:
            # (Not ArrowNotImplementedError: a type the reader lacks is the
            # writer's fault, not the records'; it fails the write.)
            if len(lines) > 1:
                middle = len(lines) // 2
                self._isolate(lines[:middle], positions[:middle], tables, good, bad)
                self._isolate(lines[middle:], positions[middle:], tables, good, bad)
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
