"""The Hudi sink's table services, as its connector's ``Maintainer`` runs them (workers.maintenance): every
``sinkadmin.maintenance.interval-ms``, clusterings left unfinished are settled, small file groups are
clustered (sinks/hudi/clustering.py) and old file slices cleaned (sinks/hudi/cleaning.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sinks.hudi.cleaning import HudiCleaner
from sinks.hudi.clustering import HudiClusterer, settle
from sinks.hudi.table import HudiTable

if TYPE_CHECKING:
    from connectors.config import SinkConfig
    from sinks.hudi.settings import HudiSettings
    from workers.maintenance import BetweenCommits, MaintenanceLedger


class HudiTables:
    """The Hudi sink's table as its connector's ``Maintainer`` maintains it: clustering, then cleaning."""

    def __init__(self, config: SinkConfig, ledger: MaintenanceLedger) -> None:
        self.config = config
        self.settings: HudiSettings = config.settings
        self.ledger = ledger

    @property
    def name(self) -> str:
        return f"{self.settings.database}.{self.settings.table_name}"

    def _table(self) -> HudiTable:
        fs, base = self.settings.filesystem()
        return HudiTable(fs, base, self.settings.spec())

    def existing(self) -> list[str]:
        return [self.name] if self._table().stored_properties() is not None else []

    def maintain(self, table: str, run_id: int, turns: BetweenCommits) -> None:
        from workers.maintenance import MaintenanceFailed, Stopped
        from workers.spark_writer import UnitRunner

        failures = []
        hudi = self._table()
        # Whatever the settings: a clustering left requested would hold back cleaning and keep its
        # file groups from the sink's inserts for good.
        turns.run(lambda: settle(hudi, requested=True))
        if self.settings.clustering.enabled and not self.settings.upsert:
            try:
                clustered = HudiClusterer(
                    hudi, self.settings.clustering, turns, UnitRunner(self.config), self.ledger.current
                ).run()
                if clustered is not None:
                    self.ledger.record(
                        run_id,
                        rewritten_files=clustered.replaced_files,
                        rewritten_bytes=clustered.replaced_bytes,
                        added_files=clustered.added_files,
                        added_bytes=clustered.added_bytes,
                        replace_snapshot_id=int(clustered.instant),
                    )
            except Stopped:
                raise
            except Exception as exc:
                # (Cleaning still runs: a Spark outage must not let old slices pile up.)
                failures.append(f"clustering: {type(exc).__name__}: {exc}")
        if self.settings.cleaner.automatic:
            cleaner = HudiCleaner(hudi, self.settings.cleaner, turns)
            outcomes = cleaner.run()
            self.ledger.record(
                run_id,
                expired_files=sum(o.deleted for o in outcomes),
                removed_bytes=sum(o.removed_bytes for o in outcomes),
            )
            for instant, why in cleaner.unreadable.items():
                failures.append(
                    f"cleaning: the clean {instant} left in flight has no readable plan ({why}); this run cleaned "
                    f"without it (remove {instant}.clean.requested and .clean.inflight from .hoodie to end this)"
                )
            failed = sum(o.failed for o in outcomes)
            if failed:
                # (Recorded in the clean's failedDeleteFiles; still old slices, so the next run plans them again.)
                failures.append(f"cleaning: could not delete {failed} files; the next run tries them again")
        if failures:
            raise MaintenanceFailed("; ".join(failures))
