"""docs/configuration.md is what `manage.py config_reference` renders from the plugins' key definitions.
No servers: the reference reads definitions only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from connectors.config import PLUGINS
from connectors.management.commands import config_reference


def test_the_checked_in_reference_is_current() -> None:
    checked_in = config_reference.reference_path().read_text(encoding="utf-8")
    assert checked_in == config_reference.render(), "docs/configuration.md is out of date: run make config-reference"


def test_it_lists_every_key_and_key_family_of_every_plugin() -> None:
    rendered = config_reference.render()
    for plugin in PLUGINS:
        assert f"## {plugin.title}\n" in rendered
        for key in plugin.keys:
            assert f"- `{key.name}`: " in rendered
        for family in plugin.prefix_keys:
            assert f"- `{family.prefix}" in rendered


def test_check_fails_naming_the_make_target_when_the_file_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text("# Configuration reference\n", encoding="utf-8")
    monkeypatch.setattr(config_reference, "reference_path", lambda: stale)
    with pytest.raises(
        CommandError, match=re.escape("docs/configuration.md is out of date: run make config-reference")
    ):
        call_command("config_reference", "--check")
    call_command("config_reference")
    assert stale.read_text(encoding="utf-8") == config_reference.render()
    call_command("config_reference", "--check")
