"""The commit history of one connector: the ledger page, its charts, one commit's files."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, QuerySet

from connectors.models import Commit, CommitEnd, CommitPartition

PAGE_SIZE = 25
# Enough points to see a trend; older commits are a page away in the table.
CHART_POINTS = 200


def ledger(connector_name: str) -> QuerySet[Commit]:
    # By name, so the history of a deleted connector stays readable.
    return Commit.objects.filter(connector_name=connector_name).annotate(partitions_count=Count("partitions"))


def history_page(connector_name: str, page_number: str | int | None) -> Page[Commit]:
    paginator = Paginator(ledger(connector_name).order_by("-started_at"), PAGE_SIZE)
    return paginator.get_page(page_number)


def chart_series(connector_name: str) -> dict[str, list[Any]]:
    """Per finished commit, oldest first: when it started, records, duration and lag at commit.

    Lag at commit is ``committed_at - watermark``: how old the newest record
    that every partition had delivered was when it reached the tables. It is
    the end-to-end delay of a sink that commits in intervals.
    """
    commits = list(
        Commit.objects.filter(connector_name=connector_name, committed_at__isnull=False)
        .exclude(ended_by=CommitEnd.SKIPPED)
        .order_by("-started_at")
        .only("commit_id", "started_at", "committed_at", "records", "watermark")[:CHART_POINTS]
    )
    commits.reverse()
    return {
        "labels": [c.started_at.strftime("%m-%d %H:%M:%S") for c in commits],
        "commit_ids": [str(c.commit_id) for c in commits],
        "records": [c.records for c in commits],
        "duration_s": [_seconds(c.started_at, c.committed_at) for c in commits],
        "lag_s": [_seconds(c.watermark, c.committed_at) for c in commits],
    }


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else round((end - start).total_seconds(), 3)


@dataclass(frozen=True)
class PartitionFiles:
    partition: CommitPartition
    files: list[dict[str, Any]]


def files_by_partition(commit: Commit) -> tuple[list[PartitionFiles], list[dict[str, Any]]]:
    """The commit's offset ranges, each with the data files written from it; plus files matching no range."""
    partitions = list(commit.partitions.all())
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = {(p.topic, p.partition): [] for p in partitions}
    unmatched: list[dict[str, Any]] = []
    for data_file in commit.files or []:
        try:
            key = (str(data_file.get("topic")), int(data_file.get("partition")))
        except (TypeError, ValueError):
            key = ("", -1)
        if key in grouped:
            grouped[key].append(data_file)
        else:
            unmatched.append(data_file)
    return [PartitionFiles(p, grouped[(p.topic, p.partition)]) for p in partitions], unmatched
