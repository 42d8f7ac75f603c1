"""The connector form, built from the plugin's config definitions.

Django forms carry the connector's own fields (name, initial state). The
config keys come from ``Plugin.keys`` at request time, so a new key in the
definitions shows up in the form with its group, documentation, default and
importance without touching this module. ``ConfigEditor`` reads a posted form
(field per key, a key/value editor for everything else, or one JSON /
properties text) into a flat config and renders errors per key; validation
itself is the one validator, ``validate_config``.

Secrets: a stored secret is never sent to the browser. Its field comes back
empty, which means "keep" and is posted on as ``[hidden]`` (the marker
``update_config`` resolves to the stored value); a box clears it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from django import forms
from django.http import QueryDict

from connectors.config import PLUGINS, ConfigKey, Plugin, resolve_plugin, validate_config
from connectors.config.definitions import Importance, KeyType, PrefixKey, is_secret_key
from connectors.config.secrets import HIDDEN, hidden_value, keep_hidden_secrets
from connectors.models import DesiredState
from connectors.ui.config_text import ConfigTextError, format_config, parse_config_text

FORM, RAW = "form", "raw"
RAW_ERRORS = "__raw__"
EXTRA_ERRORS = "__extra__"


class ConnectorMetaForm(forms.Form):
    name = forms.CharField(
        max_length=255,
        help_text="Unique; letters, digits, '-', '_' and '.' read best. No '/'.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    initial_state = forms.ChoiceField(
        choices=DesiredState.choices,
        initial=DesiredState.RUNNING,
        help_text="PAUSED or STOPPED create it without starting any task.",
    )


def field_id(key: str) -> str:
    return "cfg-" + re.sub(r"[^A-Za-z0-9_-]", "-", key)


@dataclass(frozen=True)
class KeyField:
    """One plugin key as the template renders it."""

    key: ConfigKey
    value: str
    errors: list[str]
    secret: bool
    secret_stored: bool

    @property
    def id(self) -> str:
        return field_id(self.key.name)

    @property
    def input_name(self) -> str:
        return f"cfg:{self.key.name}"

    @property
    def widget(self) -> str:
        if self.secret:
            return "password"
        if self.key.choices:
            return "choice"
        if self.key.type is KeyType.BOOLEAN:
            return "boolean"
        if self.key.name == "value.converter.avro.schema":
            return "textarea"
        return "text"

    @property
    def numeric(self) -> bool:
        return self.key.type in (KeyType.INT, KeyType.LONG)

    @property
    def has_content(self) -> bool:
        return bool(self.value or self.errors or self.secret_stored)


@dataclass(frozen=True)
class KeyGroup:
    name: str
    primary: list[KeyField]
    advanced: list[KeyField]
    prefixes: list[PrefixKey]

    @property
    def open_advanced(self) -> bool:
        return any(f.has_content for f in self.advanced)


@dataclass(frozen=True)
class ExtraRow:
    key: str
    value: str
    secret: bool
    secret_stored: bool


@dataclass
class ConfigEditor:
    """A config being edited: its values, the mode it is shown in and the errors per key."""

    plugin: Plugin
    values: dict[str, str]
    stored: dict[str, str] = field(default_factory=dict)
    mode: str = FORM
    raw_text: str = ""
    raw_format: str = "json"
    errors: dict[str, list[str]] = field(default_factory=dict)
    parse_failed: bool = False
    # Keys accepted and ignored, with why (ConfigValidation.notes): shown beside the problems, never one.
    notes: dict[str, list[str]] = field(default_factory=dict)
    # The validator has run on these values: only then may the form say it found no problem.
    checked: bool = False

    @classmethod
    def for_config(cls, config: Mapping[str, str], stored: Mapping[str, str] | None = None) -> ConfigEditor:
        stored = dict(stored or {})
        # What is stored is shown with its secrets hidden; what the user typed is shown as typed.
        values = {k: (hidden_value(k, v) if k in stored and stored[k] == v else v) for k, v in config.items()}
        return cls(plugin=_plugin_for(values), values=values, stored=stored)

    @classmethod
    def from_post(cls, data: QueryDict, stored: Mapping[str, str] | None = None) -> ConfigEditor:
        stored = dict(stored or {})
        mode = RAW if data.get("mode") == RAW else FORM
        raw_format = data.get("raw_format") or "json"
        if raw_format not in ("json", "properties"):
            raw_format = "json"
        if mode == RAW:
            text = data.get("raw", "")
            try:
                values = parse_config_text(text)
            except ConfigTextError as exc:
                editor = cls(plugin=PLUGINS[0], values={}, stored=stored, mode=RAW, raw_text=text)
                editor.raw_format = raw_format
                editor.errors[RAW_ERRORS] = [str(exc)]
                editor.parse_failed = True
                return editor
            return cls(
                plugin=_plugin_for(values), values=values, stored=stored, mode=RAW, raw_text=text, raw_format=raw_format
            )
        values, errors = _read_form(data, stored)
        editor = cls(plugin=_plugin_for(values), values=values, stored=stored, raw_format=raw_format)
        editor.errors.update(errors)
        return editor

    def check(self) -> ConfigEditor:
        """Add the validator's errors and notes for these values (the stored secrets they hide put back)."""
        if not self.parse_failed:
            validation = validate_config(keep_hidden_secrets(self.values, self.stored))
            self.errors.update(validation.errors)
            self.notes = validation.notes
        self.checked = True
        return self

    # --- what the template shows -------------------------------------------

    def switched(self, mode: str, raw_format: str | None = None) -> ConfigEditor:
        """The same config shown in the other mode (a parse error keeps the raw text in place)."""
        if self.parse_failed:
            return self
        fmt = raw_format or self.raw_format
        text = format_config(self.values, fmt) if mode == RAW else ""
        return ConfigEditor(
            self.plugin,
            dict(self.values),
            self.stored,
            mode,
            text,
            fmt,
            dict(self.errors),
            notes=dict(self.notes),
            checked=self.checked,
        )

    def text(self) -> str:
        return self.raw_text if self.mode == RAW and self.raw_text else format_config(self.values, self.raw_format)

    def groups(self) -> list[KeyGroup]:
        groups = []
        for name in self.plugin.groups:
            keys = sorted((k for k in self.plugin.keys if k.group == name), key=lambda k: k.order)
            fields = [self._field(k) for k in keys]
            groups.append(
                KeyGroup(
                    name=name,
                    primary=[f for f in fields if _is_primary(f.key)],
                    advanced=[f for f in fields if not _is_primary(f.key)],
                    prefixes=[p for p in self.plugin.prefix_keys if p.group == name],
                )
            )
        return groups

    def _field(self, key: ConfigKey) -> KeyField:
        value = self.values.get(key.name, "")
        secret = is_secret_key(key.name, self.plugin)
        return KeyField(
            key=key,
            value="" if secret and value == HIDDEN else value,
            errors=self.errors.get(key.name, []),
            secret=secret,
            secret_stored=secret and value == HIDDEN,
        )

    def extra_rows(self) -> list[ExtraRow]:
        known = {k.name for k in self.plugin.keys}
        rows = []
        for key in sorted(k for k in self.values if k not in known):
            value = self.values[key]
            secret = is_secret_key(key, self.plugin)
            rows.append(ExtraRow(key, "" if secret and value == HIDDEN else value, secret, secret and value == HIDDEN))
        return rows

    def extra_errors(self) -> list[tuple[str, str]]:
        known = {k.name for k in self.plugin.keys}
        return [
            (key, message)
            for key, messages in sorted(self.errors.items())
            if key not in known and key != RAW_ERRORS
            for message in messages
        ]

    def all_errors(self) -> list[tuple[str, str]]:
        return [(key, m) for key, messages in sorted(self.errors.items()) for m in messages]

    def problems(self) -> list[tuple[str, str, str]]:
        """(key, message, id of the element that shows it) for the validation summary's links."""
        known = {k.name for k in self.plugin.keys}
        problems = []
        for key, message in self.all_errors():
            if self.mode == RAW or key == RAW_ERRORS:
                anchor = "raw-config"
            else:
                anchor = field_id(key) if key in known else "kv-rows"
            problems.append((key, message, anchor))
        return problems

    def prefix_suggestions(self) -> list[str]:
        """Key stems offered while typing in the key/value editor."""
        return [key for prefix in self.plugin.prefix_keys for key in prefix.suggestions(self.values)]

    @property
    def error_count(self) -> int:
        return sum(len(m) for m in self.errors.values())


