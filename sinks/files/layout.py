"""Where a record's file goes: the Confluent storage sinks' partitioners and file names.

Pure functions of a record's partition, fields and time: the writer (in
Spark's Python workers or a participant) and the tests use them alike.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

# Joda-Time's pattern letters that this formatter knows (``path.format``).
_NUMERIC = set("yYxCMdDHhKkmsSwe")
_TEXT = set("MEa")
KNOWN_LETTERS = _NUMERIC | _TEXT | set("Zz")
HOURLY_FORMAT = "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH"
DAILY_FORMAT = "'year'=YYYY/'month'=MM/'day'=dd"
HOUR_MS = 3_600_000
DAY_MS = 86_400_000


def joda_tokens(pattern: str) -> list[tuple[str, str]]:
    """A Joda-Time pattern as (kind, text) tokens: ("literal", text) or ("field", "MM")."""
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "'":
            if pattern[i + 1 : i + 2] == "'":
                tokens.append(("literal", "'"))
                i += 2
                continue
            end = i + 1
            text = ""
            while True:
                close = pattern.find("'", end)
                if close < 0:
                    raise ValueError(f"unterminated quote in {pattern!r}")
                text += pattern[end:close]
                if pattern[close + 1 : close + 2] == "'":
                    text += "'"
                    end = close + 2
                    continue
                i = close + 1
                break
            tokens.append(("literal", text))
        elif char.isascii() and char.isalpha():
            if char not in KNOWN_LETTERS:
                raise ValueError(f"pattern letter {char!r} in {pattern!r} is not supported")
            j = i
            while j < len(pattern) and pattern[j] == char:
                j += 1
            tokens.append(("field", pattern[i:j]))
            i = j
        else:
            tokens.append(("literal", char))
            i += 1
    return tokens


def has_text_fields(pattern: str) -> bool:
    """Whether the pattern names months or days in words (what a locale changes)."""
    return any(
        kind == "field" and (text[0] in "Ea" or (text[0] == "M" and len(text) >= 3))
        for kind, text in joda_tokens(pattern)
    )


# Joda's numeric fields: the number each letter prints, zero-padded to the letter's count.
_NUMBERS: dict[str, Callable[[datetime], int]] = {
    "x": lambda m: m.isocalendar().year,
    "C": lambda m: m.year // 100,
    "d": lambda m: m.day,
    "D": lambda m: m.timetuple().tm_yday,
    "H": lambda m: m.hour,
    "k": lambda m: m.hour or 24,
    "K": lambda m: m.hour % 12,
    "h": lambda m: m.hour % 12 or 12,
    "m": lambda m: m.minute,
    "s": lambda m: m.second,
    "w": lambda m: m.isocalendar().week,
    "e": lambda m: m.isoweekday(),
}


def _field(text: str, moment: datetime) -> str:
    letter, width = text[0], len(text)
    if letter in _NUMBERS:
        return f"{_NUMBERS[letter](moment):0{width}d}"
    if letter in "yY":
        year = moment.year
        return f"{year % 100:02d}" if width == 2 else f"{year:0{width}d}"
    if letter == "M":
        if width >= 4:
            return calendar.month_name[moment.month]
        if width == 3:
            return calendar.month_abbr[moment.month]
        return f"{moment.month:0{width}d}"
    if letter == "S":
        return f"{moment.microsecond // 1000:03d}"[:width].ljust(width, "0")
    if letter == "E":
        return calendar.day_name[moment.weekday()] if width >= 4 else calendar.day_abbr[moment.weekday()]
    if letter == "a":
        return "AM" if moment.hour < 12 else "PM"
    if letter == "Z":
        offset = moment.utcoffset() or timedelta(0)
        minutes = int(offset.total_seconds() // 60)
        sign = "+" if minutes >= 0 else "-"
        hours, rest = divmod(abs(minutes), 60)
        return f"{sign}{hours:02d}:{rest:02d}" if width == 2 else f"{sign}{hours:02d}{rest:02d}"
    if letter == "z":
        return moment.tzname() or ""
    raise ValueError(f"pattern letter {letter!r} is not supported")


def format_time(pattern: str, moment: datetime) -> str:
    """``moment`` as Joda-Time's DateTimeFormat prints it with ``pattern`` (in English)."""
    return "".join(text if kind == "literal" else _field(text, moment) for kind, text in joda_tokens(pattern))


@dataclass(frozen=True)
class TimePartitioning:
    """The time partitioner's settings: directories of ``duration_ms`` named by ``path_format`` in ``timezone``."""

    path_format: str
    duration_ms: int
    timezone: str

    def bucket(self, timestamp_ms: int) -> int:
        """The start of the directory's span holding ``timestamp_ms`` (the storage sinks'
        TimeBasedPartitioner.getPartition: spans are aligned in local time)."""
        zone = ZoneInfo(self.timezone)
        moment = datetime.fromtimestamp(timestamp_ms / 1000, UTC).astimezone(zone)
        local_ms = timestamp_ms + int((moment.utcoffset() or timedelta(0)).total_seconds() * 1000)
        local_start = local_ms // self.duration_ms * self.duration_ms
        # Back to UTC with the offset in force at the span's start (as Joda's convertLocalToUTC).
        naive = datetime(1970, 1, 1) + timedelta(milliseconds=local_start)
        return int(naive.replace(tzinfo=zone).timestamp() * 1000)

    def directory(self, timestamp_ms: int) -> str:
        start = self.bucket(timestamp_ms)
        return format_time(
            self.path_format, datetime.fromtimestamp(start / 1000, UTC).astimezone(ZoneInfo(self.timezone))
        )


def field_directory(names: tuple[str, ...], values: tuple[object, ...], delim: str = "/") -> str:
    """The field partitioner's directory: ``name=value`` per field (values as Java's String.valueOf prints them)."""
    return delim.join(f"{name}={_java_text(value)}" for name, value in zip(names, values, strict=True))


def _java_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def default_directory(partition: int) -> str:
    return f"partition={partition}"


def file_name(topic: str, partition: int, start: int, end: int, extension: str, pad: int, delim: str = "+") -> str:
    """``<topic>+<partition>+<first offset>+<last offset>.<ext>``, offsets zero-padded (the HDFS sink's name)."""
    return f"{topic}{delim}{partition}{delim}{start:0{pad}d}{delim}{end:0{pad}d}.{extension}"


def parse_file_name(name: str, delim: str = "+") -> tuple[str, int, int, int] | None:
    """(topic, partition, first offset, last offset) of a committed file's name (``.json.gz`` for a gzipped
    JSON file, s3.compression.type); None for another file."""
    stem = name.removesuffix(".gz").rsplit(".", 1)[0]
    parts = stem.rsplit(delim, 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])
