"""Maintenance runs in the ledger: started, finished, and interrupted by a coordinator's end.

The coordinator's maintenance thread (workers.maintenance) writes them; the
UI, the API and /metrics read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from connectors.config.secrets import storable
from connectors.models import Commit, CommitState, Connector, MaintenanceOutcome, MaintenanceRun

FIGURES = (
    "rewritten_files",
    "rewritten_bytes",
    "added_files",
    "added_bytes",
    "replace_snapshot_id",
    "rewritten_manifests",
    "added_manifests",
    "expired_snapshots",
    "expired_files",
    "orphan_files",
    "removed_bytes",
)


def start_maintenance(connector_id: int, epoch: int, table: str) -> int:
    """A RUNNING run of ``table`` by the coordinator of ``epoch``; its id."""
    connector = Connector.objects.get(pk=connector_id)
    run = MaintenanceRun.objects.create(
        connector=connector,
        connector_name=connector.name,
        table_name=table,
        epoch=epoch,
        started_at=timezone.now(),
    )
    return run.pk


def record_maintenance(run_id: int, **figures: Any) -> None:
    """What a run has done so far (each step records its figures as it ends: a kill loses none)."""
    unknown = set(figures) - set(FIGURES)
    if unknown:
        raise ValueError(f"unknown maintenance figures: {sorted(unknown)}")
    MaintenanceRun.objects.filter(pk=run_id).update(**figures)


def finish_maintenance(run_id: int, outcome: MaintenanceOutcome, error: str = "") -> None:
    MaintenanceRun.objects.filter(pk=run_id, outcome=MaintenanceOutcome.RUNNING).update(
        outcome=outcome, ended_at=timezone.now(), error=storable(error)
    )


def interrupt_maintenance(connector_id: int, epoch: int) -> int:
    """Runs still RUNNING under an epoch before ``epoch``: their coordinator is gone. How many there were."""
    with transaction.atomic():
        return MaintenanceRun.objects.filter(
            connector_id=connector_id, outcome=MaintenanceOutcome.RUNNING, epoch__lt=epoch
        ).update(
            outcome=MaintenanceOutcome.INTERRUPTED,
            ended_at=timezone.now(),
            error="the coordinator running it stopped before it ended",
        )


def last_maintenance(connector_id: int) -> datetime | None:
    """When the connector's latest run ended (or started, if it never did)."""
    run = MaintenanceRun.objects.filter(connector_id=connector_id).order_by("-started_at").first()
    if run is None:
        return None
    return run.ended_at or run.started_at


def prepared_files(tables: Iterable[str]) -> set[str]:
    """Files of commits that are prepared but not yet in their tables (any connector's): never orphans."""
    wanted = set(tables)
    paths: set[str] = set()
    for files in Commit.objects.filter(state=CommitState.PREPARED).values_list("files", flat=True):
        paths.update(f["path"] for f in files or [] if f.get("table") in wanted)
    return paths
