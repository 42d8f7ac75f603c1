"""Apache Kafka's transformations and predicates (``org.apache.kafka.connect.transforms``), schemaless.

Each does what Kafka's own does to a record without a schema, with its keys,
defaults and errors; tests/test_transforms.py checks them case by case.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, ClassVar

from connectors.smt import schemas, timestamps
from connectors.smt.record import (
    ConnectRecord,
    DataException,
    KeyOrValue,
    Predicate,
    Props,
    Source,
    Transformation,
    java_map_order,
    java_split,
    last_in_java_order,
    require_map,
    type_name,
)

PACKAGE = "org.apache.kafka.connect.transforms"


def _variants(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The class names of a transformation's $Key and $Value variants."""
    return (f"{PACKAGE}.{name}$Key",), (f"{PACKAGE}.{name}$Value",)


def _field_name(spec: str) -> str:
    """InsertField's field names may end with ``!`` (required) or ``?`` (optional): without a schema, alike."""
    return spec[:-1] if spec.endswith(("!", "?")) else spec


def _schema_only(props: Props) -> None:
    """``replace.null.with.default`` (a BOOLEAN) acts on a schema's default values only: without a schema it
    changes nothing, so it is validated and left."""
    props.boolean("replace.null.with.default", True)


class InsertField(KeyOrValue):
    """Adds the record's topic, partition, offset, timestamp (epoch milliseconds, as Kafka's schemaless
    InsertField) or a static value as fields; a record without a timestamp gets no timestamp field. (A key set
    to an empty name is refused: Kafka's would insert a field named ``""``, seldom what it meant.)"""

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.fields = []
        # (Whether each kind's field is optional in the record's schema: a name ending in ``!`` is required.)
        self.optional: dict[str, bool] = {}
        empty = False
        for kind in ("topic", "partition", "offset", "timestamp", "static"):
            key = f"{kind}.field"
            spec = props.text(key)
            name = _field_name(spec)
            if name:
                self.fields.append((kind, name))
                self.optional[kind] = not spec.endswith("!")
            elif key in props.props:
                props.error(key, f"{key} names no field: Kafka Connect would insert a field named ''; remove the key")
                empty = True
        self.static_value = props.string("static.value")
        _schema_only(props)
        if not self.fields and not empty:
            props.error(
                "topic.field",
                "No field insertion configured: set at least one of topic.field, partition.field, "
                "offset.field, timestamp.field, static.field",
            )
        if any(kind == "static" for kind, _ in self.fields) and self.static_value is None:
            props.error("static.value", f"No value specified for static field: {props.text('static.field')}")

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        value = self.operating(record)
        if value is None:
            return record
        updated = dict(require_map(value, "field insertion"))
        for kind, name in self.fields:
            inserted = {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "static": self.static_value,
            }[kind]
            if inserted is not None or kind in ("topic", "offset"):
                updated[name] = inserted
        return self.with_operating(record, updated)

    # The types of the fields it inserts into a struct (the timestamp's is Connect's Timestamp).
    TYPES: ClassVar[dict[str, str]] = {"topic": "string", "partition": "int32", "offset": "int64", "static": "string"}

    def operating_schema(self, schema: schemas.Schema) -> schemas.Schema:
        struct = schemas.require_struct(schema, "field insertion")
        inserted = [
            (
                name,
                schemas.logical(schemas.TIMESTAMP, self.optional[kind])
                if kind == "timestamp"
                else schemas.primitive(self.TYPES[kind], self.optional[kind]),
            )
            for kind, name in self.fields
        ]
        return schemas.struct(struct, [*schemas.fields(struct), *inserted])

    def source_of(self, output: Source) -> Source | None:
        """An inserted field comes from the record (``Source.meta``, the kind inserted), the others from the
        value; a field that may be an inserted one or one of the value's, a record at a time, keeps the value's
        that may be it. (Not for keys, nor a field inserted twice, which the later kind overwrites unless it is a
        missing timestamp.) A record without a timestamp gets no timestamp field: the decoder hands it to the
        transformation itself."""
        names = [name for _, name in self.fields]
        if self.ON_KEY or len(set(names)) != len(names):
            return None
        inserted = [(kind, name) for kind, name in self.fields if name in output.fields]
        if not inserted:
            return output
        if output.meta is not None or len(inserted) > 1:
            return None  # (two InsertFields' fields, each the one a record has: record by record)
        kind, name = inserted[0]
        return Source(
            tuple(f for f in output.fields if f != name), kind, self.static_value if kind == "static" else None
        )


