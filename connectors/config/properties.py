"""Java ``.properties`` text as ``java.util.Properties.load`` reads it: comments, continued lines, the three
separators and the escapes. Read from what people paste (standalone Connect's ``connector.properties``,
``connectors.ui.config_text``), the stack's settings files (``sinkadmin.services``) and Hudi's table config
(``hoodie.properties``, ``sinks.hudi.table_config``)."""

from __future__ import annotations

import re

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
# Properties.load's white space: space, tab and form feed (not other Unicode spaces).
_BLANK = " \t\f"


def property_entries(text: str) -> list[tuple[int, str, str]]:
    """Each entry's first line number, key and value, unescaped, in the text's order (a key set twice is
    there twice: the last one wins in ``load_properties``)."""
    found: list[tuple[int, str, str]] = []
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes goes on, the next one's leading white space dropped.
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_BLANK)
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split_entry(line)
        found.append((number, _unescape(key), _unescape(value)))
    return found


def load_properties(text: str) -> dict[str, str]:
    """The keys and values of ``text``."""
    return {key: value for _, key, value in property_entries(text)}


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_entry(line: str) -> tuple[str, str]:
    """A logical line's key (up to an unescaped ``=``, ``:`` or white space) and value (after the separator
    and the white space around it), both still escaped."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _BLANK:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANK)
    return key, rest


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)
