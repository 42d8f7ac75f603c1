"""Java's ``SimpleDateFormat`` patterns, as Kafka's TimestampConverter and TimestampRouter use them (in UTC).

Letters: ``G`` era, ``y`` year (``yy`` two digits), ``M`` or ``L`` month (``MMM`` its short name,
``MMMM`` its name), ``d`` day, ``D`` day of the year, ``E`` day of the week's name (``EEEE`` in full), ``u``
its number, ``a`` AM/PM, ``H`` hour 0-23, ``k`` 1-24, ``K`` 0-11, ``h`` 1-12, ``m`` minute, ``s`` second,
``S`` millisecond, ``z`` ``Z`` ``X`` the zone; text in single quotes (``''`` a quote). Others are refused
when configured.

The week fields, ``Y`` week year, ``w`` week of the year, ``W`` week of the month, ``F`` day of the week in
the month, are written as an English (United States) JVM writes them, the default locale of Kafka Connect's
images: weeks start on Sunday, and the first week of a year (or month) is the one its first day is in. They
are not read (a string of them is a bad record).
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime, timedelta

LETTERS = "GyYMLwWdDFEuaHkKhmsSzZX"
# The fields only written (``format_millis``), not read (``parse_millis``).
WRITTEN_ONLY = "YwWF"
_MONTHS = list(calendar.month_name)[1:]
_DAYS = list(calendar.day_name)


def tokens(pattern: str) -> list[tuple[str, int] | str]:
    """The pattern as (letter, count) fields and literal strings; ValueError for a letter Java's has and
    this does not (G, w, W, F...). Text in single quotes is literal, ``''`` a quote (inside quotes too)."""
    found: list[tuple[str, int] | str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "'":
            if pattern[i + 1 : i + 2] == "'":
                found.append("'")
                i += 2
                continue
            text, i = [], i + 1
            while True:
                end = pattern.find("'", i)
                if end < 0:
                    raise ValueError(f"Unterminated quote in pattern {pattern!r}")
                text.append(pattern[i:end])
                if pattern[end + 1 : end + 2] != "'":
                    break
                text.append("'")
                i = end + 2
            found.append("".join(text))
            i = end + 1
        elif char.isascii() and char.isalpha():
            if char not in LETTERS:
                raise ValueError(f"Illegal pattern character {char!r} (supported: {LETTERS})")
            count = 1
            while i + count < len(pattern) and pattern[i + count] == char:
                count += 1
            found.append((char, count))
            i += count
        else:
            found.append(char)
            i += 1
    return found


def _zone(offset: timedelta, letter: str, count: int) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hours, minutes = divmod(abs(minutes), 60)
    if letter == "X" and hours == minutes == 0:
        return "Z"
    if letter == "z":
        if hours == minutes == 0:
            return "Coordinated Universal Time" if count >= 4 else "UTC"
        return f"GMT{sign}{hours:02d}:{minutes:02d}"
    if letter == "X" and count == 1:
        return f"{sign}{hours:02d}"
    if letter == "X" and count >= 3:
        return f"{sign}{hours:02d}:{minutes:02d}"
    return f"{sign}{hours:02d}{minutes:02d}"


def _week_start(day: date) -> date:
    """The Sunday that starts ``day``'s week (United States weeks)."""
    return day - timedelta(days=(day.weekday() + 1) % 7)


def week_fields(day: date) -> dict[str, int]:
    """Java's week fields of ``day`` in an English (United States) locale (Sunday first, one day makes a first
    week): ``Y`` week year, ``w`` week of it, ``W`` week of the month, ``F`` day of the week in the month."""
    start = _week_start(day)
    week_year = (start + timedelta(days=6)).year  # (a week holding the 1st of January is that year's first)
    first = _week_start(date(week_year, 1, 1))
    return {
        "Y": week_year,
        "w": (start - first).days // 7 + 1,
        "W": (start - _week_start(day.replace(day=1))).days // 7 + 1,
        "F": (day.day - 1) // 7 + 1,
    }


