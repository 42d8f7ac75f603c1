"""What of a config, or of a message about it, may leave the service: every secret hidden, here.

Two kinds of secret:

- a key that holds one (PASSWORD-typed keys, ``*.password``, ``*.secret``,
  ``*.key``, ``sasl.jaas.config``...): its whole value is hidden;
- a password written inside a URI, in any key (``iceberg.catalog.uri=
  postgresql+psycopg://user:password@host/db``, ``store.url``, a JDBC URL's
  ``password=`` parameter): only the password is hidden, so the rest of the
  URI stays readable.

The API, the UI, the admin, exports and the runtime's error records all show
``hidden_config`` or ``redact``; logs go through ``RedactCredentials``. A
config sent back with its secrets hidden, as it was shown, keeps the stored
ones (``keep_hidden_secrets``), so a secret survives an edit of anything else.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from connectors.config.definitions import is_secret_key

HIDDEN = "[hidden]"

# RFC 3986 userinfo, ``scheme://user:password@host``. Passwords are often
# written unescaped (an AWS secret key holds "/", some passwords "@"): the
# password runs to the "@" that precedes the host, whatever it holds but
# space and quotes, so it is hidden whole; a path holding "@" may be hidden
# with it, which errs the safe way.
_USERINFO = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://(?P<user>[^:/?#@\s\"'<>]*):)"
    r"(?P<password>[^\s\"'<>]+)(?=@[^\s@/\"'<>]*(?:[/?#\s\"'<>]|$))"
)
# ``?password=...`` / ``;password=...`` (JDBC and ODBC style URLs).
_PASSWORD_PARAMETER = re.compile(r"(?P<head>[?&;](?:password|pwd)=)(?P<password>[^&;\s]+)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every password written inside a URI replaced by ``[hidden]``."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: m["head"] + HIDDEN, text)
    return _PASSWORD_PARAMETER.sub(lambda m: m["head"] + HIDDEN, text)


def storable(text: str) -> str:
    """``text`` as the control plane stores it (an error, a warning): redacted, and with each NUL character,
    which PostgreSQL's text cannot hold (a record's value quoted in a reason may have one), as ``\\u0000``."""
    return redact(text).replace("\x00", "\\u0000")


def hidden_value(key: str, value: Any) -> Any:
    """The value of ``key`` as it may be shown."""
    if not value:
        return value
    if is_secret_key(key):
        return HIDDEN
    return redact(value) if isinstance(value, str) else value


def hidden_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config as it may be shown: secret keys' values and passwords inside URIs hidden."""
    return {key: hidden_value(key, value) for key, value in config.items()}


def keep_hidden_secrets(new: Mapping[str, Any], old: Mapping[str, str]) -> dict[str, Any]:
    """``new`` with every secret sent back hidden (as the API and UI show it) taking its stored value.

    A URI whose password comes back hidden takes the password stored for the
    same user in the same key, even when the rest of the URI was edited.
    """
    kept: dict[str, Any] = {}
    for key, value in new.items():
        stored = old.get(key)
        if stored is None or not isinstance(value, str) or HIDDEN not in value:
            kept[key] = value
        elif value == HIDDEN and is_secret_key(key):
            kept[key] = stored
        else:
            kept[key] = _with_stored_passwords(value, stored)
    return kept


def hidden_password_left(value: str) -> bool:
    """Whether ``value`` holds a URI password sent back hidden with no stored password to take."""
    return any(m["password"] == HIDDEN for m in _USERINFO.finditer(value)) or any(
        m["password"] == HIDDEN for m in _PASSWORD_PARAMETER.finditer(value)
    )


def _with_stored_passwords(value: str, stored: str) -> str:
    by_user = {m["user"]: m["password"] for m in _USERINFO.finditer(stored)}
    parameters = [m["password"] for m in _PASSWORD_PARAMETER.finditer(stored)]

    def userinfo(m: re.Match[str]) -> str:
        if m["password"] == HIDDEN and m["user"] in by_user:
            return m["head"] + by_user[m["user"]]
        return m[0]

    def parameter(m: re.Match[str]) -> str:
        if m["password"] == HIDDEN and len(parameters) == 1:
            return m["head"] + parameters[0]
        return m[0]

    return _PASSWORD_PARAMETER.sub(parameter, _USERINFO.sub(userinfo, value))


class RedactCredentials(logging.Filter):
    """Hides passwords inside URIs in every record a handler emits (a library's message included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = redact(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
