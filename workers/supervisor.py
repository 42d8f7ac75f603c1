"""The supervisor: compares what should run (Connector rows) with what does
(heartbeats in Postgres) and asks workers to start what is missing.

Celery beat calls ``Supervisor.step`` every few seconds. Each step is cheap:
one Kafka metadata request for all connectors, and a handful of indexed
queries per connector; starting work is a conditional UPDATE plus a Celery
message, so several supervisors may run without starting anything twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient, ClusterMetadata
from django.conf import settings
from django.db.models import Prefetch

from connectors.actions import runtime as runtime_state
from connectors.config import Plugin, SinkConfig, resolve_plugin
from connectors.config.definitions import SourceCluster, resolve
from connectors.config.kafka_clients import admin_client
from connectors.models import Connector, ConnectorTask, DesiredState
from workers.kafka import partitions_in, partitions_where, source_warnings
from workers.sink import self_committing_sink

log = logging.getLogger(__name__)

_ADMINS: dict[tuple[str, tuple[tuple[str, str], ...]], AdminClient] = {}


class Unreachable:
    """Source clusters of their own (a mirror's) that did not answer the supervisor, each asked again only
    after a back-off that doubles up to MAX_S. Asking one costs a step up to 10 s: asked at every step, one
    mirror whose source is out of reach slowed the supervisor for every connector (a new connector's tasks,
    a restart, waited that long each step)."""

    FIRST_S = 10.0
    MAX_S = 60.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._until: dict[str, tuple[float, float]] = {}  # bootstrap -> (asked again after, back-off)

    def waiting(self, bootstrap: str) -> bool:
        return bootstrap in self._until and self.clock() < self._until[bootstrap][0]

    @contextmanager
    def asking(self, bootstrap: str) -> Iterator[None]:
        try:
            yield
        except Exception:
            backoff = min(self._until[bootstrap][1] * 2, self.MAX_S) if bootstrap in self._until else self.FIRST_S
            self._until[bootstrap] = (self.clock() + backoff, backoff)
            raise
        self._until.pop(bootstrap, None)


_UNREACHABLE = Unreachable()


@dataclass
class SupervisorReport:
    connectors: int = 0
    coordinators_started: list[str] = field(default_factory=list)
    tasks_started: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Supervisor:
    def __init__(self, start_coordinator: Callable[[int], None], start_task: Callable[[int, int], None]) -> None:
        self.start_coordinator = start_coordinator
        self.start_task = start_task

    def step(self) -> SupervisorReport:
        started = time.perf_counter()
        report = SupervisorReport()
        connectors = list(
            Connector.objects.filter(
                desired_state__in=[DesiredState.RUNNING, DesiredState.PAUSED], failed_at__isnull=True
            ).prefetch_related(Prefetch("tasks", queryset=ConnectorTask.objects.order_by("task_index")))
        )
        report.connectors = len(connectors)
        for connector in Connector.objects.filter(desired_state=DesiredState.STOPPED):
            runtime_state.stop_tasks(connector)
        if connectors:
            # One metadata request serves every connector on the default cluster; it is made only if one
            # reads from it (a mirror reads its own source cluster).
            # A failure is kept too: each connector then says it, without waiting for the broker again.
            listed: list[ClusterMetadata | Exception] = []

            def metadata() -> ClusterMetadata:
                if not listed:
                    try:
                        listed.append(self._admin().list_topics(timeout=10))
                    except Exception as exc:
                        listed.append(exc)
                if isinstance(listed[0], Exception):
                    raise listed[0]
                return listed[0]

            room = runtime_state.room()
            for connector in connectors:
                self._reconcile(connector, metadata, room, report)
        report.seconds = time.perf_counter() - started
        if report.coordinators_started or report.tasks_started:
            log.info(
                "supervisor: started coordinators %s, tasks %s in %.3f s",
                report.coordinators_started,
                report.tasks_started,
                report.seconds,
            )
        return report

    def _admin(self, bootstrap: str | None = None, client: dict[str, str] | None = None) -> AdminClient:
        """An admin client of the product's cluster, or of a sink's own source cluster (the mirror's).

        Kept for the process's life: a new client per step would pay a
        broker connection every few seconds.
        """
        key = (bootstrap or settings.KAFKA_BOOTSTRAP_SERVERS, tuple(sorted((client or {}).items())))
        if key not in _ADMINS:
            _ADMINS[key] = admin_client(key[0], dict(client or {}))
        return _ADMINS[key]

    def _reconcile(
        self,
        connector: Connector,
        default_metadata: Callable[[], ClusterMetadata],
        room: runtime_state.Room,
        report: SupervisorReport,
    ) -> None:
        try:
            config = SinkConfig.parse(connector.config)
            plugin = resolve_plugin(config.raw["connector.class"])
            assert plugin is not None  # (the config was validated)
            source: SourceCluster | None = resolve(plugin.source)(config) if plugin.source else None
            if source is not None:
                if _UNREACHABLE.waiting(source.bootstrap):
                    return  # (its warning stands: the step goes on to the other connectors without the wait)
                with _UNREACHABLE.asking(source.bootstrap):
                    metadata = self._admin(source.bootstrap, source.client).list_topics(timeout=10)
            elif _has_client_settings(config):
                # Its own credentials may see other topics than ours.
                metadata = admin_client(settings.KAFKA_BOOTSTRAP_SERVERS, config.raw).list_topics(timeout=10)
            else:
                metadata = default_metadata()
            partitions = named = partitions_in(metadata, config.topics, config.topics_regex)
            if source is not None:
                named = [tp for tp in named if source.selects(tp[0])]
                # The sink's own choice among every topic of its cluster (a mirror's takes heartbeats topics
                # too, whatever topics names).
                partitions = partitions_where(metadata, source.selects)
        except Exception as exc:
            log.exception("supervisor: cannot resolve the partitions of %s", connector.name)
            runtime_state.report_source_warnings(connector.pk, [f"cannot list its topics: {exc}"])
            return
        runtime_state.report_source_warnings(
            connector.pk, source_warnings(metadata, config.topics, config.topics_regex, named)
        )
        tasks = runtime_state.assign_tasks(connector, partitions, coordinated=plugin.coordinated)
        if not tasks:
            return  # (deleted meanwhile)
        if not plugin.coordinated and not self._fence(connector, config, plugin):
            return
        coordinator, waiting, held = runtime_state.runners_to_start(connector.pk, tasks, coordinated=plugin.coordinated)
        needed = int(coordinator) + len(waiting)
        if needed > room.free and held == 0:
            # All of it or none: a coordinator without its tasks (or tasks
            # without theirs) would hold slots and commit nothing.
            runtime_state.waiting_for_room(connector.pk, coordinator, waiting, room.no_room_reason(needed))
            return
        if coordinator:
            if room.free <= 0:
                runtime_state.waiting_for_room(connector.pk, True, [], room.no_room_reason(1))
            elif runtime_state.request_coordinator(connector.pk):
                room.take()
                self.start_coordinator(connector.pk)
                report.coordinators_started.append(connector.name)
        for task in waiting:
            if room.free <= 0:
                runtime_state.waiting_for_room(connector.pk, False, [task], room.no_room_reason(1))
                continue
            epoch = runtime_state.request_task(task)
            if epoch is not None:
                room.take()
                self.start_task(task.pk, epoch)
                report.tasks_started.append(f"{connector.name}-{task.task_index}")

    @staticmethod
    def _fence(connector: Connector, config: SinkConfig, plugin: Plugin) -> bool:
        """Fence the producers of tasks that lost partitions (``assign_tasks``); False while that fails:
        no task of the connector may start until it is done."""
        pending = runtime_state.fence_pending(connector.pk)
        if not pending:
            return True
        try:
            self_committing_sink(plugin).fence(connector.name, config, pending)
        except Exception as exc:
            log.exception("supervisor: cannot fence the old tasks %s of %s", pending, connector.name)
            runtime_state.report_source_warnings(
                connector.pk, [f"its tasks wait: the old producers of tasks {pending} cannot be fenced: {exc}"]
            )
            return False
        runtime_state.fenced(connector.pk, pending)
        log.info("supervisor: fenced the old producers of %s tasks %s", connector.name, pending)
        return True


def _has_client_settings(config: SinkConfig) -> bool:
    return any(k.startswith(("security.", "sasl.", "ssl.")) for k in config.raw)
