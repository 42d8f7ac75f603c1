"""Connector configs as text: JSON objects and Java ``.properties`` files.

Both are what people paste from Kafka Connect tooling: JSON bodies (bare or
wrapped as ``{"name": ..., "config": {...}}``) and ``connector.properties``
files of standalone Connect.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from connectors.config.properties import property_entries

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


def parse_properties(text: str) -> dict[str, str]:
    config: dict[str, str] = {}
    for number, key, value in property_entries(text):
        if not key:
            raise ConfigTextError(f"line {number}: a property needs a key before '='")
        config[key] = value
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
