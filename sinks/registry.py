"""Every sink plugin the product runs. Adding a sink is a package and a line here."""

from __future__ import annotations

from connectors.config.definitions import Plugin
from sinks.files.plugin import FILES
from sinks.hudi.plugin import HUDI
from sinks.iceberg.plugin import ICEBERG
from sinks.mirror.plugin import MIRROR

PLUGINS: tuple[Plugin, ...] = (ICEBERG, FILES, HUDI, MIRROR)