def _is_primary(key: ConfigKey) -> bool:
    return key.required or key.importance is Importance.HIGH


def _plugin_for(values: Mapping[str, str]) -> Plugin:
    return resolve_plugin(values.get("connector.class", "")) or PLUGINS[0]


def _posted_secret(value: str, key: str, stored: Mapping[str, str], clear: bool) -> str:
    """An empty secret field keeps the stored value unless the user asked to clear it."""
    if value == "" and key in stored and not clear:
        return HIDDEN
    return value


def _read_form(data: QueryDict, stored: Mapping[str, str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    values: dict[str, str] = {}
    errors: dict[str, list[str]] = {}
    plugin = resolve_plugin(data.get("cfg:connector.class", "")) or PLUGINS[0]
    for key in plugin.keys:
        raw = data.get(f"cfg:{key.name}", "")
        if is_secret_key(key.name, plugin):
            value = _posted_secret(raw, key.name, stored, bool(data.get(f"clear:{key.name}")))
        else:
            value = raw.strip()
        if value != "":
            values[key.name] = value
    keys, vals = data.getlist("extra-key"), data.getlist("extra-value")
    clears = set(data.getlist("extra-clear"))
    for raw_key, raw_value in zip(keys, vals, strict=False):
        name = raw_key.strip()
        if not name:
            continue
        if name in values:
            errors.setdefault(name, []).append("set twice: remove one of the two values")
            continue
        if is_secret_key(name, plugin):
            values[name] = _posted_secret(raw_value, name, stored, name in clears)
        else:
            values[name] = raw_value.strip()
    return values, errors
