"""connectors.java_regex: Java's regular expressions (Kafka Connect's configs) compiled by Python's ``re``.

The expected results are what ``java.util.regex.Pattern.compile(pattern).matcher(text).matches()`` gave on
JDK 17 for the same cases."""

from __future__ import annotations

import pytest

from connectors.java_regex import compile_java

JAVA_MATCHES = [
    (r"\p{Lower}+\.orders", "db.orders", True),
    (r"\p{Lower}+\.orders", "DB.orders", False),
    (r"\P{Digit}+", "abc", True),
    (r"\P{Digit}+", "ab1", False),
    (r"[\p{Alpha}_]+", "a_b", True),
    (r"[\p{Alpha}_]+", "a-b", False),
    (r"\Qdb.inv.\E.*", "db.inv.orders", True),
    (r"\Qdb.inv.\E.*", "dbXinvXorders", False),
    (r"[\Q.-\E]+", ".-.", True),
    (r"[\Q.-\E]+", "a", False),
    (r"(?<t>[a-z]+)\.\k<t>", "ab.ab", True),
    (r"(?<t>[a-z]+)\.\k<t>", "ab.cd", False),
    (r"orders\z", "orders", True),
    (r"orders\Z", "orders\n", False),
    (r"orders\z", "orders\n", False),
    (r"(?<=db)\.orders", ".orders", False),
    (r"[\[]x", "[x", True),
    (r"[]a]+", "]a", True),
    (r"\p{Punct}+", "!/:@[`{~", True),
    (r"\p{Space}+", " \t\n", True),
    # Java's \w, \d and case-insensitive matching are ASCII's by default.
    (r"\w+", "café", False),
    (r"\d+", "١٢", False),
    (r"(?i)CAFÉ", "café", False),
    (r"(?i)ORDERS", "orders", True),
]


@pytest.mark.parametrize(("pattern", "text", "matches"), JAVA_MATCHES)
def test_a_pattern_matches_what_javas_matches(pattern: str, text: str, matches: bool) -> None:
    assert (compile_java(pattern).fullmatch(text) is not None) is matches


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        # Python would read these as other classes, without an error (Java: "abc1" and "orders" match).
        (r"[a-z[0-9]]+", "union"),
        (r"[a-z&&[^x]]+", "intersection"),
        (r"[a-z--x]", "will read otherwise"),
        # What Python has no syntax for, refused with its reason.
        (r"db\.(?i)ORDERS", "global flags"),
        (r"\p{L}+", "POSIX"),
        (r"\p{IsAlpha}+", "Unicode properties"),  # (Java's: Unicode's alphabetic, not ASCII's)
        (r"(?P<n>a)", "Python's syntax"),
        (r"(?#note)a", "Python's syntax"),
        (r"[\P{Digit}x]", "inside a character class"),
        (r"\h+", "bad escape"),
    ],
)
def test_a_pattern_python_would_read_otherwise_or_cannot_read_is_refused_with_why(pattern: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        compile_java(pattern)
