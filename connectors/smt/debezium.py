"""Debezium's ``ExtractNewRecordState`` and the Iceberg sink's ``DebeziumTransform`` and ``CopyValue``.

Both Debezium transforms take a change event's envelope (``before``,
``after``, ``source``, ``op``, ``ts_ms``); a record that is not one (a
heartbeat, a schema change) passes unchanged, as with Debezium's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from connectors.smt import schemas
from connectors.smt.kafka import to_text
from connectors.smt.record import (
    ConnectRecord,
    DataException,
    Props,
    Source,
    Transformation,
    java_split,
    require_map,
)

# Where Debezium looks for a field named in add.fields / add.headers without its struct: the envelope's own
# fields (None), the transaction block's, MongoDB's updateDescription, else the source block.
FIELD_STRUCTS: dict[str, str | None] = {
    "op": None,
    "ts_ms": None,
    "ts_us": None,
    "ts_ns": None,
    "id": "transaction",
    "total_order": "transaction",
    "data_collection_order": "transaction",
    "updateDescription": "updateDescription",
}


def is_envelope(value: Any) -> bool:
    """Whether a schemaless value is a change event (Debezium checks its schema's name; without a schema,
    its fields tell)."""
    return isinstance(value, dict) and "op" in value and ("after" in value or "before" in value)


def _references(props: Props, key: str, prefix: str) -> list[tuple[str | None, str, str]]:
    """(struct, field, name added) of each field a list names, as Debezium's ``FieldReference`` reads them:
    ``op`` -> ``__op``; ``lsn`` (a field of ``source``) -> ``__lsn``; ``source.ts_ms`` ->
    ``__source_ts_ms``; ``table:TABLE_NAME`` -> ``__TABLE_NAME`` (the prefix added to a new name too)."""
    found: list[tuple[str | None, str, str]] = []
    value = props.text(key)
    for item in (part.strip() for part in value.split(",")) if value else ():
        parts = java_split(item, ":")
        if len(parts) > 2:
            props.error(key, f"Unexpected field name: {item}")
            continue
        path = (java_split(parts[0], ".") if parts else []) or [""]
        name = path[0] if len(path) == 1 else path[1]
        struct = FIELD_STRUCTS.get(name, "source") if len(path) == 1 else path[0]
        default = name if len(path) == 1 else f"{struct}_{name}"
        found.append((struct, name, prefix + (parts[1] if len(parts) == 2 else default)))
    return found


@dataclass(frozen=True)
class ColumnarUnwrap:
    """``ExtractNewRecordState`` as a decoder applies it to columns, reading each change event's ``after``
    (and ``before``) straight into a table's columns (``workers.json_decoder``): an event with ``op`` and
    ``after`` is its ``after``; a delete (``op``, ``before``, no ``after``) is dropped, or with ``rewrite`` is
    its ``before``, and ``__deleted`` is ``"true"`` for it and ``"false"`` for the others. ``fields`` are
    ``add.fields``' (struct, field, name added: ``_references``). Any other value goes through the
    transformation itself, record by record."""

    rewrite: bool
    fields: tuple[tuple[str | None, str, str], ...] = ()

    @property
    def added(self) -> frozenset[str]:
        """The fields it adds to every row: ``add.fields``', and with ``rewrite`` ``__deleted``."""
        return frozenset([added for *_, added in self.fields] + (["__deleted"] if self.rewrite else []))


@dataclass(frozen=True)
class ColumnarDebezium:
    """The Iceberg sink's ``DebeziumTransform`` as a decoder applies it to columns (``workers.json_decoder``):
    each change event's row is read from its ``after`` (``before`` for a delete) straight into the table's
    columns, and the ``_cdc`` column is made from its ``op``, ``ts_ms`` and ``source``, the record's offset
    and its key. ``json_keys``: the keys are JSON (``key.converter``), so a key that is an object is
    ``_cdc.key``, and one that is not JSON makes its record bad, as the transformation's stage says. A value
    the columns cannot tell goes through the transformation itself, record by record."""

    target_pattern: str | None
    json_keys: bool = True

    @property
    def added(self) -> frozenset[str]:
        """The field it adds to every row."""
        return frozenset(["_cdc"])


# How a chain of one Debezium transformation is applied to columns by the decoders.
Columnar = ColumnarUnwrap | ColumnarDebezium