class ReplaceField(KeyOrValue):
    """Keeps (``include``), drops (``exclude``, which wins) and renames (``renames``, ``old:new``) fields;
    ``whitelist`` and ``blacklist`` are the names Kafka before 4.0 also took for ``include`` and ``exclude``
    (``ConfigUtils.translateDeprecatedConfigs``: used when the new name is not set; with both set Kafka 3 used
    the new one and ignored the old, which is refused here, since one of them would be ignored)."""

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.exclude = set(self._renamed(props, "exclude", "blacklist"))
        self.include = set(self._renamed(props, "include", "whitelist"))
        self.renames: dict[str, str] = {}
        for mapping in props.list("renames"):
            parts = java_split(mapping, ":")
            if len(parts) != 2:
                props.error("renames", f"Invalid rename mapping: {mapping}")
            else:
                self.renames[parts[0]] = parts[1]
        # (Fields may become one only where a rename's target is a field of the value, or two renames share one.)
        self._targets = set(self.renames.values())
        self._merging = len(self._targets) < len(self.renames)
        _schema_only(props)

    @staticmethod
    def _renamed(props: Props, key: str, deprecated: str) -> list[str]:
        if deprecated not in props.props:
            return props.list(key)
        if key in props.props:
            props.read.add(deprecated)
            props.list(key)
            props.error(
                deprecated,
                f"{key} is set too: {deprecated} is its deprecated name, which Kafka Connect ignores when {key} "
                "is set; remove one",
            )
            return []
        return props.list(deprecated)

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        value = self.operating(record)
        if value is None:
            return record
        fields = require_map(value, "field replacement")
        if not self._merging and self._targets.isdisjoint(fields):
            return self.with_operating(
                record, {self.renames.get(name, name): field for name, field in fields.items() if self._kept(name)}
            )
        # Two fields may become one (``a`` renamed to ``b`` beside a ``b`` kept): Kafka keeps the later in its
        # map's order.
        pairs = [(self.renames.get(name, name), name, field) for name, field in fields.items() if self._kept(name)]
        order = {name: i for i, name in enumerate(java_map_order(fields))}
        return self.with_operating(record, last_in_java_order(pairs, order))

    def _kept(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def apply_value_with_schema(self, record: ConnectRecord, schema: schemas.Schema) -> ConnectRecord:
        """As Kafka's replaces a struct's fields: each field of the new schema (a kept field, by its new name)
        takes the value of the field renamed to that name, if any, else of its own name: so a field kept beside
        a rename to its name takes the renamed field's value, and one whose source the struct lacks is a
        record Kafka's refuses."""
        value = self.operating(record)
        if value is None:
            return record
        struct = schemas.require_struct(schema, "field replacement")
        fields = require_map(value, "field replacement")
        members = dict(schemas.fields(struct))
        reverse = {new: old for old, new in self.renames.items()}
        updated = {}
        for name, field in members.items():
            if not self._kept(name):
                continue
            new = self.renames.get(name, name)
            source = reverse.get(new, new)
            if source not in members:
                raise DataException(f"{source} is not a valid field name")
            if source != name:
                # (Kafka's Struct takes a value of the field's own Java class, and no null where it is required.)
                schemas.require_fits(field, members[source], new)
                if fields.get(source) is None and not schemas.is_optional(field) and "default" not in field:
                    raise DataException(
                        f'Invalid value: null used for required field: "{new}", schema type: '
                        f"{str(field.get('type')).upper()}"
                    )
            updated[new] = fields.get(source)
        return self.with_operating(record, updated)

    def operating_schema(self, schema: schemas.Schema) -> schemas.Schema:
        struct = schemas.require_struct(schema, "field replacement")
        return schemas.struct(
            struct,
            [(self.renames.get(name, name), field) for name, field in schemas.fields(struct) if self._kept(name)],
        )

    def source_of(self, output: Source) -> Source | None:
        """A field comes from the kept field renamed to it, or from its own name if that is kept and not renamed;
        it is absent when neither is there. (Not for keys.)"""
        if self.ON_KEY:
            return None
        found = [name for name, new in self.renames.items() if new in output.fields and self._kept(name)]
        found += [name for name in output.fields if name not in self.renames and self._kept(name)]
        return Source(tuple(found), output.meta, output.value)


def java_double(value: float) -> str:
    """Java's ``Double.toString`` (Java 19 and later): what Kafka's casts to string write for a floating-point
    number (its shortest digits, as Python's ``repr``, or the nearer of two digits where one would do; plain
    between 10^-3 and 10^7, else ``d.dddE<n>``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    shortest = Decimal(repr(abs(value)))
    _, digit_tuple, exponent = shortest.normalize().as_tuple()
    if len(digit_tuple) == 1:
        # Where one digit reads back, Java (19 and later) takes the one- or two-digit decimal nearest the double:
        # another only for doubles of so little precision (subnormal) that it differs, 4.9E-324 for 5e-324.
        exact = Decimal(abs(value))
        two = Decimal(format(exact, ".1e"))
        if float(two) == abs(value) and abs(two - exact) < abs(shortest - exact):
            _, digit_tuple, exponent = two.normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    scientific = len(digits) - 1 + int(exponent)  # value = d.ddd x 10^scientific
    if 1e-3 <= abs(value) < 1e7:
        if scientific >= 0:
            whole = digits[: scientific + 1].ljust(scientific + 1, "0")
            return f"{sign}{whole}.{digits[scientific + 1 :] or '0'}"
        return f"{sign}0.{'0' * (-scientific - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{scientific}"


def to_text(value: Any) -> str:
    """A schemaless value as Kafka writes it as a string (``Object.toString``; bytes in base64)."""
    if type(value) is str:  # (most values: a Debezium event's op, db and table)
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={to_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_text(v) for v in value) + "]"
    return "null" if value is None else str(value)


_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}

# Java's Double.parseDouble / Float.parseFloat: a decimal or hexadecimal literal (ASCII digits), an optional
# f/d suffix, NaN or Infinity.
_JAVA_FLOAT = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
# Java's BigDecimal(String), as Kafka's Values converts a string to a number.
_BIG_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_JAVA_WHITESPACE = "".join(map(chr, range(33)))  # what Java's String.trim removes


def java_wrap(number: int, bits: int) -> int:
    """Java's narrowing of an integer to ``bits`` (two's complement)."""
    number &= (1 << bits) - 1
    return number - (1 << bits) if number >= 1 << (bits - 1) else number


def _java_int_of_float(value: float, bits: int) -> int:
    """Java's ``(long)``/``(int)`` of a double (toward zero, saturated), then narrowed for 8 and 16 bits."""
    if math.isnan(value):
        return 0
    wide = 64 if bits == 64 else 32
    limit = 1 << (wide - 1)
    number = max(-limit, min(limit - 1, int(value))) if math.isfinite(value) else (limit - 1 if value > 0 else -limit)
    return java_wrap(number, bits) if bits < 32 else number


def float32(value: float) -> float:
    """A double rounded to Java's ``float``, as the shortest decimal that reads back as that float (what
    ``Float.toString``, and so a JSON writer, shows for it)."""
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    if not math.isfinite(single) or single == 0:
        return single
    for digits in range(1, 10):
        candidate = float(f"{single:.{digits}g}")
        if struct.unpack("f", struct.pack("f", candidate))[0] == single:
            return candidate
    return single


