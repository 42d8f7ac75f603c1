"""The Hudi sink's table services, as its connector's ``Maintainer`` runs them (workers.maintenance): every
``sinkadmin.maintenance.interval-ms``, between two commits, Hudi's own Spark procedures compact a
merge-on-read table's log files (``run_compaction``, unless ``hoodie.compact.inline`` compacts in the
writer) and cluster small files (``run_clustering``, with ``hoodie.clustering.async.enabled``). They take
the table's lock as commits do (``sinks.hudi.commit.table_lock``), so the table keeps one writer at a time,
and run with the writer's optimistic concurrency (``concurrency_options``): none rolls back a write that a
killed coordinator left running in the Spark server. Cleaning and archival run in Hudi's writer after each
commit.

A coordinator killed while Hudi compacts leaves the compaction running in the Spark server, its
``.compaction.inflight`` on the timeline. Under optimistic concurrency Hudi beats a heartbeat for an
executing compaction, and a later run that finds it inflight executes it (rolling back what it wrote
first) only once that heartbeat has expired: while it lives, Hudi refuses ("due to heartbeat by
concurrent writer/job") and the run says so (``EXECUTED_ELSEWHERE``); the next run takes the compaction up
if it was abandoned (its Spark server restarted), or finds it complete."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from sinks.hudi import timeline
from sinks.hudi.commit import table_lock
from sinks.hudi.plugin import HUDI_WRITE_CONFIG_FAMILIES

if TYPE_CHECKING:
    from connectors.config import SinkConfig
    from sinks.hudi.settings import HudiSettings
    from workers.maintenance import BetweenCommits, MaintenanceLedger


# Hudi's refusal to execute a table service whose instant another job executes (its heartbeat is live).
EXECUTED_ELSEWHERE = "due to heartbeat by concurrent writer/job"


def compacts_inline(config: SinkConfig) -> bool:
    """Whether Hudi's writer compacts within its commits (then the maintenance does not)."""
    from sinks.hudi.settings import writer_options

    options = writer_options(config.settings, config.raw)
    return options.get("hoodie.datasource.compaction.async.enable", "true").strip().lower() != "true"


def has_services(config: SinkConfig) -> bool:
    """Whether the maintenance has anything to run for this connector's table."""
    settings: HudiSettings = config.settings
    return (settings.merge_on_read and not compacts_inline(config)) or settings.clustering


class HudiTables:
    """The Hudi sink's table as its connector's ``Maintainer`` maintains it: compaction, then clustering."""

    def __init__(self, config: SinkConfig, ledger: MaintenanceLedger) -> None:
        self.config = config
        self.settings: HudiSettings = config.settings
        self.ledger = ledger

    @property
    def name(self) -> str:
        return f"{self.settings.database}.{self.settings.table_name}"

    def existing(self) -> list[str]:
        return [self.name] if timeline.exists(self.settings.base) else []

    def maintain(self, table: str, run_id: int, turns: BetweenCommits) -> None:
        from workers.maintenance import MaintenanceFailed, Stopped

        # Each service: its procedure, and the column of its result rows that counts the file groups it
        # rewrote (one row per compaction or clustering it ran: its instant, that count, its state).
        services = []
        if self.settings.merge_on_read and not compacts_inline(self.config):
            services.append(("compaction", "run_compaction", "operation_size"))
        if self.settings.clustering:
            services.append(("clustering", "run_clustering", "input_group_size"))
        failures = []
        for service, procedure, rewritten in services:
            operation = "scheduleAndExecute"
            if service == "compaction" and timeline.pending_compactions(self.settings.base):
                # Plans already made are executed first, and no new one is made meanwhile: Hudi would plan
                # the file groups outside them every run while another run still executes them.
                operation = "execute"
            try:
                rows = turns.run(functools.partial(run_procedure, self.config, procedure, f"op => '{operation}'"))
            except Stopped:
                raise
            except Exception as exc:
                failures.append(f"{service}: {failure_text(exc)}")
                continue
            done = [r for r in rows if r.get("state") == "COMPLETED"]
            if done:
                self.ledger.record(
                    run_id,
                    rewritten_files=sum(int(r.get(rewritten) or 0) for r in done),
                    replace_snapshot_id=int(done[-1]["timestamp"]),
                )
        if failures:
            raise MaintenanceFailed("; ".join(failures))


def run_procedure(config: SinkConfig, procedure: str, arguments: str) -> list[dict[str, Any]]:
    """Run Hudi's Spark procedure on the connector's table under its lock, with its Hudi write configs."""
    from workers.locks import advisory_lock
    from workers.spark_writer import SparkJobs

    settings: HudiSettings = config.settings
    options = ",".join(f"{k}={v}" for k, v in sorted(procedure_options(config.raw).items()))
    statement = f"CALL {procedure}(path => {_literal(settings.base_path)}, {arguments}, options => {_literal(options)})"
    with advisory_lock(table_lock(settings)):
        rows = SparkJobs().run_on_session(lambda spark: spark.sql(statement).collect())
    return [row.asDict() for row in rows]


def failure_text(exc: Exception) -> str:
    """What a table service's failure says in its maintenance run."""
    text = str(exc)
    if EXECUTED_ELSEWHERE in text:
        found = re.search(r"Cannot execute instant (\S+)", text)
        instant = found.group(1) if found else "its instant"
        return (
            f"{instant} is still executed by an earlier run, in the Spark server (Hudi's heartbeat for it is live; "
            "its coordinator stopped or died while it ran): left to it, not rolled back; the next run finds it "
            "complete, or takes it up once abandoned"
        )
    return f"{type(exc).__name__}: {text}"


def procedure_options(raw: dict[str, str]) -> dict[str, str]:
    """The connector's Hudi write configs as a procedure's ``options`` take them (``k=v,k=v``): the table's
    own settings (keys, key generator, type) come from its hoodie.properties. A value with a comma cannot
    be said there, and an empty one is Hudi's default anyway: both are left to the table's defaults. The
    concurrency settings are the writer's (``concurrency_options``): a table service must not roll back a
    write still running in the Spark server."""
    from sinks.hudi.settings import concurrency_options

    written = {k: v for k, v in raw.items() if k.startswith(HUDI_WRITE_CONFIG_FAMILIES) and v.strip() and "," not in v}
    return {**written, **concurrency_options(raw)}


def _literal(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
