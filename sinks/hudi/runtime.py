"""The Hudi sink's runtime, as its plugin names it: the participants' writer, the coordinator's committer, and
the commits its timeline holds (for rebuilding a lost ledger)."""

from __future__ import annotations

from typing import Any

from connectors.config import SinkConfig
from sinks.hudi.commit import HudiCommitter, recovered_commits
from sinks.hudi.writer import HudiWriter


def writer(config: SinkConfig) -> HudiWriter:
    return HudiWriter(config)


def committer(connector: str, config: SinkConfig) -> HudiCommitter:
    return HudiCommitter(connector, config)


def maintainer(connector: str, connector_id: int, epoch: int, config: SinkConfig, committer: HudiCommitter) -> Any:
    """Hudi's table services beside the sink (compaction, clustering), when the table has any to run."""
    from sinks.hudi.services import HudiTables, has_services
    from workers.runtime import start_maintainer

    if not config.maintenance.enabled or not has_services(config):
        return None
    return start_maintainer(connector, connector_id, epoch, config, lambda ledger: HudiTables(config, ledger))


__all__ = ["committer", "maintainer", "recovered_commits", "writer"]