def format_millis(millis: int, pattern: str) -> str:
    """``millis`` since the epoch, formatted in UTC."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
    weeks = (
        week_fields(moment.date())
        if any(isinstance(t, tuple) and t[0] in WRITTEN_ONLY for t in tokens(pattern))
        else {}
    )
    out = []
    for token in tokens(pattern):
        if isinstance(token, str):
            out.append(token)
            continue
        letter, count = token
        hour12 = moment.hour % 12 or 12
        numbers = {
            **weeks,
            "y": moment.year % 100 if count == 2 else moment.year,
            "M": moment.month,
            "d": moment.day,
            "D": moment.timetuple().tm_yday,
            "u": moment.isoweekday(),
            "H": moment.hour,
            "k": moment.hour or 24,
            "K": moment.hour % 12,
            "h": hour12,
            "m": moment.minute,
            "s": moment.second,
            "S": moment.microsecond // 1000,
        }
        if letter == "Y" and count == 2:
            out.append(str(weeks["Y"] % 100).zfill(2))
        elif letter in "ML" and count >= 3:
            name = _MONTHS[moment.month - 1]
            out.append(name if count >= 4 else name[:3])
        elif letter == "G":
            out.append("AD")
        elif letter == "E":
            name = _DAYS[moment.weekday()]
            out.append(name if count >= 4 else name[:3])
        elif letter == "a":
            out.append("AM" if moment.hour < 12 else "PM")
        elif letter in "zZX":
            out.append(_zone(timedelta(0), letter, count))
        else:
            out.append(str(numbers["M" if letter == "L" else letter]).zfill(count))
    return "".join(out)


def _numeric(token: tuple[str, int] | str) -> bool:
    """Whether a pattern field is read as a number (a month of ``MMM`` or more is a name)."""
    return isinstance(token, tuple) and token[0] in "yMLdDuHkKhmsS" and not (token[0] in "ML" and token[1] >= 3)


def parse_millis(text: str, pattern: str, *, now_year: int | None = None) -> int:
    """``text`` in ``pattern`` as milliseconds since the epoch (UTC unless the text names a zone);
    ValueError if it does not match.

    As Java's lenient ``SimpleDateFormat.parse``: a number takes any count of digits, except that a field
    followed by another numeric field (``yyyyMMdd``) takes at most its letters' count; text after the
    pattern is ignored; out-of-range values roll over (the 32nd of January is the 1st of February); a
    two-digit ``yy`` year falls within 80 years before and 20 after ``now_year`` (this year)."""
    parsed = tokens(pattern)
    written_only = sorted({t[0] for t in parsed if isinstance(t, tuple) and t[0] in WRITTEN_ONLY})
    if written_only:
        raise ValueError(f"the week fields ({', '.join(written_only)}) of {pattern!r} are written, not read, here")
    groups: list[tuple[str, int]] = []
    regex = []
    for i, token in enumerate(parsed):
        if isinstance(token, str):
            regex.append(re.escape(token))
            continue
        letter, count = token
        if _numeric(token):
            abutting = i + 1 < len(parsed) and _numeric(parsed[i + 1])
            regex.append(rf"(\d{{1,{count}}})" if abutting else r"(\d+)")
        elif letter in "ML":
            regex.append("([A-Za-z]+)")
        elif letter == "G":
            regex.append("(?:AD|ad)")
            continue
        elif letter == "E":
            regex.append("(?:[A-Za-z]+)")
            continue
        elif letter == "a":
            regex.append("(AM|PM|am|pm)")
        else:  # z, Z, X
            regex.append(r"(Z|UTC|GMT[+-]\d{1,2}(?::?\d{2})?|GMT|[+-]\d{2}(?::?\d{2})?)")
        groups.append(token)
    match = re.match("".join(regex), text)
    if match is None:
        raise ValueError(f"Unparseable date: {text!r} (format {pattern!r})")
    parts = {"y": 1970, "M": 1, "d": 1, "H": 0, "m": 0, "s": 0, "S": 0}
    day_of_year = None
    pm = None
    hour12 = None
    offset = timedelta(0)
    for (letter, count), value in zip(groups, match.groups(), strict=True):
        if letter in "ML" and count >= 3:
            names = [n.lower() for n in _MONTHS]
            short = [n[:3] for n in names]
            name = value.lower()
            if name not in names and name not in short:
                raise ValueError(f"Unparseable date: {text!r}: no month {value!r}")
            parts["M"] = (names.index(name) if name in names else short.index(name)) + 1
        elif letter == "a":
            pm = value.upper() == "PM"
        elif letter in "zZX":
            offset = _parse_zone(value)
        elif letter == "y":
            parts["y"] = _two_digit_year(int(value), now_year) if count <= 2 and len(value) == 2 else int(value)
        elif letter == "D":
            day_of_year = int(value)
        elif letter in "hK":
            hour12 = int(value) % 12
        elif letter == "k":
            parts["H"] = int(value) % 24
        elif letter != "u":
            parts["M" if letter == "L" else letter] = int(value)
    if hour12 is not None:
        parts["H"] = hour12 + (12 if pm else 0)
    elif pm and parts["H"] < 12:
        parts["H"] += 12
    year, month = divmod(parts["y"] * 12 + parts["M"] - 1, 12)
    try:
        start = datetime(year, 1, 1, tzinfo=UTC)
        if day_of_year is not None:
            days = day_of_year - 1
        else:
            days = (datetime(year, month + 1, 1, tzinfo=UTC) - start).days + parts["d"] - 1
        moment = start + timedelta(
            days=days, hours=parts["H"], minutes=parts["m"], seconds=parts["s"], milliseconds=parts["S"]
        )
        return (moment - offset - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"Unparseable date: {text!r}: {exc}") from exc


def _two_digit_year(value: int, now_year: int | None) -> int:
    """Java's reading of a two-digit year: the one within 80 years before and 20 after this year."""
    start = (now_year if now_year is not None else datetime.now(UTC).year) - 80
    year = start - start % 100 + value
    return year + 100 if year < start else year


