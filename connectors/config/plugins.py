"""The registered sink plugins, and which one a ``connector.class`` names."""

from __future__ import annotations

from connectors.config.definitions import Plugin
from sinks.registry import PLUGINS


def resolve_plugin(connector_class: str) -> Plugin | None:
    return next((plugin for plugin in PLUGINS if plugin.names(connector_class)), None)


def coordinated(connector_class: str) -> bool:
    """Whether a connector of this class has a coordinator (every sink but the mirror); an unknown class is
    treated as the table sinks are."""
    plugin = resolve_plugin(connector_class)
    return plugin is None or plugin.coordinated


__all__ = ["PLUGINS", "coordinated", "resolve_plugin"]
