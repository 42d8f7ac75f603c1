"""JSON text to Python values and back, keeping integers beyond 64 bits whole: for the transforms' stage
(``workers.transformed``) and the decoder's columns converted in Python (``workers.json_decoder``)."""

from __future__ import annotations

import base64
import json
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
    value = orjson.loads(raw)
    if len(raw) < len(_LONG_DIGITS):  # (a key, often)
        return value
    return json.loads(raw) if _LONG_DIGITS in raw.translate(_DIGITS_AS_ZEROS) else value


def json_text(value: Any) -> bytes:
    """Compact JSON text, UTF-8 (integers beyond 64 bits by the standard library, which writes them whole)."""
    try:
        return orjson.dumps(value, default=_json_default)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default).encode()


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON")
