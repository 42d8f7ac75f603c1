"""Typed readers for settings that come from the environment.

Each reader fails with :class:`SettingError`, whose message is one line that
names the variable and says what is wrong, so a bad deployment is told what to
fix instead of being shown a traceback.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit


class SettingError(Exception):
    """A setting from the environment is missing or malformed."""


def env_str(name: str, default: str) -> str:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingError(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no)")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise SettingError(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise SettingError(f"{name}={value} is above the maximum {maximum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_url(name: str, default: str, *, schemes: set[str]) -> str:
    """A URL whose scheme is one of ``schemes``; the value is returned as given."""
    value = env_str(name, default)
    parts = urlsplit(value)
    if parts.scheme not in schemes:
        allowed = ", ".join(sorted(schemes))
        raise SettingError(f"{name}={_redact(value)!r} must be a URL with scheme {allowed}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise SettingError(f"{name}={_redact(value)!r} has a malformed port") from None
    return value


def env_bootstrap_servers(name: str, default: str) -> str:
    """A Kafka bootstrap list: comma-separated host:port pairs."""
    value = env_str(name, default)
    for server in value.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            raise SettingError(f"{name}={value!r} must be a comma-separated list of host:port")
    return value


def _redact(url: str) -> str:
    """Hide a password in a URL before it is printed."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url
