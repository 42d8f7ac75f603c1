"""The contract between the runtime and a sink: what a sink plugin's runtime module provides.

A sink is a package under ``sinks/`` whose ``plugin`` module defines a
``connectors.config.Plugin`` (its config keys, its checks, its capabilities)
and names its runtime module by import path (``Plugin.runtime``); the
runtime loads that module here, and never imports ``sinks`` itself. The
capabilities a plugin declares say which of the protocols below its runtime
module follows, as Kafka Connect's ``SinkConnector``/``SinkTask`` say what a
connector provides:

- every coordinated sink (``Plugin.coordinated``): ``CoordinatedSink``:
  a participants' writer (``workers.participant.WritePort``) and a
  coordinator's committer (``workers.coordinator.CommitterPort``);
- ``Plugin.maintained``: ``MaintainedSink``, maintenance beside the coordinator;
- ``Plugin.recoverable``: ``RecoverableSink``, the commits its store records,
  to rebuild a lost ledger (``manage.py rebuild_ledger``);
- ``Plugin.versioned_tables``: its committer is a ``VersionedCommitter`` and
  its writer a ``VersionedWriter``: what each commit left the tables at goes
  to the tasks with every START;
- a sink that commits on its own (not ``coordinated``, the Kafka mirror's
  transactions): ``SelfCommittingSink``, its own task loop and the fencing of
  a task's predecessors.

docs/writing-a-sink.md walks through adding one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from connectors.config import Plugin, SinkConfig, resolve_plugin

if TYPE_CHECKING:
    from workers.coordinator import CommitterPort
    from workers.events import TableVersion
    from workers.maintenance import Maintainer
    from workers.participant import WritePort

StopFlag = Callable[[], bool]


class TaskHeartbeat(Protocol):
    """A running task's heartbeat: its live figures per partition, and what fails in it without failing it
    ("" when nothing does). Returns the connector's desired state, or None when the task must stop."""

    def __call__(self, partitions: dict[str, Any], warning: str = "") -> str | None: ...


class CoordinatedSink(Protocol):
    def writer(self, config: SinkConfig) -> WritePort:
        """A task's writer."""
        ...

    def committer(self, connector: str, config: SinkConfig) -> CommitterPort:
        """The coordinator's committer."""
        ...


class MaintainedSink(Protocol):
    def maintainer(
        self, connector: str, connector_id: int, epoch: int, config: SinkConfig, committer: Any
    ) -> Maintainer | None:
        """The connector's maintenance thread (``workers.runtime.start_maintainer``), started, or None when
        the config asks for none. ``committer``: the coordinator's, whose store connection it may share."""
        ...


class RecoverableSink(Protocol):
    def recovered_commits(self, connector: str, config: SinkConfig) -> list[Any]:
        """Every commit of ``connector`` the sink's store records (``connectors.actions.ledger.RecoveredCommit``)."""
        ...


class VersionedCommitter(Protocol):
    @property
    def table_versions(self) -> dict[str, TableVersion]:
        """Each table the last commit added to, as it left it."""
        ...


class VersionedWriter(Protocol):
    def tables_committed(self, versions: Mapping[str, TableVersion]) -> None:
        """Each table as the coordinator's commits left it, as a START says: a writer that keeps copies
        of its tables need not look them up again."""
        ...


class SelfCommittingSink(Protocol):
    def run_task(
        self,
        name: str,
        task_index: int,
        partitions: Sequence[tuple[str, int]],
        stop: StopFlag,
        *,
        task_epoch: int = 0,
        heartbeat: TaskHeartbeat | None = None,
    ) -> None:
        """Run one task of the connector until ``stop()`` or ``heartbeat`` says to stop (None)."""
        ...

    def fence(self, connector: str, config: SinkConfig, task_indexes: Sequence[int]) -> None:
        """Fence the producers of tasks that lost partitions, before any task of the connector starts."""
        ...


def plugin_of(config: SinkConfig) -> Plugin:
    plugin = resolve_plugin(config.raw.get("connector.class", ""))
    assert plugin is not None  # (the config was validated)
    return plugin


def _runtime(plugin: Plugin) -> Any:
    return importlib.import_module(plugin.runtime)


def coordinated_sink(plugin: Plugin) -> CoordinatedSink:
    assert plugin.coordinated, f"the {plugin.short_name} sink commits on its own"
    return cast(CoordinatedSink, _runtime(plugin))


def maintained_sink(plugin: Plugin) -> MaintainedSink | None:
    return cast(MaintainedSink, _runtime(plugin)) if plugin.maintained else None


def recoverable_sink(plugin: Plugin) -> RecoverableSink | None:
    return cast(RecoverableSink, _runtime(plugin)) if plugin.recoverable else None


def self_committing_sink(plugin: Plugin) -> SelfCommittingSink:
    assert not plugin.coordinated, f"the {plugin.short_name} sink is coordinated"
    return cast(SelfCommittingSink, _runtime(plugin))
