"""The UI's formatting filters: figures as people read them, and never a misleading round."""

from __future__ import annotations

from datetime import timedelta

import pytest

from connectors.templatetags.sinkadmin_ui import period, rate


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "—"),  # never committed
        (0.0, "0/s"),  # idle: nothing committed in the window
        (0.004, "<0.01/s"),  # a few records in a long window: not a rounded 0
        (0.25, "0.25/s"),
        (15.0, "15.0/s"),
        (1234.5, "1,234/s"),
    ],
)
def test_rates(value: float | None, shown: str) -> None:
    assert rate(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (timedelta(seconds=45), "45 s"),
        (timedelta(minutes=1), "1 min"),
        (timedelta(seconds=90), "1 min 30 s"),
        (timedelta(minutes=10), "10 min"),
        (timedelta(hours=2), "2 h"),
        (timedelta(hours=1, minutes=30), "1 h 30 min"),
    ],
)
def test_periods_state_a_window_without_zero_parts(value: timedelta, shown: str) -> None:
    assert period(value) == shown
