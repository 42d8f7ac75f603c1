"""Parsing of ``iceberg.table.<name>.partition-by``: Iceberg partition transforms."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TRANSFORM = re.compile(
    r"^\s*(?:(?P<name>[a-z_]+)\s*\(\s*(?:(?P<arg>\d+)\s*,\s*)?(?P<col>[A-Za-z_][\w.]*)\s*\)|(?P<bare>[A-Za-z_][\w.]*))\s*$"
)
# Spellings of the Iceberg sink and of Spark SQL, mapped to Iceberg transform names.
_NAMES = {
    "identity": "identity",
    "year": "year",
    "years": "year",
    "month": "month",
    "months": "month",
    "day": "day",
    "days": "day",
    "date": "day",
    "hour": "hour",
    "hours": "hour",
    "date_hour": "hour",
    "bucket": "bucket",
    "truncate": "truncate",
    "void": "void",
}
_WITH_ARG = {"bucket", "truncate"}


@dataclass(frozen=True)
class PartitionField:
    transform: str
    column: str
    argument: int | None = None

    def __str__(self) -> str:
        if self.transform == "identity":
            return self.column
        arg = f"{self.argument}, " if self.argument is not None else ""
        return f"{self.transform}({arg}{self.column})"


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def parse_partition_by(text: str) -> list[PartitionField]:
    fields: list[PartitionField] = []
    for item in _split_top_level(text or ""):
        match = _TRANSFORM.match(item)
        if not match:
            raise ValueError(
                f"cannot parse partition field {item.strip()!r}; use e.g. 'days(ts)', 'bucket(16, id)', 'region'"
            )
        if match.group("bare"):
            fields.append(PartitionField("identity", match.group("bare")))
            continue
        name = _NAMES.get(match.group("name"))
        if name is None:
            raise ValueError(
                f"unknown partition transform {match.group('name')!r}; use one of {', '.join(sorted(set(_NAMES.values())))}"
            )
        arg = match.group("arg")
        if name in _WITH_ARG and arg is None:
            raise ValueError(f"{name} needs a width, e.g. {name}(16, {match.group('col')})")
        if name not in _WITH_ARG and arg is not None:
            raise ValueError(f"{name} takes no width")
        fields.append(PartitionField(name, match.group("col"), int(arg) if arg else None))
    return fields