def java_parse_double(text: str) -> float:
    """Java's ``Double.parseDouble``: ValueError (its NumberFormatException) for what it refuses."""
    trimmed = text.strip(_JAVA_WHITESPACE)
    if not _JAVA_FLOAT.fullmatch(trimmed):
        raise ValueError(f'For input string: "{text}"')
    literal = trimmed[:-1] if trimmed[-1] in "fFdD" else trimmed  # (a hexadecimal one ends in its exponent)
    if "x" in literal.lower():
        try:
            return float.fromhex(literal)
        except OverflowError:  # (Java's is an infinity)
            return -math.inf if literal.startswith("-") else math.inf
    return float(literal)


def java_double_of(value: int | float) -> float:
    """Java's ``Number.doubleValue()``: an integer beyond a double's range is an infinity (Python raises)."""
    try:
        return float(value)
    except OverflowError:
        return -math.inf if value < 0 else math.inf


def big_decimal(text: str) -> Decimal:
    """Java's ``new BigDecimal(text)``: ValueError for what it refuses (spaces included)."""
    if not _BIG_DECIMAL.fullmatch(text):
        raise ValueError(f"Unable to convert {text} (class java.lang.String) to a number")
    return Decimal(text)


def cast_value(value: Any, target: str) -> Any:
    """Kafka's ``Cast.castValueToType`` on a schemaless value; ValueError/DataException when it cannot."""
    if value is None:
        return None
    if isinstance(value, dict | list):
        kind = "MAP" if isinstance(value, dict) else "ARRAY"
        raise DataException(
            f"Cast transformation does not support casting from {kind}; supported types are "
            "[INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING, BYTES]"
        )
    if target in _INT_BITS:
        bits = _INT_BITS[target]
        if isinstance(value, bool):
            return 1 if value else 0
        if isinstance(value, int):
            return java_wrap(value, bits)
        if isinstance(value, float):
            return _java_int_of_float(value, bits)
        if isinstance(value, str):
            # Byte/Short/Integer/Long.parseXxx: an optional sign and digits, nothing else (no spaces).
            if not re.fullmatch(r"[+-]?\d+", value):
                raise ValueError(f'For input string: "{value}"')
            number = int(value)
            if java_wrap(number, bits) != number:
                raise ValueError(f'Value out of range. Value:"{value}"')
            return number
    elif target in ("float32", "float64"):
        real: float | None = None
        if isinstance(value, bool):
            real = 1.0 if value else 0.0
        elif isinstance(value, int | float):
            real = java_double_of(value)
        elif isinstance(value, str):
            real = java_parse_double(value)
        if real is not None:
            return float32(real) if target == "float32" else real
    elif target == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return value != 0
        if isinstance(value, float):
            return _java_int_of_float(value, 64) != 0  # Number.longValue() != 0
        if isinstance(value, str):
            return value.lower() == "true"  # Boolean.parseBoolean: no trimming
    elif target == "string":
        return to_text(value)
    raise DataException(f"Unexpected type in Cast transformation: {type_name(value)}")


class Cast(KeyOrValue):
    """Casts fields (``field:type``), or the whole value (``type``), to int8..int64, float32/64, boolean or
    string. A field cast names its field in the result even when the value had no such field (null), as
    Kafka's does."""

    TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")
    # Connect's other types: valid names in a spec, but not types Cast casts to.
    OTHER_TYPES = ("bytes", "array", "map", "struct")

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.whole: str | None = None
        self.casts: dict[str, str] = {}
        spec = props.list("spec", required=True)
        if "spec" in props.props and not spec:
            props.error("spec", "Must specify at least one field to cast.")
        for item in spec:
            parts = java_split(item, ":")
            if len(parts) > 2:
                props.error("spec", f"Invalid rename mapping: {item}")
                continue
            kind = parts[-1].strip().lower() if parts else ""
            if kind not in self.TYPES:
                if kind in self.OTHER_TYPES:
                    props.error(
                        "spec",
                        f"Cast transformation does not support casting to {kind.upper()}; "
                        f"supported types are {', '.join(self.TYPES)}",
                    )
                else:
                    props.error("spec", f"Invalid type found in casting spec: {kind}")
            elif len(parts) <= 1:
                self.whole = kind
            else:
                self.casts[parts[0].strip()] = kind
        if self.whole is not None and len(spec) > 1:
            props.error(
                "spec",
                "Cast transformations that specify a type to cast the entire value to "
                "may only specify a single cast in their spec",
            )
        _schema_only(props)

    @property
    def makes_floats(self) -> bool:
        return any(kind in ("float32", "float64") for kind in (self.whole, *self.casts.values()))

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        value = self.operating(record)
        if value is None:
            return record
        if self.whole is not None:
            return self.with_operating(record, self._cast(value, self.whole, None))
        updated = dict(require_map(value, "cast types"))
        for name, kind in self.casts.items():
            updated[name] = self._cast(updated.get(name), kind, name)
        return self.with_operating(record, updated)

    def apply_value_with_schema(self, record: ConnectRecord, schema: schemas.Schema) -> ConnectRecord:
        """As Kafka's casts a value with a schema: a Decimal as the number it is (its text here), and a Date, Time
        or Timestamp to a string as Kafka writes a date (``Values.dateFormatFor``), to a number as the days or
        milliseconds it is written as."""
        value = self.operating(record)
        if value is None:
            return record
        if self.whole is not None:
            return self.with_operating(record, self._cast(value, self.whole, None, schema))
        struct = schemas.require_struct(schema, "cast types")
        updated = dict(require_map(value, "cast types"))
        for name, kind in self.casts.items():
            field = schemas.field(struct, name)
            if field is not None:  # (a field the schema lacks is not cast, nor added, with a schema)
                updated[name] = self._cast(updated.get(name), kind, name, field)
        return self.with_operating(record, updated)

    def operating_schema(self, schema: schemas.Schema) -> schemas.Schema:
        if self.whole is not None:
            whole = schemas.basics(schema, schemas.json_type(self.whole))
            return schemas.with_optional(whole, schemas.is_optional(schema))
        struct = schemas.require_struct(schema, "cast types")
        cast = [
            (
                name,
                schemas.primitive(schemas.json_type(self.casts[name]), schemas.is_optional(field))
                if name in self.casts
                else field,
            )
            for name, field in schemas.fields(struct)
        ]
        return schemas.with_optional(schemas.struct(struct, cast), schemas.is_optional(struct))

    @staticmethod
    def _cast(value: Any, kind: str, field: str | None, schema: schemas.Schema | None = None) -> Any:
        try:
            return cast_value(value if schema is None else _typed(schema, value, kind), kind)
        except (ValueError, DataException) as exc:
            where = f"field {field}: " if field is not None else ""
            raise DataException(f"{where}cannot cast {value!r} to {kind}: {exc}") from None


