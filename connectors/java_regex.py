"""Java's regular expressions (``java.util.regex.Pattern``), as Kafka Connect's configs write them, compiled
by Python's ``re``: ``topics.regex``, the Iceberg sink's ``route-regex``, and the transforms' patterns
(``RegexRouter``, ``TopicNameMatches``).

The two engines share most of their syntax; Python's is run in its ASCII mode, where ``\\w``, ``\\d``,
``\\s`` and case-insensitive matching are ASCII's, as Java's are by default. What Java writes differently is
translated: named groups ``(?<name>...)`` and their references ``\\k<name>``, quoted text ``\\Q...\\E``, the
end anchors ``\\z`` and ``\\Z``, and the POSIX classes ``\\p{Lower}``, ``\\p{Alnum}``... (and ``\\P{...}``).
Refused, with the reason: what Python would read otherwise without an error (Java's class unions and
intersections, ``[a-z[0-9]]``, ``[a-z&&[^x]]``; Unicode properties, ``\\p{IsAlphabetic}``), Python's own syntax
that Java refuses (``(?P<name>...)``, ``(?#...)``), and what Python has no syntax for (its error says so). Left
as they differ: ``.`` matches ``\\r`` here, and ``\\v`` is only a vertical tab.
"""

from __future__ import annotations

import re
import warnings

# Java's POSIX character classes (US-ASCII), as the ranges of a character class.
_POSIX = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7f",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": "!-/:-@\\[-`{-~",
    "Graph": "!-~",
    "Print": " -~",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1f\\x7f",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0b\\f\\r",
}


def translate(pattern: str) -> str:
    """``pattern`` in Python's syntax; ValueError for what Java means and Python cannot say the same way."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    class_start = -1
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            following = pattern[i + 1]
            if following == "Q":
                end = pattern.find("\\E", i + 2)
                quoted = pattern[i + 2 : end if end >= 0 else n]
                out.append(
                    "".join(f"\\{c}" if not c.isalnum() else c for c in quoted) if in_class else re.escape(quoted)
                )
                i = end + 2 if end >= 0 else n
                continue
            if following in "pP":
                name, i = _property_name(pattern, i + 2)
                ranges = _POSIX.get(name)
                if ranges is None:
                    raise ValueError(
                        f"\\{following}{{{name}}}: only Java's POSIX classes (\\p{{Lower}}, \\p{{Alnum}}...) are "
                        "supported here, not Unicode properties"
                    )
                if in_class:
                    if following == "P":
                        raise ValueError(f"\\P{{{name}}} inside a character class is not supported here")
                    out.append(ranges)
                else:
                    out.append(f"[{'^' if following == 'P' else ''}{ranges}]")
                continue
            if following == "k" and pattern[i + 2 : i + 3] == "<" and not in_class:
                end = pattern.find(">", i + 3)
                if end < 0:
                    raise ValueError("\\k<name> is not closed")
                out.append(f"(?P={pattern[i + 3 : end]})")
                i = end + 1
                continue
            if following == "z" and not in_class:
                out.append("\\Z")
            elif following == "Z" and not in_class:
                out.append("(?=\\n?\\Z)")  # (Java's: the end, or before a final line break)
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if char == "[":
                raise ValueError(
                    "a character class inside a character class (Java's union, as in [a-z[0-9]]) is not "
                    "supported here: write the one class ([a-z0-9])"
                )
            if char == "&" and pattern[i + 1 : i + 2] == "&":
                raise ValueError("Java's class intersection (&&) is not supported here: write the class out")
            if char == "]" and i > class_start:
                in_class = False
        elif char == "[":
            in_class = True
            # (A ']' first in the class, or after its '^', is a literal one in both engines.)
            class_start = i + 2 if pattern[i + 1 : i + 2] == "^" else i + 1
        elif char == "(" and pattern.startswith("(?<", i) and pattern[i + 3 : i + 4].isalpha():
            out.append("(?P<")
            i += 3
            continue
        elif char == "(" and pattern.startswith(("(?P", "(?#"), i):
            raise ValueError(f"{pattern[i : i + 3]} is Python's syntax, which Java refuses")
        out.append(char)
        i += 1
    return "".join(out)


def _property_name(pattern: str, at: int) -> tuple[str, int]:
    """The name of a ``\\p`` class at ``at`` (``{Name}`` or one letter), and where the pattern goes on."""
    if pattern[at : at + 1] == "{":
        end = pattern.find("}", at)
        if end < 0:
            raise ValueError("\\p{...} is not closed")
        return pattern[at + 1 : end], end + 1
    return pattern[at : at + 1], at + 1


def compile_java(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """``pattern`` (Java's syntax) compiled; ValueError with the reason when it cannot mean here what it means
    to Java."""
    translated = translate(pattern)
    with warnings.catch_warnings():
        # (Python warns where a later version of it would read a class otherwise: refused, so that a pattern
        # never changes its meaning under the same config.)
        warnings.simplefilter("error", FutureWarning)
        try:
            return re.compile(translated, flags | re.ASCII)
        except FutureWarning as warning:
            raise ValueError(
                f"{warning}: a class Python's engine warns it will read otherwise; write the character class out"
            ) from None
        except re.error as exc:
            if "global flags not at the start" in str(exc):
                raise ValueError(
                    f"{exc}: Java applies an inline flag from where it stands, Python's only at the start; put it "
                    "at the start, or scope it: (?i:...)"
                ) from None
            raise ValueError(str(exc)) from None
