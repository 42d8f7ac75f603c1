"""A connector's chain of transformations, from its ``transforms`` and ``predicates`` keys."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from connectors.smt import debezium, kafka
from connectors.smt.record import ConnectRecord, DataException, Predicate, Props, Source, Transformation
from connectors.smt.schemas import Schema

TRANSFORMATIONS: dict[str, type[Transformation]] = {
    name: cls for cls in (*kafka.TRANSFORMATIONS, *debezium.TRANSFORMATIONS) for name in cls.CLASSES
}
PREDICATES: dict[str, type[Predicate]] = {name: cls for cls in kafka.PREDICATES for name in cls.CLASSES}


def _aliases[T](classes: dict[str, T]) -> dict[str, T]:
    """Kafka Connect's plugin aliases: a class by its simple name too (``InsertField$Value``,
    ``DebeziumTransform``)."""
    simple: dict[str, list[str]] = {}
    for name in classes:
        simple.setdefault(name.rsplit(".", 1)[-1], []).append(name)
    return {
        **{alias: classes[names[0]] for alias, names in simple.items() if len(set(map(classes.get, names))) == 1},
        **classes,
    }


TRANSFORMATION_CLASSES = _aliases(TRANSFORMATIONS)
PREDICATE_CLASSES = _aliases(PREDICATES)


class TransformFailed(Exception):
    """A transformation failed on a record: a bad record, its reason naming the transformation."""


@dataclass(frozen=True)
class Step:
    alias: str
    class_name: str
    transformation: Transformation
    predicate: Predicate | None = None
    negate: bool = False


# The predicates a decoder tests on a record as consumed, without its value: its topic, a header's name, and
# whether its value is null (before any transformation that may make it so).
METADATA_PREDICATES = (kafka.TopicNameMatches, kafka.HasHeaderKey, kafka.RecordIsTombstone)


@dataclass(frozen=True)
class ColumnarChain:
    """A chain as a decoder applies it to columns (``workers.chain_decoder``, decision 012): Filters under a
    predicate of the record as consumed (``filters``: ``METADATA_PREDICATES``), which drop records before their
    values are read; its Debezium transformation (``unwrap``) as the events are read, each event's row read
    straight into the columns; then the steps that only move, drop or insert the value's fields (``shape``), each
    of the table's columns read from the field it comes from (``sources``) or filled from the record (its topic,
    partition, offset or timestamp)."""

    unwrap: debezium.Columnar | None
    shape: tuple[Transformation, ...] = ()
    filters: tuple[Step, ...] = ()
    # The Debezium transformation's step, which the decoder applies record by record to what the columns cannot
    # read (its transformations of records' topics and headers, before it, do not change values).
    unwrap_step: Step | None = None

    def sources(self, names: Iterable[str]) -> dict[str, Source] | None:
        """Where each of the fields ``names`` of the chain's output comes from, in the value the shaping steps are
        given; None when a step cannot tell for one of them (``Transformation.source_of``)."""
        found: dict[str, Source] = {}
        for name in names:
            traced = Source(fields=(name,))
            for step in reversed(self.shape):
                before = step.source_of(traced)
                if before is None:
                    return None
                traced = before
            either = len(traced.fields) + (traced.meta is not None) > 1
            if either and self.unwrap is not None and set(traced.fields) & self.unwrap.added:
                return None  # (a field the unwrap adds to every row, or the row's own: record by record)
            found[name] = traced
        return found


@dataclass(frozen=True)
class TransformChain:
    steps: tuple[Step, ...]
    # What each step makes of each schema (``_schema_after``), by the step's index and the schema's id.
    _schemas: dict[tuple[int, int, bool], tuple[Schema, Schema | DataException | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def uses_keys(self) -> bool:
        """Whether a step reads or replaces records' keys: if none does, the keys stay as consumed."""
        return any(step.transformation.uses_key for step in self.steps)

    @property
    def uses_values(self) -> bool:
        """Whether a step or its predicate reads or replaces records' values: if none does (routers, header
        transforms, Filter under a topic's or header's predicate), the values stay as consumed."""
        return any(
            step.transformation.uses_value or (step.predicate is not None and step.predicate.USES_VALUE)
            for step in self.steps
        )

    @property
    def columnar(self) -> ColumnarChain | None:
        """The chain as a decoder can apply it to columns (``ColumnarChain``): Filters under a predicate of the
        record as consumed first (``METADATA_PREDICATES``), if any; then, with no predicate, a Debezium
        transformation (``ExtractNewRecordState`` without ``add.headers``, or ``DebeziumTransform``), then any
        transformations that only move, drop or insert the value's fields (Kafka's InsertField$Value and
        ReplaceField$Value, the Iceberg sink's CopyValue: ``Transformation.shapes_columns``), or those alone; else
        None. Transformations of the topic or headers alone (RegexRouter, InsertHeader, DropHeaders) may come
        anywhere after the Filters, the Debezium transformation's usual ``unwrap,route`` and ``route,unwrap``
        included: they pass values unchanged."""
        lead = 0
        while (
            lead < len(self.steps)
            and isinstance(self.steps[lead].transformation, kafka.Filter)
            and isinstance(self.steps[lead].predicate, METADATA_PREDICATES)
        ):
            lead += 1
        rest = self.steps[lead:]
        if any(step.predicate is not None for step in rest):
            return None
        # (The first step that reads the value: those before it change the topic or headers alone.)
        at = next((i for i, step in enumerate(rest) if step.transformation.uses_value), len(rest))
        first = rest[at] if at < len(rest) else None
        unwrap = None
        if first is not None and isinstance(
            first.transformation, debezium.ExtractNewRecordState | debezium.DebeziumTransform
        ):
            unwrap = first.transformation.columnar
            if unwrap is None:
                return None
        shape = (*rest[:at], *rest[at + 1 :]) if unwrap is not None else rest
        if not all(step.transformation.shapes_columns for step in shape):
            return None
        return ColumnarChain(
            unwrap,
            tuple(step.transformation for step in shape),
            self.steps[:lead],
            first if unwrap is not None else None,
        )

    @property
    def makes_floats(self) -> bool:
        """Whether a step may make floats JSON has no number for (``Transformation.makes_floats``)."""
        return any(step.transformation.makes_floats for step in self.steps)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        """The record through each transformation in order (those whose predicate holds, or with
        ``negate`` does not); None when one drops it. Raises ``TransformFailed`` with the step's alias and
        class when one cannot transform it."""
        done = self.apply_with_schema(record, None)
        return None if done is None else done[0]

    def apply_with_schema(
        self, record: ConnectRecord, schema: Schema | None
    ) -> tuple[ConnectRecord, Schema | None] | None:
        """``apply`` to a record whose value has ``schema`` (None: schemaless), and the schema of the value it
        makes (``Transformation.value_schema``: the schema Kafka Connect's transformations give it). A null value
        has no schema; a schema ``value_schema`` gives once is the same dict for the same step and schema (the
        stage keeps its text by it)."""
        for index, step in enumerate(self.steps):
            try:
                if step.predicate is not None and step.predicate.test(record) == step.negate:
                    continue
                if schema is None:
                    transformed = step.transformation.apply(record)
                else:
                    after = self._schema_after(index, step.transformation, schema, record.value is None)
                    transformed = step.transformation.apply_with_schema(record, schema)
                    schema = after
            except DataException as exc:
                raise TransformFailed(f"{failure_prefix(step.alias, step.class_name)}{exc}") from None
            except Exception as exc:
                # (Kafka Connect tolerates any exception of a transformation as a failure of the record:
                # RetryWithToleranceOperator's TRANSFORMATION stage. A record must not stop its task.)
                reason = f"{failure_prefix(step.alias, step.class_name)}{type(exc).__name__}: {exc}"
                raise TransformFailed(reason) from exc
            if transformed is None:
                return None
            record = transformed
        return record, schema

    def _schema_after(self, index: int, transformation: Transformation, schema: Schema, null: bool) -> Schema | None:
        """``transformation.value_schema(schema)`` (``null_value_schema`` for a ``null`` value), once per step and
        schema (their records share the schema object: ``workers.transformed``), failures too."""
        memo = self._schemas
        key = (index, id(schema), null)
        found = memo.get(key)
        if found is None:
            try:
                made = transformation.null_value_schema(schema) if null else transformation.value_schema(schema)
                found = (schema, made)
            except DataException as exc:
                found = (schema, exc)
            if len(memo) >= 1024:
                memo.clear()
            memo[key] = found  # (the schema kept with it: its id names no other while here)
        result = found[1]
        if isinstance(result, DataException):
            raise result
        return result


