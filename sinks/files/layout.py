"""Where a record's file goes: the Confluent storage sinks' partitioners and file names.

Pure functions of a record's partition, fields and time: the writer (in
Spark's Python workers or a participant) and the tests use them alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

# Joda-Time's pattern letters that this formatter knows (``path.format``).
_NUMERIC = set("yYxCMdDHhKkmsSwe")
_TEXT = set("MEa")
KNOWN_LETTERS = _NUMERIC | _TEXT | set("Zz")
# The English names Joda-Time prints for text fields (the JDK's English locale data), fixed here rather than
# taken from ``calendar``, whose names follow the process's LC_TIME locale.
MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")  # (datetime.weekday order)
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


def locale_fields(pattern: str) -> list[str]:
    """The fields of a Joda-Time pattern whose text depends on the locale: month names (``MMM``, ``MMMM``), day
    names (``E``), the half day (``a``) and time zone names (``z``); numbers are the same in every locale."""
    return [
        text
        for kind, text in joda_tokens(pattern)
        if kind == "field" and (text[0] in "Eaz" or (text[0] == "M" and len(text) >= 3))
    ]


# The languages a ``locale`` may name: the ISO 639 codes java.util.Locale knows (Locale.getISOLanguages(), with
# Java's old codes iw, in, ji, mo), then the further languages the JDK has locale data for (the languages of
# Locale.getAvailableLocales() on JDK 17 and 25). Lists printed by those JDKs.
_LANGUAGE_CODES = """
aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de
dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id
ie ig ii ik in io is it iu iw ja ji jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln
lo lt lu lv mg mh mi mk ml mn mo mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi
pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw ta te tg th ti tk
tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
agq ann asa ast bal bas bem bez bgc bho blo brx ccp ceb cgg chr ckb csw dav dje doi dsb dua dyo ebu
ewo fil frr fur gaa gsw guz haw hsb jgo jmc kab kam kde kea kgp khq kkj kln kok ksb ksf ksh kxv lag
lij lkt lmo lrc luo luy mai mas mdf mer mfe mgh mgo mni mua mzn naq nds nmg nnh nqo nso nus nyn pcm
pis raj rof rwk sah saq sat sbp seh ses shi smn sms syr szl teo tok twq tzm vai vec vmw vun wae xnr
xog yav yrl yue zgh
"""
JAVA_LANGUAGES = frozenset(_LANGUAGE_CODES.split())
# The regions: the ISO 3166 codes Java knows (Locale.getISOCountries()), then the other regions of its locale
# data (UN M.49 areas such as 419, Latin America, and CLDR's own).
_REGION_CODES = """
AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT
BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH
ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT
HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS
LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI
NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG
SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG
UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW
001 150 419 CS DG EA IC XK
"""
JAVA_REGIONS = frozenset(_REGION_CODES.split())
# A variant: BCP 47's (5 to 8 letters or digits, or a digit and 3 more: POSIX, 1996), or one of the three
# Java names in its own locales' toString form (ja_JP_JP, th_TH_TH, no_NO_NY).
_VARIANT = re.compile(r"[0-9][A-Za-z0-9]{3}|[A-Za-z0-9]{5,8}|JP|TH|NY")


@dataclass(frozen=True)
class JavaLocale:
    """A ``locale`` setting, read as its users write it: a language, then an optional script, region and variants,
    separated by ``-`` (a BCP 47 tag: en-US) or ``_`` (Java's Locale.toString(): en_US)."""

    language: str
    script: str = ""
    region: str = ""
    variants: tuple[str, ...] = ()

    @property
    def english(self) -> bool:
        return self.language == "en"

    @property
    def bare(self) -> bool:
        """Whether it is a language alone. The Confluent sinks build the locale with Java's ``new Locale(value)``,
        which takes the whole value as the language: only a bare language (``fr``) gets that language's names;
        ``fr-FR`` or ``fr_FR`` is a language Java has no data for, and gets English names."""
        return not (self.script or self.region or self.variants)


def java_locale(value: str) -> JavaLocale:
    """``value`` as a locale Java knows; ValueError saying what is wrong with it otherwise."""
    subtags = re.split(r"[-_]", value.strip())
    if not all(subtags):
        raise ValueError("an empty part (two separators in a row, or one at an end)")
    first, rest = subtags[0], subtags[1:]
    if first.lower() not in JAVA_LANGUAGES:
        if first.upper() in JAVA_REGIONS and first.isalpha():
            raise ValueError(
                f"{first!r} is a region, not a language: start with the language (e.g. en-{first.upper()})"
            )
        raise ValueError(f"{first!r} is not a language Java knows (an ISO 639 code such as en, fr or de)")
    script = region = ""
    if rest and re.fullmatch(r"[A-Za-z]{4}", rest[0]):
        script, rest = rest[0].title(), rest[1:]
    if rest and re.fullmatch(r"[A-Za-z]{2}|[0-9]{3}", rest[0]):
        region, rest = rest[0].upper(), rest[1:]
        if region not in JAVA_REGIONS:
            raise ValueError(f"{region!r} is not a region Java knows (an ISO 3166 code such as US, GB or FR)")
    for variant in rest:
        if not (variant.isascii() and _VARIANT.fullmatch(variant)):
            raise ValueError(
                f"{variant!r} is not a variant (5 to 8 letters or digits, e.g. POSIX); write a language, then a "
                "region (en-US, en_US)"
            )
    return JavaLocale(first.lower(), script, region, tuple(rest))


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
            return MONTH_NAMES[moment.month - 1]
        if width == 3:
            return MONTH_NAMES[moment.month - 1][:3]
        return f"{moment.month:0{width}d}"
    if letter == "S":
        return f"{moment.microsecond // 1000:03d}"[:width].ljust(width, "0")
    if letter == "E":
        return DAY_NAMES[moment.weekday()] if width >= 4 else DAY_NAMES[moment.weekday()][:3]
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
    """``moment`` as Joda-Time's DateTimeFormat prints it with ``pattern`` in an English locale (the only names
    this sink writes: ``check`` refuses a locale that would name months or days otherwise)."""
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


def file_name(
    topic: str, partition: int, start: int, end: int | None, extension: str, pad: int, delim: str = "+"
) -> str:
    """``<topic>+<partition>+<first offset>+<last offset>.<ext>``, offsets zero-padded (the HDFS sinks' name);
    without ``end``, ``<topic>+<partition>+<first offset>.<ext>`` (the S3 sink's)."""
    name = f"{topic}{delim}{partition}{delim}{start:0{pad}d}"
    return f"{name}{delim}{end:0{pad}d}.{extension}" if end is not None else f"{name}.{extension}"


def parse_file_name(name: str, delim: str = "+") -> tuple[str, int, int, int] | None:
    """(topic, partition, first offset, last offset) of a committed file's name (``.json.gz`` for a gzipped
    JSON file, s3.compression.type); None for another file."""
    parts = _name_parts(name, delim, 4)
    return (parts[0], int(parts[1]), int(parts[2]), int(parts[3])) if parts else None


def parse_start_file_name(name: str, delim: str = "+") -> tuple[str, int, int] | None:
    """(topic, partition, first offset) of a committed file's name as the S3 sink names it; None for another
    file."""
    parts = _name_parts(name, delim, 3)
    return (parts[0], int(parts[1]), int(parts[2])) if parts else None


def _name_parts(name: str, delim: str, count: int) -> list[str] | None:
    stem = name.removesuffix(".gz").rsplit(".", 1)[0]
    parts = stem.rsplit(delim, count - 1)
    if len(parts) != count or not all(p.isdigit() for p in parts[1:]):
        return None
    return parts
