"""The Hudi sink's runtime, as its plugin names it: the participants' writer and the coordinator's committer."""

from __future__ import annotations

from connectors.config import SinkConfig
from sinks.hudi.commit import HudiCommitter
from sinks.hudi.writer import HudiWriter


def writer(config: SinkConfig) -> HudiWriter:
    return HudiWriter(config)


def committer(connector: str, config: SinkConfig) -> HudiCommitter:
    return HudiCommitter(connector, config)