def failure_prefix(alias: str, class_name: str) -> str:
    """How the reason of a record a step could not transform starts: its alias and its class's simple name.
    (The dead letters tell a transformation's failure by it, and name the step's class: workers.dead_letters.)"""
    return f"transforms.{alias} ({_short(class_name)}): "


def failed_transformation(config: Mapping[str, str], reason: str) -> str | None:
    """The full class name of the configured transformation whose failure ``reason`` is (it starts with the
    step's ``failure_prefix``), or None when it is not a transformation's failure."""
    for alias, class_name in transformation_classes(config).items():
        if reason.startswith(failure_prefix(alias, class_name)):
            return class_name
    return None


def _short(class_name: str) -> str:
    return class_name.rsplit(".", 1)[-1]


def _split(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _properties(config: Mapping[str, str], prefix: str, reserved: tuple[str, ...]) -> dict[str, str]:
    return {
        key[len(prefix) :]: value
        for key, value in config.items()
        if key.startswith(prefix) and key[len(prefix) :] not in reserved
    }


def transformation_classes(config: Mapping[str, str]) -> dict[str, str]:
    """The class each alias in ``transforms`` names, by its full name, for those there is a class of (whatever
    else is wrong with the config: ``parse_chain`` says that)."""
    found = {}
    for alias in _split(config.get("transforms")):
        cls = TRANSFORMATION_CLASSES.get((config.get(f"transforms.{alias}.type") or "").strip())
        if cls is not None:
            found[alias] = cls.CLASSES[0]
    return found


def parse_chain(config: Mapping[str, str]) -> tuple[TransformChain | None, dict[str, list[str]]]:
    """The connector's chain (None without ``transforms``) and the problems of its keys, by key: a class we
    do not have, a key its class does not have, a value it refuses, an alias no list names."""
    errors: dict[str, list[str]] = {}

    def error(key: str, message: str) -> None:
        errors.setdefault(key, []).append(message)

    predicates: dict[str, tuple[str, Predicate]] = {}
    predicate_aliases = _split(config.get("predicates"))
    if len(set(predicate_aliases)) != len(predicate_aliases):
        error("predicates", "Duplicate alias provided.")
    for alias in dict.fromkeys(predicate_aliases):
        found = _build(config, f"predicates.{alias}.", PREDICATE_CLASSES, "predicate", (), error)
        if found is not None:
            predicates[alias] = found

    steps = []
    aliases = _split(config.get("transforms"))
    if len(set(aliases)) != len(aliases):
        error("transforms", "Duplicate alias provided.")
    for alias in aliases:
        prefix = f"transforms.{alias}."
        built = _build(config, prefix, TRANSFORMATION_CLASSES, "transformation", ("predicate", "negate"), error)
        predicate_alias = (config.get(f"{prefix}predicate") or "").strip()
        negate_text = (config.get(f"{prefix}negate") or "false").strip().lower()
        if negate_text not in ("true", "false"):
            error(
                f"{prefix}negate",
                f"Invalid value {negate_text} for configuration {prefix}negate: "
                "Expected value to be either true or false",
            )
        if f"{prefix}negate" in config and not predicate_alias:
            error(
                f"{prefix}negate",
                f"Config '{prefix}negate' was provided but there is no config '{prefix}predicate' defining a "
                "predicate to be negated.",
            )
        predicate = None
        if predicate_alias:
            if predicate_alias not in predicate_aliases:
                error(
                    f"{prefix}predicate",
                    f"predicate {predicate_alias!r} is not one of predicates "
                    f"({', '.join(predicate_aliases) or 'none'})",
                )
            elif predicate_alias in predicates:
                predicate = predicates[predicate_alias][1]
        if built is not None:
            class_name, transformation = built
            steps.append(Step(alias, class_name, transformation, predicate, negate_text == "true"))

    for key in config:
        for family, listed in (("transforms", aliases), ("predicates", predicate_aliases)):
            if key.startswith(f"{family}.") and key.split(".")[1] not in listed:
                error(key, f"{key.split('.')[1]!r} is not an alias in {family}, so this key would be ignored")
    if errors or not steps:
        return None, errors
    return TransformChain(tuple(steps)), errors


def _build[T: (Transformation, Predicate)](
    config: Mapping[str, str],
    prefix: str,
    classes: dict[str, type[T]],
    kind: str,
    reserved: tuple[str, ...],
    error: Callable[[str, str], None],
) -> tuple[str, T] | None:
    """The configured ``kind`` at ``prefix`` (its class from ``<prefix>type``), its keys' problems reported."""
    type_key = f"{prefix}type"
    class_name = (config.get(type_key) or "").strip()
    if not class_name:
        error(type_key, f'Missing required configuration "{type_key}" which has no default value.')
        return None
    cls = classes.get(class_name)
    if cls is None:
        known = sorted({c.CLASSES[0] for c in classes.values()})
        error(
            type_key,
            f"Class {class_name} could not be found: no such {kind} here; the ones there are: " + ", ".join(known),
        )
        return None
    props = Props(_properties(config, prefix, ("type", *reserved)))
    built = cls(props)
    props.finish(_short(class_name))
    for key, messages in props.errors.items():
        for message in messages:
            error(f"{prefix}{key}", message)
    return (cls.CLASSES[0], built) if not props.errors else None