def _parse_zone(value: str) -> timedelta:
    if value in ("Z", "UTC", "GMT"):
        return timedelta(0)
    found = re.fullmatch(r"(?:GMT)?([+-])(\d{1,2}):?(\d{2})?", value)
    if found is None:
        raise ValueError(f"Unparseable zone {value!r}")
    sign = -1 if found.group(1) == "-" else 1
    return sign * timedelta(hours=int(found.group(2)), minutes=int(found.group(3) or 0))


def iso_millis(millis: int) -> str:
    """A timestamp as the transformed record carries it: ISO 8601 in UTC, to the millisecond."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def connect_date_text(millis: int) -> str:
    """A date as Kafka Connect writes it as a string (``Values.dateFormatFor``): a time of day before the epoch's
    first day is over (or before it), a date at midnight, else a timestamp; in UTC."""
    text = iso_millis(millis)
    if millis < 86_400_000:
        return text[11:]
    return text[:10] if millis % 86_400_000 == 0 else text


_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:\d{2})?)?"
    r"|\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?"
)


def parse_iso(text: str) -> int:
    """An ISO 8601 date, time or timestamp in its extended form (as ``iso_millis`` writes them) in epoch
    milliseconds; ValueError for other text."""
    if not _ISO.fullmatch(text.strip()):
        raise ValueError(f"not an ISO 8601 date, time or timestamp: {text!r}")
    value = text.strip().replace("Z", "+00:00")
    if "T" not in value and ":" in value:  # a time of day
        moment = datetime.fromisoformat(f"1970-01-01T{value}")
    else:
        moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