def _typed(schema: schemas.Schema, value: Any, target: str) -> Any:
    """A value of ``schema`` as Kafka's Cast reads it before casting it to ``target``: a Decimal (its text
    here) as the number it is, a Date, Time or Timestamp cast to a string as the date Kafka writes."""
    if value is None:
        return None
    name = schema.get("name")
    if schema.get("type") == "bytes" and name != schemas.DECIMAL and target != "string":
        raise DataException("Unexpected type in Cast transformation: class [B")  # (to a string: its base64)
    if name == schemas.DECIMAL and isinstance(value, str):
        number = Decimal(value)
        if target == "string":
            return str(number)  # (BigDecimal.toString, the same rule as Python's)
        if target in ("float32", "float64"):
            return float(number)
        return int(number)  # (BigDecimal.longValue: toward zero; narrowed by the cast)
    if name in (schemas.DATE, schemas.TIME, schemas.TIMESTAMP) and target == "string" and isinstance(value, int):
        millis = value * 86_400_000 if name == schemas.DATE else value
        return timestamps.connect_date_text(millis)
    return value


class MaskField(KeyOrValue):
    """Replaces fields' values with their type's empty value, or with ``replacement`` (for numbers and
    strings only, converted to the field's type). As Kafka's, it needs a map: a tombstone (null value) is a
    record it cannot mask."""

    _EMPTY: ClassVar[dict[type, Any]] = {bool: False, int: 0, float: 0.0, str: ""}

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.fields = props.list("fields", required=True, non_empty=True)
        self.replacement = props.string("replacement", non_empty=True)
        _schema_only(props)

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        # (No pass-through for null: Kafka's MaskField requires a map, null included.)
        updated = dict(require_map(self.operating(record), "mask fields"))
        for name in self.fields:
            updated[name] = self._masked(updated.get(name))
        return self.with_operating(record, updated)

    def apply_value_with_schema(self, record: ConnectRecord, schema: schemas.Schema) -> ConnectRecord:
        """As Kafka's masks a struct: a Decimal (its text here) as the BigDecimal it is, zero or the
        replacement read as a number; the other fields as without a schema (a Date's days are a number)."""
        struct = schemas.require_struct(schema, "mask fields")
        updated = dict(require_map(self.operating(record), "mask fields"))
        for name in self.fields:
            field = schemas.field(struct, name)
            if field is None:
                continue  # (a struct has no such field to mask)
            value = updated.get(name)
            kind = field.get("name")
            if value is None:
                continue
            if kind == schemas.DECIMAL:
                try:
                    updated[name] = str(big_decimal(self.replacement or "0"))
                except ValueError as exc:
                    raise DataException(str(exc)) from None
            elif kind in (schemas.DATE, schemas.TIME, schemas.TIMESTAMP) or field.get("type") in ("bytes", "struct"):
                java = {"bytes": "[B", "struct": "org.apache.kafka.connect.data.Struct"}.get(
                    str(field.get("type")), "java.util.Date"
                )
                if self.replacement is not None:
                    raise DataException(f"Cannot mask value of type class {java} with custom replacement.")
                if kind is None:
                    raise DataException(f"Cannot mask value of type: class {java}")
                updated[name] = 0  # (new Date(0))
            else:
                updated[name] = self._masked(value)
        return self.with_operating(record, updated)

    def _masked(self, value: Any) -> Any:
        if value is None:
            return None
        if self.replacement is None:
            if isinstance(value, list):
                return []
            if isinstance(value, dict):
                return {}
            if type(value) not in self._EMPTY:
                raise DataException(f"Cannot mask value of type: {type_name(value)}")
            return self._EMPTY[type(value)]
        if isinstance(value, str):
            return self.replacement
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DataException(f"Cannot mask value of type {type_name(value)} with custom replacement.")
        # Kafka's Values.convertToLong / convertToDouble: the text read as a BigDecimal, then narrowed.
        try:
            number = big_decimal(self.replacement)
        except ValueError as exc:
            raise DataException(str(exc)) from None
        return float(number) if isinstance(value, float) else java_wrap(int(number), 64)


