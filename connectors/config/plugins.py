"""The registered sink plugins, and which one a ``connector.class`` names."""

from __future__ import annotations

from connectors.config.definitions import Plugin
from sinks.registry import PLUGINS


def resolve_plugin(connector_class: str) -> Plugin | None:
    return next((plugin for plugin in PLUGINS if plugin.names(connector_class)), None)


__all__ = ["PLUGINS", "resolve_plugin"]
