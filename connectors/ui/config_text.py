"""Connector configs as text: JSON objects and Java ``.properties`` files.

Both are what people paste from Kafka Connect tooling: JSON bodies (bare or
wrapped as ``{"name": ..., "config": {...}}``) and ``connector.properties``
files of standalone Connect.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

FORMATS = ("json", "properties")


class ConfigTextError(ValueError):
    """The text is neither a JSON object of keys nor a properties file; the message says where."""


def detect_format(text: str) -> str:
    return "json" if text.lstrip()[:1] in ("{", "[") else "properties"


def parse_config_text(text: str) -> dict[str, str]:
    if detect_format(text) == "json":
        return _parse_json(text)
    return parse_properties(text)


def _parse_json(text: str) -> dict[str, str]:
    try:
        parsed: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigTextError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(parsed, dict):
        raise ConfigTextError("the JSON must be an object of keys to values")
    # Connect's POST /connectors body wraps the config; accept it as is.
    if isinstance(parsed.get("config"), dict) and set(parsed) <= {"name", "config"}:
        parsed = parsed["config"]
    config: dict[str, str] = {}
    for key, value in parsed.items():
        if isinstance(value, bool):
            config[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            config[key] = str(value)
        else:
            raise ConfigTextError(f"{key}: values must be strings, numbers or booleans, not {type(value).__name__}")
    return config


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATOR = re.compile(r"(?<!\\)(?:\\\\)*[=:]|(?<!\\)(?:\\\\)*\s")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip() if pending else line.strip()
        if not pending:
            start = number
            if not stripped or stripped[0] in "#!":
                continue
        # A line ending in an odd number of backslashes continues on the next.
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            pending += stripped[:-1]
            continue
        lines.append((start, pending + stripped))
        pending = ""
    if pending:
        lines.append((start, pending))
    return lines


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    config: dict[str, str] = {}
    for number, line in _logical_lines(text):
        match = _SEPARATOR.search(line)
        if match is None:
            key, value = line, ""
        else:
            key = line[: match.end() - 1]
            rest = line[match.end() :].lstrip()
            # "key = value" has whitespace and then '=': the '=' is the separator.
            if match.group().isspace() and rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip()
            value = rest
        key = _unescape(key.strip())
        if not key:
            raise ConfigTextError(f"line {number}: a property needs a key before '='")
        config[key] = _unescape(value)
    return config


def _escape(text: str, *, key: bool) -> str:
    out = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[char])
        elif char in "=:#!" and key:
            out.append("\\" + char)
        elif char == " " and (key or index == 0):
            out.append("\\ ")
        else:
            out.append(char)
    return "".join(out)


def ordered_keys(config: Mapping[str, str]) -> list[str]:
    """connector.class first (it decides the plugin), then alphabetical."""
    return sorted(config, key=lambda k: (k != "connector.class", k))


def format_properties(config: Mapping[str, str]) -> str:
    return "".join(f"{_escape(k, key=True)}={_escape(config[k], key=False)}\n" for k in ordered_keys(config))


def format_json(config: Mapping[str, str]) -> str:
    return json.dumps({k: config[k] for k in ordered_keys(config)}, indent=2) + "\n"


def format_config(config: Mapping[str, str], fmt: str) -> str:
    return format_json(config) if fmt == "json" else format_properties(config)