class Flatten(KeyOrValue):
    """Flattens nested maps into one level, their names joined by ``delimiter``."""

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.delimiter = props.text("delimiter", ".")

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        value = self.operating(record)
        if value is None:
            return record
        flat: dict[str, Any] = {}
        if self._flatten(require_map(value, "flattening"), "", flat) == len(flat):
            return self.with_operating(record, flat)
        # Two fields join to one name (``a.b`` beside ``a`` holding ``b``): Kafka keeps the later in its maps' order.
        pairs = self._leaves(value, "", (), in_java_order=False)
        order = {at: i for i, (_, at, _) in enumerate(self._leaves(value, "", (), in_java_order=True))}
        return self.with_operating(record, last_in_java_order(pairs, order))

    def operating_schema(self, schema: schemas.Schema) -> schemas.Schema:
        struct = schemas.require_struct(schema, "flattening")
        flat: list[tuple[str, schemas.Schema]] = []
        self._flatten_schema(struct, "", schemas.is_optional(struct), flat)
        return schemas.struct(struct, flat)

    def _flatten_schema(
        self, struct: schemas.Schema, prefix: str, optional: bool, into: list[tuple[str, schemas.Schema]]
    ) -> None:
        """Kafka's ``buildUpdatedSchema``: each leaf field, optional when it or a struct it is in is."""
        for name, field in schemas.fields(struct):
            path = f"{prefix}{self.delimiter}{name}" if prefix else name
            inner_optional = optional or schemas.is_optional(field)
            kind = str(field.get("type"))
            if kind == "struct":
                self._flatten_schema(field, path, inner_optional, into)
            elif kind == "map":
                raise DataException(
                    f"Flatten transformation does not support MAP for record with schemas (for field {path})."
                )
            else:
                flat = schemas.basics(field, kind)
                if kind == "array":
                    flat["items"] = field["items"]
                if "default" in field:
                    flat["default"] = field["default"]
                into.append((path, schemas.with_optional(flat, inner_optional)))

    def _flatten(self, value: dict[str, Any], prefix: str, into: dict[str, Any]) -> int:
        """Put the flattened fields of ``value`` into ``into``; how many there were (more than ``into`` holds when
        two joined to one name)."""
        leaves = 0
        for name, field in value.items():
            path = f"{prefix}{self.delimiter}{name}" if prefix else name
            if isinstance(field, dict):
                leaves += self._flatten(field, path, into)
            else:
                into[path] = field
                leaves += 1
        return leaves

    def _leaves(
        self, value: dict[str, Any], prefix: str, at: tuple[str, ...], in_java_order: bool
    ) -> Iterator[tuple[str, tuple[str, ...], Any]]:
        """The flattened fields: their joined name, path and value, depth first, each map's fields in its order or
        in the order Kafka iterates it."""
        for name in java_map_order(value) if in_java_order else value:
            field = value[name]
            path = f"{prefix}{self.delimiter}{name}" if prefix else name
            if isinstance(field, dict):
                yield from self._leaves(field, path, (*at, name), in_java_order)
            else:
                yield path, (*at, name), field


class ExtractField(KeyOrValue):
    """Replaces the key or value with one of its fields (null when it has no such field); with
    ``field.syntax.version=V2`` the field is a path into nested maps (KIP-821)."""

    SCHEMA_OF_NULL = True

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.field = props.required("field")
        version = props.choice("field.syntax.version", ("V1", "V2"), "V1")
        _schema_only(props)
        self.path = [self.field]
        if version == "V2":
            try:
                self.path = field_path_v2(self.field)
            except ValueError as exc:
                props.error("field", str(exc))
            if not self.path:
                props.error("field", "an empty field path names no field")

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        value = self.operating(record)
        if value is None:
            return self.with_operating(record, None)
        current = require_map(value, "field extraction")
        for name in self.path[:-1]:
            if current.get(name) is None:
                return self.with_operating(record, None)
            current = require_map(current.get(name), "nested field access")
        return self.with_operating(record, current.get(self.path[-1]))

    def operating_schema(self, schema: schemas.Schema) -> schemas.Schema:
        current: schemas.Schema | None = schemas.require_struct(schema, "field extraction")
        for name in self.path:
            if current is None or current.get("type") != "struct":
                current = None
                break
            current = schemas.field(current, name)
        if current is None:
            # (Kafka's IllegalArgumentException: the record cannot be transformed.)
            raise DataException(f"Unknown field: {self.field}")
        return current


def field_path_v2(path: str) -> list[str]:
    """KIP-821's V2 field syntax (Kafka's ``SingleFieldPath``): names joined by dots; a name wrapped in
    backticks may hold dots, a backtick inside it escaped by a backslash when a dot follows it; empty names
    kept. ValueError for a backtick left open."""

    def incomplete(at: int) -> ValueError:
        return ValueError(
            f"Incomplete backtick pair in path: [{path}], consider adding a backslash before backtick at "
            f"position {at} to escape it"
        )

    steps: list[str] = []
    idx = 0
    while 0 <= idx < len(path):
        if path[idx] != "`":
            start = idx
            idx = path.find(".", idx)
            steps.append(path[start:idx] if idx >= 0 else path[start:])
            if idx >= 0:
                idx += 1
            continue
        opened = idx
        idx += 1
        start = idx
        field = ""
        while True:
            idx = path.find("`", idx)
            if idx == -1:
                raise incomplete(opened)
            escaped = path[idx - 1] == "\\"
            if idx >= len(path) - 1:  # the path's last character
                if escaped:
                    raise incomplete(opened)
                steps.append(field + path[start:idx])
                idx += 1
                break
            if path[idx + 1] != ".":  # not closing: part of the name
                idx += 1
                continue
            if escaped:  # an escaped backtick before a dot: part of the name
                field += path[start : idx - 1] + "`"
                idx += 1
                start = idx
                continue
            steps.append(field + path[start:idx])
            idx += 2
            break
    if path.endswith("."):
        steps.append("")
    return steps


class HoistField(KeyOrValue):
    """Wraps the key or value into a map of one field."""

    SCHEMA_OF_NULL = True

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.field = props.required("field")

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        return self.with_operating(record, {self.field: self.operating(record)})

    def operating_schema(self, schema: schemas.Schema) -> schemas.Schema:
        return schemas.struct(None, [(self.field, schema)])


class ValueToKey(Transformation):
    """Replaces the key with a map of the value's ``fields``."""

    CLASSES = (f"{PACKAGE}.ValueToKey",)
    USES_KEY = True

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.fields = props.list("fields", required=True, non_empty=True)
        _schema_only(props)

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        value = require_map(record.value, "copying fields from value to key")
        record.key = {name: value.get(name) for name in self.fields}
        return record

    def value_schema(self, schema: schemas.Schema) -> schemas.Schema:
        """The value's, as it is; each field must be one of its struct's."""
        struct = schemas.require_struct(schema, "copying fields from value to key")
        for name in self.fields:
            if schemas.field(struct, name) is None:
                raise DataException(f"Field does not exist: {name}")
        return struct


