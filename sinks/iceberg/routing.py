"""Which tables each record goes to, as Apache Iceberg's sink routes them (``iceberg.tables.route-field``).

- Without a route field, every record goes to every table iceberg.tables lists.
- Statically, a record goes to each listed table whose ``iceberg.table.<table>.route-regex`` matches the
  field's whole value (a table without one gets none).
- Dynamically (``iceberg.tables.dynamic-enabled``), the value, lower-cased, names the record's one table.

Records are routed before they are decoded, so that each table's records are decoded into its own columns
(and a missing table is created from its own records). The field is read by the JSON decoder both data
planes decode with, as a one-column table: nested fields are structs (``_cdc.target``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.config import SinkConfig
from workers.json_decoder import JsonDecoder

# A table a record names: namespace.table, each part an identifier (sinks.iceberg.settings.IDENTIFIER_PART).
TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$-]*(\.[A-Za-z_][A-Za-z0-9_$-]*)+$")


@dataclass
class Routed:
    """A run of records, routed: each table's records (their positions in the run, in order), the records
    no table can take (bad, with why) and those that go to no table (tombstones, no route value)."""

    tables: dict[str, list[int]] = field(default_factory=dict)
    bad: list[tuple[int, str]] = field(default_factory=list)
    skipped: int = 0


def router_for(config: SinkConfig) -> Router | None:
    """The config's router; None for one table and no route field, whose records all go to it as they are
    (the common case: no record is read for routing)."""
    settings = config.settings
    return None if settings.route_field is None and len(settings.tables) == 1 else Router(config)


class Router:
    """Routes runs of staged values (``route``) by the config's route field, or to every table without one."""

    def __init__(self, config: SinkConfig) -> None:
        settings = config.settings
        self.field: str | None = settings.route_field
        self.dynamic: bool = settings.dynamic
        self.tables = [t.name for t in settings.tables]
        self.regexes = [(t.name, t.route_regex) for t in settings.tables if t.route_regex is not None]
        self.dead_letter_table: str | None = settings.dead_letter_table
        self.envelope = config.value_converter == "json" and config.schemas_enable
        self.json = config.value_converter in ("json", "avro")
        path = self.field.split(".") if self.field else []
        # The field's value as text: the innermost of nested structs.
        value: pa.DataType = pa.string()
        for name in reversed(path[1:]):
            value = pa.struct([pa.field(name, value)])
        self.path = path
        self.decoder = JsonDecoder(
            pa.schema([pa.field(path[0], value)]) if path else pa.schema([]), envelope=self.envelope
        )

    def route(self, values: Sequence[bytes | None], errors: Sequence[str | None]) -> Routed:
        routed = Routed()
        if not self.json:
            # (Text and bytes values have no fields: every record to every table, which decode them.)
            good = []
            for i, error in enumerate(errors[: len(values)]):
                if error is not None:
                    routed.bad.append((i, str(error)))
                else:
                    good.append(i)
            routed.tables = {name: good for name in self.tables}
            return routed
        decoded = self.decoder.decode(values, errors)
        routed.skipped = decoded.skipped
        if self.field is None:
            routed.bad = decoded.bad
            routed.tables = {name: decoded.positions for name in self.tables}
            return routed
        # Each record's route value, as positions and texts: those the reader read (a dictionary of the
        # distinct values, few where records name tables), then those it refused as text (numbers, booleans).
        positions = np.asarray(decoded.positions, dtype=np.int64)
        texts: Any = pa.array([], pa.string())
        if decoded.positions:
            texts = decoded.columns.column(0).combine_chunks()
            for name in self.path[1:]:
                # (struct_field, not StructArray.field: a null struct's child slot may hold any value.)
                texts = pc.struct_field(texts, name)
        scalars: list[tuple[int, Any]] = []
        for position, reason in decoded.bad:
            # The arrow reader reads the field as text; Iceberg's sink takes any value's text (a number's too).
            text = self._scalar_text(values[position]) if errors[position] is None else False
            if text is not False:
                scalars.append((position, text))
            else:
                routed.bad.append((position, reason))
        if scalars:
            positions = np.concatenate([positions, np.asarray([p for p, _ in scalars], dtype=np.int64)])
            texts = pa.concat_arrays([texts, pa.array([t for _, t in scalars], pa.string())])
        order = np.argsort(positions, kind="stable")
        positions = positions[order]
        encoded = texts.take(pa.array(order)).dictionary_encode()
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        indices = np.where(encoded.is_null().to_numpy(zero_copy_only=False), -1, indices)
        # The tables of each distinct value, decided once per value.
        by_table: dict[str, list[int]] = {}
        for index, value in enumerate([None, *encoded.dictionary.to_pylist()], start=-1):
            named = self.tables_of(value)
            matching = positions[indices == index]
            if isinstance(named, str):
                routed.bad.extend((int(p), named) for p in matching)
                continue
            if not named:
                # (Iceberg's sink writes a record without a value, or matching no table, nowhere.)
                routed.skipped += len(matching)
            for table in named:
                by_table.setdefault(table, []).append(index)
        for table, indexes in by_table.items():
            routed.tables[table] = positions[np.isin(indices, indexes)].tolist()
        routed.bad.sort()
        return routed

    def tables_of(self, value: str | None) -> list[str] | str:
        """The tables a record whose route field is ``value`` (its text; None: no value) goes to, or why it
        can go to none (dynamic routing: a bad record)."""
        if value is None:
            return []
        if not self.dynamic:
            return [name for name, regex in self.regexes if regex.fullmatch(value)]
        table = value.lower()
        if not TABLE_NAME.fullmatch(table):
            return f"{self.field} is {value!r}, which names no table: a table is namespace.table"
        if table == self.dead_letter_table:
            return f"{self.field} names the dead-letter table {table}"
        return [table]

    def _scalar_text(self, value: bytes | None) -> str | bool | None:
        """The route field's value in ``value`` as text when it is a number or a boolean (which the arrow
        reader refuses as text), None when it is absent or null; False when the record cannot be routed."""
        try:
            record = json.loads(value) if value is not None else None
        except ValueError:
            return False
        if self.envelope:
            record = record.get("payload") if isinstance(record, dict) else None
        for name in self.path:
            if not isinstance(record, dict):
                return False
            record = record.get(name)
        if record is None:
            return None
        if isinstance(record, bool):
            return "true" if record else "false"
        if isinstance(record, (int, float)):
            return str(record)
        return False