class ExtractNewRecordState(Transformation):
    """A change event as its row: ``after`` (the row's state after the change), with deletes (no ``after``)
    and tombstones handled by ``delete.tombstone.handling.mode`` (or, set without it, the older
    ``delete.handling.mode`` and ``drop.tombstones`` that Debezium took until 3.2), truncates dropped, and
    envelope fields added by ``add.fields`` / ``add.headers``. A value that is not a change event passes
    unchanged."""

    CLASSES = ("io.debezium.transforms.ExtractNewRecordState",)
    MODES = ("drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone")

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        mode = props.choice("delete.tombstone.handling.mode", self.MODES, "")
        legacy_deletes = props.choice("delete.handling.mode", ("drop", "rewrite", "none"), "drop")
        drop_tombstones = props.boolean("drop.tombstones", True)
        if not mode and ("delete.handling.mode" in props.props or "drop.tombstones" in props.props):
            # Debezium up to 3.1 with the older two keys (their defaults: deletes and tombstones dropped).
            self.delete = {"drop": "drop", "rewrite": "rewrite", "none": "tombstone"}[legacy_deletes]
            self.keep_tombstones = not drop_tombstones
        else:
            # delete.tombstone.handling.mode (which wins over the older keys); its default, ``tombstone``,
            # is Debezium 3.2's default: a delete event becomes a tombstone, the one that followed it goes.
            mode = mode or "tombstone"
            self.delete = {
                "drop": "drop",
                "tombstone": "tombstone",
                "rewrite": "rewrite",
                "rewrite-with-tombstone": "rewrite",
                "delete-to-tombstone": "tombstone",
            }[mode]
            self.keep_tombstones = mode == "rewrite-with-tombstone"
        self.fields = _references(props, "add.fields", props.text("add.fields.prefix", "__"))
        self.headers = _references(props, "add.headers", props.text("add.headers.prefix", "__"))
        props.unsupported(
            "route.by.field", "routing by a field's value renames topics, which the sinks here do not support"
        )
        props.unsupported("drop.fields.header.name", "dropping the fields a header lists needs the record's schema")
        # (These two only shape what drop.fields.header.name drops.)
        props.boolean("drop.fields.from.key", False)
        props.boolean("drop.fields.keep.schema.compatible", True)
        props.boolean("replace.null.with.default", True)  # (a schema's default values: none here)

    @property
    def columnar(self) -> ColumnarUnwrap | None:
        """This transformation as a decoder can apply it to columns; None when it adds headers (``add.headers``),
        which only the record-by-record transformation adds. (A tombstone goes either way: dropped here, or kept
        and skipped by the sink.)"""
        if self.headers:
            return None
        return ColumnarUnwrap(rewrite=self.delete == "rewrite", fields=tuple(self.fields))

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        envelope = record.value
        if envelope is None:
            # A tombstone: of the headers, only the operation, as a delete's.
            record.headers.extend((added, "d") for struct, name, added in self.headers if name == "op")
            return record if self.keep_tombstones else None
        if not is_envelope(envelope):
            return record
        record.headers.extend(self._field_values(envelope, self.headers))
        row = envelope.get("after")
        if row is None:
            row = envelope.get("before")
            if row is None:
                return None  # a truncate (neither state): dropped
            if self.delete == "drop":
                return None
            if self.delete == "tombstone":
                record.value = None
                return record
            deleted = "true"
        else:
            deleted = "false"
        if self.delete == "rewrite" and isinstance(row, dict):
            row = {**row, "__deleted": deleted}
        if self.fields:
            row = dict(require_map(row, "source field insertion"))
            row.update(self._field_values(envelope, self.fields))
        record.value = row
        return record

    def value_schema(self, schema: schemas.Schema) -> schemas.Schema | None:
        """The row's schema (``after``'s), with ``__deleted`` in a rewrite mode and the fields ``add.fields``
        adds, each optional, as Debezium makes them; a schema that is no change event's passes unchanged."""
        row = schemas.field(schema, "after") or schemas.field(schema, "before")
        if schema.get("type") != "struct" or row is None or schemas.field(schema, "op") is None:
            return schema
        if row.get("type") != "struct":
            raise DataException(f"the change event's after is no struct: {row.get('type')}")
        members = schemas.fields(row)
        if self.delete == "rewrite":
            members.append(("__deleted", schemas.primitive("string", optional=True)))
        for struct_name, name, added in self.fields:
            holder = schema if struct_name is None else schemas.field(schema, struct_name)
            found = schemas.field(holder, name) if holder is not None else None
            if found is None:
                found = schemas.field(schema, name)
            if found is not None:
                members.append((added, schemas.with_optional(found, True)))
        return schemas.struct(row, members)

    @staticmethod
    def _field_values(envelope: dict[str, Any], references: list[tuple[str | None, str, str]]) -> list[tuple[str, Any]]:
        """The referenced fields the event has, with their added names: a field of its struct, else a field
        of the event itself of that name (one another transformation added); a field of a struct that is
        null (no transaction block while snapshotting) is null. Debezium adds those its schema has; without
        a schema, those the event has."""
        values = []
        for struct, name, added in references:
            if struct is not None and struct in envelope and envelope[struct] is None:
                values.append((added, None))
                continue
            holder = envelope if struct is None else envelope.get(struct)
            if isinstance(holder, dict) and name in holder:
                values.append((added, holder[name]))
            elif name in envelope:
                values.append((added, envelope[name]))
        return values