def _saturated(number: int) -> int:
    """A long as Java's ``TimeUnit`` conversions give it: beyond a long's range, its bound."""
    return max(-(2**63), min(2**63 - 1, number))


def _toward_zero(numerator: int, denominator: int) -> int:
    """Java's integer division (``TimeUnit``'s conversions to a coarser unit): toward zero."""
    quotient = abs(numerator) // denominator
    return quotient if numerator >= 0 else -quotient


class TimestampConverter(KeyOrValue):
    """Converts a timestamp (the whole value, or ``field``) between epoch numbers (``unix``, at
    ``unix.precision``), formatted strings (``string``, ``format``) and ``Timestamp``, ``Date`` and ``Time``.

    Kafka's schemaless TimestampConverter returns a ``java.util.Date`` for those three; a schemaless JSON
    record has no date type, so here they are ISO 8601 text in UTC (``2017-01-03T06:30:01.864Z``,
    ``2017-01-03``, ``06:30:01.864``), and such text is read back as one (Kafka's Date input, as a previous
    TimestampConverter leaves it): a string is read in ``format``, else (no format, or not in it) as that
    text."""

    SCHEMA_OF_NULL = True

    TARGETS = ("string", "unix", "Date", "Time", "Timestamp")
    PRECISIONS: ClassVar[dict[str, int]] = {
        "seconds": 1,
        "milliseconds": 1000,
        "microseconds": 10**6,
        "nanoseconds": 10**9,
    }

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.field = props.text("field")
        props.required("target.type")
        self.target = props.choice("target.type", self.TARGETS, "Timestamp", case_sensitive=True)
        self.format = props.text("format")
        precision = props.choice("unix.precision", tuple(self.PRECISIONS), "milliseconds", case_sensitive=True)
        self.precision = self.PRECISIONS[precision]
        props.choice("field.syntax.version", ("V1",), "V1")
        _schema_only(props)
        if self.target == "string" and not self.format:
            props.error(
                "format", "TimestampConverter requires format option to be specified when using string timestamps"
            )
        if self.format:
            try:
                timestamps.tokens(self.format)
            except ValueError as exc:
                props.error(
                    "format",
                    f"TimestampConverter requires a SimpleDateFormat-compatible pattern for string timestamps: "
                    f"{self.format}: {exc}",
                )

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        value = self.operating(record)
        if value is None or not self.field:
            return self.with_operating(record, self._convert(value))
        updated = dict(require_map(value, "converting timestamp formats"))
        updated[self.field] = self._convert(updated.get(self.field))
        return self.with_operating(record, updated)

    # The schema of each target type (Kafka's ``TimestampTranslator.typeSchema``).
    def _target_schema(self, optional: bool) -> schemas.Schema:
        if self.target in ("Timestamp", "Date", "Time"):
            return schemas.logical(f"org.apache.kafka.connect.data.{self.target}", optional)
        return schemas.primitive("int64" if self.target == "unix" else "string", optional)

    def operating_schema(self, schema: schemas.Schema) -> schemas.Schema:
        if not self.field:
            return self._target_schema(schemas.is_optional(schema))
        struct = schemas.require_struct(schema, "converting timestamp formats")
        converted = [
            (name, self._target_schema(schemas.is_optional(field)) if name == self.field else field)
            for name, field in schemas.fields(struct)
        ]
        return schemas.with_optional(schemas.struct(struct, converted), schemas.is_optional(struct))

    def apply_value_with_schema(self, record: ConnectRecord, schema: schemas.Schema) -> ConnectRecord:
        """As Kafka's converts a value with a schema: a Date, Time or Timestamp (written as its days or
        milliseconds) is read as the date it is, not as a unix time; a field the struct's schema lacks is not
        added."""
        value = self.operating(record)
        if not self.field:
            _timestamp_type(schema)
            return self.with_operating(record, self._convert(self._as_date(schema, value)))
        if value is None:
            return self.with_operating(record, None)
        struct = schemas.require_struct(schema, "converting timestamp formats")
        field = schemas.field(struct, self.field)
        updated = dict(require_map(value, "converting timestamp formats"))
        if field is not None:
            _timestamp_type(field)
            updated[self.field] = self._convert(self._as_date(field, updated.get(self.field)))
        return self.with_operating(record, updated)

    def _as_date(self, schema: schemas.Schema, value: Any) -> Any:
        """A value of ``schema`` as the date it is (``_Instant``): a Date, Time or Timestamp from its days or
        milliseconds, a string (which is no date with a schema) read in ``format`` alone; other values as they
        are."""
        name = schema.get("name")
        if isinstance(value, int) and not isinstance(value, bool):
            if name == schemas.DATE:
                return _Instant(value * 86_400_000)
            if name in (schemas.TIME, schemas.TIMESTAMP):
                return _Instant(value)
        if isinstance(value, str) and schema.get("type") == "string" and name is None:
            if not self.format:
                raise DataException(
                    "TimestampConverter requires format option to be specified when using string timestamps"
                )
            try:
                return _Instant(timestamps.parse_millis(value, self.format))
            except (OverflowError, ValueError) as exc:
                raise DataException(
                    f"Could not parse timestamp: value ({value}) does not match pattern ({self.format}): {exc}"
                ) from None
        return value

    def _millis(self, value: Any) -> int:
        """The timestamp in epoch milliseconds (a unix one at ``unix.precision``, truncated as Java's
        ``TimeUnit`` truncates)."""
        if isinstance(value, _Instant):
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if self.precision >= 1000:
                return _toward_zero(value, self.precision // 1000)
            return _saturated(value * (1000 // self.precision))
        if isinstance(value, str):
            # A string in the format; else the ISO 8601 text of a Timestamp, Date or Time (Kafka's Date).
            try:
                return timestamps.parse_millis(value, self.format) if self.format else timestamps.parse_iso(value)
            except ValueError as exc:
                try:
                    return timestamps.parse_iso(value)
                except ValueError:
                    pass
                if not self.format:
                    raise DataException(
                        f"TimestampConverter cannot read {value!r} as a timestamp: a string timestamp needs the "
                        "format option (without one, only the ISO 8601 text of a Timestamp, Date or Time is read)"
                    ) from None
                raise DataException(
                    f"Could not parse timestamp: value ({value}) does not match pattern ({self.format}): {exc}"
                ) from None
        raise DataException(f"TimestampConverter does not support {type_name(value)} objects as timestamps")

    def _convert(self, value: Any) -> Any:
        if value is None:
            return None
        millis = self._millis(value)
        try:
            if self.target == "unix":
                if self.precision >= 1000:
                    return _saturated(millis * (self.precision // 1000))
                return _toward_zero(millis, 1000 // self.precision)
            if self.target == "string":
                return timestamps.format_millis(millis, self.format)
            if self.target == "Date":
                return timestamps.iso_millis(millis - millis % 86_400_000)[:10]
            if self.target == "Time":
                return timestamps.iso_millis(millis % 86_400_000)[11:23]
            return timestamps.iso_millis(millis)
        except (OverflowError, ValueError) as exc:
            raise DataException(f"TimestampConverter cannot represent {value!r} as {self.target}: {exc}") from None


class _Instant(int):
    """A date a value's schema says it is (Kafka's ``java.util.Date``), in epoch milliseconds: not a unix time."""


def _timestamp_type(schema: schemas.Schema) -> None:
    """Kafka's ``timestampTypeFromSchema``: a timestamp with a schema is a Timestamp, Date or Time, an int64 (a
    unix time) or a string (in ``format``); DataException for any other type."""
    if schema.get("name") in (schemas.TIMESTAMP, schemas.DATE, schemas.TIME):
        return
    if schema.get("type") not in ("int64", "string"):
        kind = str(schema.get("type")).upper()
        raise DataException(f"Schema Schema{{{kind}}} does not correspond to a known timestamp type format")


ReplacementPart = tuple[str, str | int]


def java_replacement(replacement: str, pattern: re.Pattern[str]) -> list[ReplacementPart]:
    """Java's ``Matcher`` replacement string, resolved against ``pattern``: ``("text", literal)`` and
    ``("group", number or name)`` parts. ``\\x`` is ``x``; ``$12`` is group 12 when the pattern has twelve
    groups, else group 1 and a ``2`` (Java takes digits while the number stays a group); ``${name}`` a named
    group. ValueError for what Java's ``appendReplacement`` refuses."""
    parts: list[ReplacementPart] = []
    text: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\":
            if i + 1 == len(replacement):
                raise ValueError("character to be escaped is missing")
            text.append(replacement[i + 1])
            i += 2
            continue
        if char != "$":
            text.append(char)
            i += 1
            continue
        i += 1
        if i == len(replacement):
            raise ValueError("Illegal group reference: group index is missing")
        group: str | int
        if replacement[i] == "{":
            named = re.match(r"\{([A-Za-z][A-Za-z0-9]*)\}", replacement[i:])
            if named is None:
                raise ValueError(
                    f"Illegal group reference in {replacement!r}: a group name is a letter, then letters "
                    "or digits, in braces"
                )
            group = named.group(1)
            if group not in pattern.groupindex:
                raise ValueError(f"No group with name {{{group}}}")
            i += named.end()
        elif replacement[i].isascii() and replacement[i].isdigit():
            group = int(replacement[i])
            i += 1
            while i < len(replacement) and replacement[i].isascii() and replacement[i].isdigit():
                longer = group * 10 + int(replacement[i])
                if longer > pattern.groups:
                    break
                group = longer
                i += 1
            if group > pattern.groups:
                raise ValueError(f"No group {group}")
        else:
            raise ValueError("Illegal group reference")
        if text:
            parts.append(("text", "".join(text)))
            text = []
        parts.append(("group", group))
    if text:
        parts.append(("text", "".join(text)))
    return parts


class RegexRouter(Transformation):
    """Renames the topic when ``regex`` matches all of it, as Kafka's (``Matcher.matches``, then
    ``replaceFirst``): the first match in the topic replaced by ``replacement`` (``$1`` its groups)."""

    CLASSES = (f"{PACKAGE}.RegexRouter",)
    USES_VALUE = False

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.regex = props.pattern("regex")
        self.replacement: list[ReplacementPart] = []
        replacement = props.required("replacement")
        if self.regex is not None:
            try:
                self.replacement = java_replacement(replacement, self.regex)
            except ValueError as exc:
                props.error("replacement", str(exc))

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        if self.regex is None or self.regex.fullmatch(record.topic) is None:
            return record
        first = self.regex.search(record.topic)
        assert first is not None  # (the whole topic matches)
        replaced = "".join(
            str(value) if kind == "text" else (first.group(value) or "") for kind, value in self.replacement
        )
        record.topic = record.topic[: first.start()] + replaced + record.topic[first.end() :]
        return record

    def source_of(self, output: Source) -> Source | None:
        """The value passes unchanged; but a topic InsertField inserts after it is the renamed one, which the
        decoder, filling it from the record as consumed, would not write: not traced."""
        return None if output.meta == "topic" else output


class TimestampRouter(Transformation):
    """Renames the topic to ``topic.format``: ``${topic}`` and ``${timestamp}`` (the record's, formatted by
    ``timestamp.format``)."""

    CLASSES = (f"{PACKAGE}.TimestampRouter",)
    USES_VALUE = False

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.topic_format = props.text("topic.format", "${topic}-${timestamp}")
        self.timestamp_format = props.text("timestamp.format", "yyyyMMdd")
        try:
            timestamps.tokens(self.timestamp_format)
        except ValueError as exc:
            props.error("timestamp.format", str(exc))

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        if record.timestamp is None:
            raise DataException(f"Timestamp missing on record: {record.topic}-{record.partition}@{record.offset}")
        try:
            stamp = timestamps.format_millis(record.timestamp, self.timestamp_format)
        except (OverflowError, ValueError) as exc:
            raise DataException(f"cannot format the record's timestamp {record.timestamp}: {exc}") from None
        record.topic = self.topic_format.replace("${topic}", record.topic).replace("${timestamp}", stamp)
        return record


class Filter(Transformation):
    """Drops every record (with a predicate: those it matches)."""

    CLASSES = (f"{PACKAGE}.Filter",)
    USES_VALUE = False

    def apply(self, record: ConnectRecord) -> None:
        return None


class HeaderFrom(KeyOrValue):
    """Copies or moves ``fields`` into ``headers`` (one header per field, in order, each with the field's
    value in the original key or value)."""

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.fields = props.list("fields", required=True, non_empty=True)
        self.headers = props.list("headers", required=True, non_empty=True)
        props.required("operation")
        self.move = props.choice("operation", ("move", "copy"), "copy", case_sensitive=True) == "move"
        _schema_only(props)
        if len(self.fields) != len(self.headers):
            props.error("headers", "'fields' config must have the same number of elements as 'headers' config.")

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        value = require_map(self.operating(record), f"header {'move' if self.move else 'copy'}")
        updated = dict(value)
        for name, header in zip(self.fields, self.headers, strict=True):
            record.headers.append((header, value.get(name)))
            if self.move:
                updated.pop(name, None)
        return self.with_operating(record, updated)

    def apply_value_with_schema(self, record: ConnectRecord, schema: schemas.Schema) -> ConnectRecord:
        """As Kafka's with a schema: each header holds its field's value as Kafka's header converter writes a value
        of that schema (``schemas.header_value``: a Date's text, not the number it is written as)."""
        before = len(record.headers)
        record = self.apply(record)
        for at, name in enumerate(self.fields, start=before):
            field = schemas.field(schema, name)
            if field is not None:
                header, value = record.headers[at]
                record.headers[at] = (header, schemas.header_value(field, value))
        return record

    def operating_schema(self, schema: schemas.Schema) -> schemas.Schema:
        struct = schemas.require_struct(schema, f"header {'move' if self.move else 'copy'}")
        for name in self.fields:
            if schemas.field(struct, name) is None:
                raise DataException(f"{name} is not a field of the value's schema")  # (Kafka's NullPointerException)
        if not self.move:
            return struct
        return schemas.struct(struct, [(n, f) for n, f in schemas.fields(struct) if n not in self.fields])


class InsertHeader(Transformation):
    """Adds the header ``header`` with the literal ``value.literal``.

    Kafka's parses the literal into a typed header value (``Values.parseString``: ``1`` a byte, ``true`` a
    boolean), which its header converter writes back as text; here the header is the text as written. The
    two differ where that text is not the value's canonical one: ``1.0`` and ``007`` are written ``1`` and
    ``7`` by Kafka Connect, ``[1, 2]`` is written ``[1,2]``."""

    CLASSES = (f"{PACKAGE}.InsertHeader",)
    USES_VALUE = False

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.header = props.required("header")
        self.literal = props.required("value.literal")

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        record.headers.append((self.header, self.literal))
        return record

    def source_of(self, output: Source) -> Source | None:
        """The value passes unchanged. (A decoder applying a chain to columns writes the value's fields, and the
        records' dead letters go as consumed: headers are written nowhere.)"""
        return output


class DropHeaders(Transformation):
    """Removes every header named in ``headers``."""

    CLASSES = (f"{PACKAGE}.DropHeaders",)
    USES_VALUE = False

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.names = set(props.list("headers", required=True, non_empty=True))

    def apply(self, record: ConnectRecord) -> ConnectRecord:
        record.headers = [(name, value) for name, value in record.headers if name not in self.names]
        return record

    def source_of(self, output: Source) -> Source | None:
        """The value passes unchanged. (A decoder applying a chain to columns writes the value's fields, and the
        records' dead letters go as consumed: headers are written nowhere.)"""
        return output


def _key_and_value(cls: type[KeyOrValue]) -> list[type[Transformation]]:
    """``cls``'s $Key and $Value variants, as classes of their own."""
    keys, values = _variants(cls.__name__)
    return [
        type(f"{cls.__name__}$Key", (cls,), {"ON_KEY": True, "CLASSES": keys}),
        type(f"{cls.__name__}$Value", (cls,), {"ON_KEY": False, "CLASSES": values}),
    ]


TRANSFORMATIONS: list[type[Transformation]] = [
    *(
        variant
        for cls in (
            InsertField,
            ReplaceField,
            Cast,
            MaskField,
            Flatten,
            ExtractField,
            HoistField,
            TimestampConverter,
            HeaderFrom,
        )
        for variant in _key_and_value(cls)
    ),
    ValueToKey,
    RegexRouter,
    TimestampRouter,
    Filter,
    InsertHeader,
    DropHeaders,
]


class TopicNameMatches(Predicate):
    """True for records whose topic ``pattern`` matches whole."""

    CLASSES = (f"{PACKAGE}.predicates.TopicNameMatches",)

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.pattern = props.pattern("pattern", non_empty=True)

    def test(self, record: ConnectRecord) -> bool:
        return self.pattern is not None and self.pattern.fullmatch(record.topic) is not None


class HasHeaderKey(Predicate):
    """True for records with at least one header named ``name``."""

    CLASSES = (f"{PACKAGE}.predicates.HasHeaderKey",)

    def __init__(self, props: Props) -> None:
        super().__init__(props)
        self.name = props.required("name", non_empty=True)

    def test(self, record: ConnectRecord) -> bool:
        return any(name == self.name for name, _ in record.headers)


class RecordIsTombstone(Predicate):
    """True for tombstones (a null value)."""

    CLASSES = (f"{PACKAGE}.predicates.RecordIsTombstone",)
    USES_VALUE = True  # (a JSON null is a null value too)

    def test(self, record: ConnectRecord) -> bool:
        return record.value is None


PREDICATES: list[type[Predicate]] = [TopicNameMatches, HasHeaderKey, RecordIsTombstone]
