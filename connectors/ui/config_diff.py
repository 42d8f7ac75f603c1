"""What an edit changes, key by key, before it is applied. Secret values never appear."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from connectors.config.definitions import is_secret_key
from connectors.config.secrets import HIDDEN, hidden_value, keep_hidden_secrets
from connectors.ui.config_text import ordered_keys


@dataclass(frozen=True)
class DiffLine:
    key: str
    change: str  # added | removed | changed | unchanged
    old: str | None
    new: str | None
    secret: bool


def config_fingerprint(config: Mapping[str, str]) -> str:
    """Names one version of a stored config, so an apply can refuse a config that moved since its review."""
    return hashlib.sha256(json.dumps(dict(config), sort_keys=True).encode()).hexdigest()


def diff_configs(running: Mapping[str, str], proposed: Mapping[str, str]) -> list[DiffLine]:
    """Changed keys first in key order, then the unchanged ones; ``proposed`` may hold ``[hidden]``."""
    resolved = keep_hidden_secrets(proposed, running)
    lines: list[DiffLine] = []
    for key in ordered_keys({**running, **resolved}):
        old, new = running.get(key), resolved.get(key)
        secret = is_secret_key(key)
        if old == new:
            change = "unchanged"
        elif old is None:
            change = "added"
        elif new is None:
            change = "removed"
        else:
            change = "changed"
        if secret:
            old = None if old is None else HIDDEN
            new = None if new is None else (HIDDEN if change == "unchanged" else "(new value)")
        else:
            old, new = hidden_value(key, old), hidden_value(key, new)
            if change == "changed" and old == new:
                new = f"{new} (new password)"
        lines.append(DiffLine(key, change, old, None if new is None else str(new), secret))
    return sorted(lines, key=lambda line: line.change == "unchanged")