class DebeziumTransform(Transformation):
    """The Iceberg sink's CDC transform: a change event as its row (``after``; ``before`` for a delete)
    with a ``_cdc`` field: ``op`` (I, U or D), ``ts``, ``offset``, ``source`` (``db.table``), ``target``
    (``cdc.target.pattern`` with ``{db}`` and ``{table}``, else ``db.table``) and the record's key when it
    is a map. Tombstones pass unchanged."""

    CLASSES = (
        "org.apache.iceberg.connect.transforms.DebeziumTransform",
        "io.tabular.iceberg.connect.transforms.DebeziumTransform",
    )
    OPS = {"u": "U", "d": "D"}
    USES_KEY = True  # (``_cdc.key``)

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.target_pattern = props.text("cdc.target.pattern")

    @property
    def columnar(self) -> ColumnarDebezium:
        """This transformation as a decoder applies it to columns."""
        return ColumnarDebezium(self.target_pattern or None)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.value is None:
            return record
        value = require_map(record.value, "Debezium transform")
        if value.get("op") is None:
            raise DataException("a Debezium change event needs its op")
        op = self.OPS.get(to_text(value["op"]), "I")
        payload = value.get("before" if op == "D" else "after")
        if not isinstance(payload, dict):
            return None  # (as the Iceberg sink's: "payload is not a map, skipping")
        source = require_map(value.get("source"), "Debezium transform")
        db = source.get("schema") if "schema" in source else source.get("db")
        table = source.get("table")
        if db is None or table is None:
            raise DataException("the change event's source names no schema or db, or no table")
        db, table = to_text(db), to_text(table)
        target = (
            self.target_pattern.replace("{db}", db).replace("{table}", table)
            if self.target_pattern
            else f"{db}.{table}"
        )
        cdc: dict[str, Any] = {
            "op": op,
            "ts": value.get("ts_ms"),
            "offset": record.offset,
            "source": f"{db}.{table}",
            "target": target,
        }
        if isinstance(record.key, dict):
            cdc["key"] = record.key
        record.value = {**payload, "_cdc": cdc}
        return record

    # ``_cdc``'s schema with a value schema (the Iceberg sink's ``makeCdcSchema``): the key, whose schema a key
    # read schemaless lacks, is not in it.
    CDC_SCHEMA: ClassVar[schemas.Schema] = schemas.struct(
        None,
        [
            ("op", schemas.primitive("string")),
            ("ts", schemas.logical(schemas.TIMESTAMP)),
            ("offset", schemas.primitive("int64", optional=True)),
            ("source", schemas.primitive("string")),
            ("target", schemas.primitive("string")),
        ],
    )

    def value_schema(self, schema: schemas.Schema) -> schemas.Schema:
        """The row's schema (``after``'s; ``before``'s, the same, for a delete) and ``_cdc``."""
        row = schemas.field(schemas.require_struct(schema, "Debezium transform"), "after")
        if row is None or row.get("type") != "struct":
            raise DataException("the change event's schema has no struct after")
        return schemas.struct(row, [*schemas.fields(row), ("_cdc", self.CDC_SCHEMA)])


class CopyValue(Transformation):
    """The Iceberg sink's CopyValue: the value's ``source.field`` copied to ``target.field``."""

    CLASSES = (
        "org.apache.iceberg.connect.transforms.CopyValue",
        "io.tabular.iceberg.connect.transforms.CopyValue",
    )

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.source = props.required("source.field")
        self.target = props.required("target.field")

    def source_of(self, output: Source) -> Source | None:
        """The target field comes from the source field (null where the value lacks it); the others are the
        value's. (Not a target that may be the copy or another field, a record at a time: the copy is in every
        value.)"""
        if self.target not in output.fields:
            return output
        if len(output.fields) > 1 or output.meta is not None:
            return None
        return Source(fields=(self.source,))

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        if record.value is None:
            return record
        value = dict(require_map(record.value, "copy value"))
        value[self.target] = value.get(self.source)
        record.value = value
        return record

    def value_schema(self, schema: schemas.Schema) -> schemas.Schema:
        """The value's schema and the copy's, the source field's (a field of that name already there, or no
        source field, is a record Kafka's refuses)."""
        struct = schemas.require_struct(schema, "copy value")
        source = schemas.field(struct, self.source)
        if source is None:
            raise DataException(f"the value's schema has no field {self.source}")
        return schemas.struct(struct, [*schemas.fields(struct), (self.target, source)])


TRANSFORMATIONS: list[type[Transformation]] = [ExtractNewRecordState, DebeziumTransform, CopyValue]
