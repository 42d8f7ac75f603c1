"""JSON text to Python values and back, keeping integers beyond 64 bits whole: for the transforms' stage
(``workers.transformed``) and the decoder's columns converted in Python (``workers.json_decoder``)."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import orjson

# An integer literal orjson reads as a float (beyond its 64 bits: below -2**63 or above 2**64 - 1) has 19
# digits or more; so has any text that holds one. Found by mapping every digit to 0, then looking for
# nineteen 0s: both at C speed (a regular expression for the run cost several times the parse).
_DIGITS_AS_ZEROS = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_DIGITS = b"0" * 19


def parse_json(raw: bytes) -> Any:
    """JSON text as Python values: by orjson (several times the standard library's speed, which is most of
    what a transform costs: bench/transform_cost.py). orjson reads an integer beyond 64 bits as a float:
    text with a run of 19 digits or more, which such an integer has, is read again by the standard library,
    which keeps integers whole (what orjson refuses, such as NaN or a lone surrogate, stays refused)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # orjson also refuses a number beyond a double's range: an integer of it is read whole (Jackson's
        # BigInteger); one with a fraction or an exponent stays refused (JSON text here cannot carry it). The
        # rest is read again, since orjson may not have read on to what it would refuse after it.
        if not str(exc).startswith("number is infinity"):
            raise
        value = json.loads(raw, parse_constant=_refused, parse_float=_finite_float)
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError as surrogate:  # (a lone surrogate, which orjson refuses)
            raise ValueError(f"not JSON text: {surrogate.reason}") from None
        return value
    if len(raw) < len(_LONG_DIGITS):  # (a key, often)
        return value
    if _LONG_DIGITS in raw.translate(_DIGITS_AS_ZEROS):
        return json.loads(raw, parse_constant=_refused, parse_float=_finite_float)
    return value


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, as orjson reads it: one beyond a double's range refused."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number is infinity when parsed as double: {text[:40]}")
    return value


def _refused(constant: str) -> Any:
    """The standard library's reading of ``NaN`` and ``Infinity``, which are not JSON: refused, as orjson does."""
    raise ValueError(f"{constant} is not JSON")


def json_text(value: Any, nonfinite: bool = False) -> bytes:
    """Compact JSON text, UTF-8 (integers beyond 64 bits by the standard library, which writes them whole).

    ``nonfinite``: the value may hold floats JSON has no number for (NaN, infinities: a Cast makes them), written
    as the strings Jackson writes for them, ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (a reader of numbers
    reads them back; orjson would write ``null``, a value lost)."""
    try:
        text = orjson.dumps(value, default=_json_default)
    except TypeError:
        if nonfinite:
            value = _nonfinite_as_text(value)  # (the standard library would write NaN and Infinity bare)
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default).encode()
    if nonfinite and b"null" in text:  # (what orjson writes for them)
        finite = _nonfinite_as_text(value)
        if finite is not value:
            return json_text(finite)
    return text


def _nonfinite_as_text(value: Any) -> Any:
    """``value`` with its non-finite floats as Jackson's strings for them; ``value`` itself when it has none."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        items = {k: _nonfinite_as_text(v) for k, v in value.items()}
        return items if any(items[k] is not v for k, v in value.items()) else value
    if isinstance(value, list):
        elements = [_nonfinite_as_text(v) for v in value]
        return elements if any(e is not v for e, v in zip(elements, value, strict=True)) else value
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON")
