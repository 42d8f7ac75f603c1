"""Formatting for the UI: durations, ages, counts and error text as people read them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone

register = template.Library()


def _seconds(value: timedelta | float | int | None) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


@register.filter
def duration(value: timedelta | float | int | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 05 s``, ``3 h 20 min``, ``2 d 4 h``."""
    seconds = _seconds(value)
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@register.filter
def period(value: timedelta | float | int | None) -> str:
    """A window as people state one, without zero parts: ``45 s``, ``1 min``, ``1 min 30 s``, ``2 h``."""
    seconds = _seconds(value)
    if seconds is None:
        return "—"
    hours, rest = divmod(max(0, round(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{amount} {unit}" for amount, unit in ((hours, "h"), (minutes, "min"), (secs, "s")) if amount]
    return " ".join(parts) or "0 s"


@register.filter
def ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    return f"{duration(timezone.now() - value)} ago"


@register.filter
def thousands(value: Any) -> str:
    if value is None or value == "":
        return "—"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def rate(value: float | None) -> str:
    """``—`` before any commit, ``0/s`` for none in the window, and never a rounded 0 for a few records."""
    if value is None:
        return "—"
    if value <= 0:
        return "0/s"
    if value < 0.01:
        return "<0.01/s"
    if value >= 100:
        return f"{value:,.0f}/s"
    return f"{value:.1f}/s" if value >= 1 else f"{value:.2f}/s"


@register.filter
def short_id(value: Any) -> str:
    return str(value)[:8] if value else ""


@register.filter
def first_line(value: str | None) -> str:
    return next((line.strip() for line in (value or "").splitlines() if line.strip()), "")


@register.filter
def rest_lines(value: str | None) -> str:
    """Everything after the first non-empty line."""
    lines = (value or "").strip().splitlines()
    return "\n".join(lines[1:]).strip()


@register.filter
def readable_cause(message: str | None, trace: str | None = "") -> str:
    """The reason a person can act on: the message's first line, or a trace's final line."""
    headline = first_line(message)
    if headline:
        return headline
    lines = [line.strip() for line in (trace or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no reason recorded"


@register.filter
def get_item(mapping: dict[str, Any] | None, key: str) -> Any:
    return (mapping or {}).get(key)


@register.filter
def key_pattern(pattern: str) -> str:
    """``{table}.{setting}`` as people write placeholders: ``<table>.<setting>``."""
    return pattern.replace("{", "<").replace("}", ">")
