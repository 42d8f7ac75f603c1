"""The Hudi sink's runtime, as its plugin names it: the participants' writer, the coordinator's committer, and
the commits its timeline holds (for rebuilding a lost ledger)."""

from __future__ import annotations

from connectors.config import SinkConfig
from sinks.hudi.commit import HudiCommitter, recovered_commits
from sinks.hudi.writer import HudiWriter


def writer(config: SinkConfig) -> HudiWriter:
    return HudiWriter(config)


def committer(connector: str, config: SinkConfig) -> HudiCommitter:
    return HudiCommitter(connector, config)


__all__ = ["committer", "recovered_commits", "writer"]
