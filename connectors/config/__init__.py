"""Connector config definitions and the one validator used by form, admin and API."""

from connectors.config.definitions import ConfigKey, Plugin
from connectors.config.plugins import PLUGINS, resolve_plugin
from connectors.config.validation import ConfigValidation, SinkConfig, validate_config

__all__ = ["PLUGINS", "ConfigKey", "ConfigValidation", "Plugin", "SinkConfig", "resolve_plugin", "validate_config"]
