"""The record a transformation sees, the errors it raises, and the config reader every transformation uses."""

from __future__ import annotations

import functools
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from connectors.java_regex import compile_java


class DataException(Exception):
    """A transformation cannot apply to this record (Kafka Connect's DataException): a bad record."""


@dataclass
class ConnectRecord:
    """A sink record as Kafka Connect's transformations see it (schemaless): its key and value decoded (a
    JSON object a dict, an array a list), its timestamp in epoch milliseconds."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: Any
    value: Any
    headers: list[tuple[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Source:
    """Where a field of the value a chain makes comes from, as a decoder applying the chain to columns traces it
    back through its steps (``Transformation.source_of``): fields of the value a step is given (``fields``: one, or
    several any one of which it may be, a record at a time: ``a`` renamed to ``b``, or ``b`` itself), what
    InsertField inserts (``meta``: the record's ``topic``, ``partition``, ``offset`` or ``timestamp``, or its
    ``static`` value, ``value``; with ``fields``, any of them the record may have instead), or none of these (the
    field is absent: a null column)."""

    fields: tuple[str, ...] = ()
    meta: str | None = None
    value: str | None = None


class Props:
    """A transformation's keys (``transforms.<alias>.*`` without the prefix), read as Kafka's ``ConfigDef``
    reads them (a STRING or LIST value trimmed, a missing required key an error, an empty value only where a
    validator refuses it); each problem is recorded against its key, and keys never read are refused by
    ``finish``."""

    def __init__(self, props: Mapping[str, str]) -> None:
        self.props = dict(props)
        self.read: set[str] = set()
        self.errors: dict[str, list[str]] = {}

    def error(self, key: str, message: str) -> None:
        self.errors.setdefault(key, []).append(message)

    def string(
        self, key: str, default: str | None = None, *, required: bool = False, non_empty: bool = False
    ) -> str | None:
        """Kafka's STRING type: the value trimmed (``ConfigDef.parseType``); ``non_empty`` is its
        ``NonEmptyString`` validator."""
        self.read.add(key)
        value = self.props.get(key)
        if value is None:
            if required and default is None:
                self.error(key, f'Missing required configuration "{key}" which has no default value.')
            return default
        if non_empty and not value.strip():
            self.error(key, f"Invalid value {value} for configuration {key}: String must be non-empty")
        return value.strip()

    def text(self, key: str, default: str = "") -> str:
        """An optional STRING: its value (an empty one too), else ``default``."""
        value = self.string(key, default)
        return default if value is None else value

    def required(self, key: str, *, non_empty: bool = False) -> str:
        """A STRING without a default (``NO_DEFAULT_VALUE``): missing is an error, empty only with
        ``non_empty``."""
        return self.string(key, required=True, non_empty=non_empty) or ""

    def list(self, key: str, *, required: bool = False, non_empty: bool = False) -> list[str]:
        """Kafka's LIST type: the value trimmed, empty for no items, else split at commas (with the
        whitespace around them), empty items kept as Kafka keeps them; ``non_empty`` is
        ``NonEmptyListValidator``."""
        value = self.string(key, None if required else "", required=required)
        items = re.split(r"\s*,\s*", value) if value else []
        if non_empty and value is not None and not items:
            self.error(key, f"Invalid value {value} for configuration {key}: Empty list")
        return items

    def boolean(self, key: str, default: bool) -> bool:
        value = self.string(key)
        if value is None:
            return default
        if value.lower() not in ("true", "false"):
            self.error(key, f"Invalid value {value} for configuration {key}: Expected value to be either true or false")
            return default
        return value.lower() == "true"

    def choice(self, key: str, options: tuple[str, ...], default: str, *, case_sensitive: bool = False) -> str:
        """One of ``options``: Kafka's ``ValidString`` (``case_sensitive``) or ``CaseInsensitiveValidString``
        (and Debezium's enumerations, which ignore case too)."""
        value = self.string(key)
        if value is None:
            return default
        for option in options:
            if option == value or (not case_sensitive and option.lower() == value.lower()):
                return option
        self.error(key, f"Invalid value {value} for configuration {key}: String must be one of: {', '.join(options)}")
        return default

    def pattern(self, key: str, *, non_empty: bool = False) -> re.Pattern[str] | None:
        """A required Java regular expression (``RegexValidator``), compiled by Python's ``re`` as Java reads
        it (``connectors.java_regex``)."""
        value = self.required(key, non_empty=non_empty)
        try:
            return compile_java(value)
        except ValueError as exc:
            self.error(key, f"Invalid value {value} for configuration {key}: Invalid regex: {exc}")
            return None

    def unsupported(self, key: str, reason: str) -> None:
        """A key of the original transformation that this one cannot honour: refused when set."""
        self.read.add(key)
        if self.props.get(key, "").strip():
            self.error(key, f"not supported: {reason}")

    def finish(self, name: str) -> None:
        for key in sorted(set(self.props) - self.read):
            self.error(key, f"{key} is not a key of {name}")


def java_split(text: str, separator: str) -> list[str]:
    """Java's ``String.split`` on a literal separator: trailing empty strings removed."""
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


class Transformation:
    """One configured transformation. Subclasses read their keys in ``__init__`` (through ``props``) and
    transform one record in ``apply`` (None drops it), raising ``DataException`` for a record they cannot."""

    # The class names that configure it (``transforms.<alias>.type``), the first being the canonical one.
    CLASSES: ClassVar[tuple[str, ...]] = ()
    # Whether it reads or replaces records' keys, and their values: what no step of a chain reads or replaces
    # stays as it was consumed (not decoded, nor encoded again: workers.transformed).
    USES_KEY: ClassVar[bool] = False
    USES_VALUE: ClassVar[bool] = True

    def __init__(self, props: Props) -> None:
        self.props = props

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        raise NotImplementedError

    def apply_with_schema(self, record: ConnectRecord, schema: dict[str, Any]) -> ConnectRecord | None:
        """``apply`` to a record whose value has ``schema`` (``connectors.smt.schemas``): the same, but for a
        transformation that does otherwise with a schema (a Date is a date then, not the number it is written as)."""
        return self.apply(record)

    def value_schema(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        """The schema of the value this transformation makes of a value of ``schema``, as Kafka's
        ``applyWithSchema`` builds it (``connectors.smt.schemas``); DataException where Kafka's refuses the
        schema. A transformation of the topic, the headers or the key leaves it as it is."""
        return schema

    def null_value_schema(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        """``value_schema`` for a null value of ``schema``: most of Kafka's pass such a record as it is."""
        return schema

    @property
    def uses_key(self) -> bool:
        return self.USES_KEY

    @property
    def uses_value(self) -> bool:
        return self.USES_VALUE

    @property
    def makes_floats(self) -> bool:
        """Whether it may make floats JSON has no number for (NaN, infinities): a Cast to a float type."""
        return False

    def source_of(self, output: Source) -> Source | None:
        """Where, in the value this transformation is given, the field ``output`` of the value it makes comes
        from (an absent field or a record's metadata stay what they are); None when it is not one a decoder
        applies to columns by reading each column from where it comes (``TransformChain.columnar``), which takes a
        transformation that only moves, drops or inserts a map's fields, whatever their values."""
        return None

    @property
    def shapes_columns(self) -> bool:
        """Whether a decoder applies it to columns by tracing each field back (``source_of``)."""
        return self.source_of(Source()) is not None


class KeyOrValue(Transformation):
    """A transformation with ``$Key`` and ``$Value`` variants: it works on the key or on the value."""

    ON_KEY: ClassVar[bool] = False

    @property
    def uses_key(self) -> bool:
        return self.ON_KEY

    @property
    def uses_value(self) -> bool:
        return not self.ON_KEY

    def operating(self, record: ConnectRecord) -> Any:
        return record.key if self.ON_KEY else record.value

    # Whether the $Value variant gives a null value the schema it gives others (Kafka's Flatten, ExtractField,
    # HoistField and TimestampConverter), rather than passing the record as it is.
    SCHEMA_OF_NULL: ClassVar[bool] = False

    def value_schema(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        return schema if self.ON_KEY else self.operating_schema(schema)

    def null_value_schema(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        return self.value_schema(schema) if self.SCHEMA_OF_NULL else schema

    def apply_with_schema(self, record: ConnectRecord, schema: dict[str, Any]) -> ConnectRecord | None:
        return self.apply(record) if self.ON_KEY else self.apply_value_with_schema(record, schema)

    def apply_value_with_schema(self, record: ConnectRecord, schema: dict[str, Any]) -> ConnectRecord | None:
        """``apply_with_schema`` of the $Value variant."""
        return self.apply(record)

    def operating_schema(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        """``value_schema`` of the $Value variant."""
        return schema

    def with_operating(self, record: ConnectRecord, new: Any) -> ConnectRecord:
        if self.ON_KEY:
            record.key = new
        else:
            record.value = new
        return record


class Predicate:
    """One configured predicate (``predicates.<alias>.*``)."""

    CLASSES: ClassVar[tuple[str, ...]] = ()
    # Whether it reads records' values (see Transformation.USES_VALUE).
    USES_VALUE: ClassVar[bool] = False

    def __init__(self, props: Props) -> None:
        self.props = props

    def test(self, record: ConnectRecord) -> bool:
        raise NotImplementedError


@functools.lru_cache(maxsize=4096)
def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: 31-based over the UTF-16 code units, in 32 bits. (Cached: a topic's records
    repeat their field names.)"""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def java_map_order(value: dict[str, Any]) -> list[str]:
    """The keys of a JSON object in the order Java iterates the ``HashMap`` Kafka's JsonConverter reads it into
    (a schemaless record's map): by bucket (the key's hash, spread, modulo the table's size, which doubles from
    16 while the map is over three quarters full), then in insertion order within a bucket. Where two fields
    become one (ReplaceField's renames, Flatten's joined names), the later in this order wins in Kafka. (A
    bucket of eight keys or more makes Java's HashMap grow or become a tree: not followed here.)"""
    size = 16
    while len(value) > size * 3 // 4:
        size *= 2

    def bucket(name: str) -> int:
        h = java_string_hash(name)
        return (h ^ (h >> 16)) & (size - 1)

    return sorted(value, key=bucket)  # (sorted is stable: insertion order within a bucket)


def last_in_java_order[Field: Hashable](
    pairs: Iterable[tuple[str, Field, Any]], order: Mapping[Field, int]
) -> dict[str, Any]:
    """``(new name, source field, value)`` pairs as one map, its names in the pairs' order, where a name that
    several fields become takes the value of the field last in Java's iteration (``order``: each field's
    position in it; a field is known by its name, or its path)."""
    result: dict[str, Any] = {}
    winner: dict[str, int] = {}
    for name, source, value in pairs:
        at = order[source]
        if name not in winner or at > winner[name]:
            result[name], winner[name] = value, at
    return result


def require_map(value: Any, purpose: str) -> dict[str, Any]:
    """Kafka's ``Requirements.requireMap``: a schemaless record's value must be a map."""
    if not isinstance(value, dict):
        found = "null" if value is None else type_name(value)
        raise DataException(f"Only Map objects supported in absence of schema for [{purpose}], found: {found}")
    return value


def type_name(value: Any) -> str:
    """The Java class a schemaless value of this Python type would be (in Kafka's messages)."""
    names = {bool: "java.lang.Boolean", int: "java.lang.Long", float: "java.lang.Double", str: "java.lang.String"}
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    if isinstance(value, list):
        return "java.util.ArrayList"
    if isinstance(value, dict):
        return "java.util.HashMap"
    if isinstance(value, bytes | bytearray):
        return "[B"
    return type(value).__name__
