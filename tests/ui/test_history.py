"""Commit history: the ledger's figures per commit, pagination, charts' data and one commit's files."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from connectors import actions
from connectors.models import Connector
from connectors.ui.history import PAGE_SIZE, chart_series
from tests.ui.conftest import LedgerFor

pytestmark = pytest.mark.django_db


def commit_row(html: str, commit_id: object) -> list[str]:
    match = re.search(rf'<tr data-commit="{commit_id}">(.*?)</tr>', html, re.S)
    assert match, f"no row for {commit_id}"
    return [re.sub(r"<[^>]+>", " ", c).split() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", match.group(1), re.S)]  # type: ignore[misc]


def test_each_commit_row_shows_the_ledger_figures(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector, {("orders", 0): 0, ("orders", 1): 0})
    watermark = timezone.now() - timedelta(minutes=1)
    full = commit({("orders", 0): 1200, ("orders", 1): 34}, watermark=watermark, snapshot=4242)
    partial = commit({("orders", 0): 5}, complete=False, snapshot=4343)
    early = commit({("orders", 0): 300}, ended_by="max-records")

    html = alice.get(reverse("commit-history", args=["orders-sink"])).content.decode()
    row = commit_row(html, full.commit_id)
    assert row[0] == [str(full.commit_id)[:8]]
    assert row[1] == ["COMMITTED"]
    assert row[4] == ["1,234"]  # records
    assert row[5] == ["0"]  # dead-lettered
    assert row[6] == ["120.5", "KB"]  # 123,400 bytes
    assert row[7] == ["2"]  # files
    assert row[8] == ["2"]  # partitions
    assert row[9] == ["db.orders:", "4242"]
    assert row[10] == watermark.strftime("%Y-%m-%d %H:%M:%S").split()
    assert row[11] == ["full"]
    assert full.duration_seconds is not None
    assert row[3] == [f"{full.duration_seconds:.1f}", "s"]
    assert commit_row(html, partial.commit_id)[11] == ["partial"]
    # A commit that ended before its interval says so, and why.
    assert commit_row(html, early.commit_id)[3][-1] == "early"
    assert 'title="Ended before its interval: max-records staged"' in html
    detail = alice.get(reverse("commit-detail", args=["orders-sink", early.commit_id])).content.decode()
    assert re.search(r"<dt>Ended by</dt><dd>max-records staged</dd>", detail)


def test_history_is_paginated_newest_first(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector)
    base = timezone.now() - timedelta(hours=1)
    commits = [commit({("orders", 0): i + 1}, started_at=base + timedelta(minutes=i)) for i in range(PAGE_SIZE + 3)]

    first = alice.get(reverse("commit-history", args=["orders-sink"])).content.decode()
    ids = re.findall(r'<tr data-commit="([^"]+)">', first)
    assert len(ids) == PAGE_SIZE
    assert ids[0] == str(commits[-1].commit_id)
    assert "Page 1 of 2" in first
    second = alice.get(reverse("commit-history", args=["orders-sink"]), {"page": 2}).content.decode()
    assert re.findall(r'<tr data-commit="([^"]+)">', second) == [str(c.commit_id) for c in reversed(commits[:3])]


def test_chart_series_follow_the_ledger(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector)
    now = timezone.now()
    first = commit({("orders", 0): 10}, watermark=now - timedelta(seconds=30), started_at=now - timedelta(seconds=4))
    second = commit({("orders", 0): 20}, started_at=now - timedelta(seconds=1))
    series = chart_series("orders-sink")
    assert series["records"] == [10, 20]
    assert series["commit_ids"] == [str(first.commit_id), str(second.commit_id)]
    assert series["duration_s"][0] == pytest.approx(first.duration_seconds, abs=0.001)
    assert series["lag_s"][0] == pytest.approx((first.committed_at - first.watermark).total_seconds(), abs=0.001)  # type: ignore[operator]
    assert series["lag_s"][1] is None
    # The page embeds exactly these series for the charts.
    html = alice.get(reverse("commit-history", args=["orders-sink"])).content.decode()
    embedded = re.search(r'<script id="chart-data" type="application/json">(.*?)</script>', html, re.S)
    assert embedded and json.loads(embedded.group(1))["records"] == [10, 20]
    assert "vendor/chart.umd.min.js" in html


def test_a_prepared_commit_is_listed_but_not_charted(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    pending = commit_ledger(connector)({("orders", 0): 10}, finish=False)
    html = alice.get(reverse("commit-history", args=["orders-sink"])).content.decode()
    assert commit_row(html, pending.commit_id)[1] == ["PREPARED"]
    assert chart_series("orders-sink")["records"] == []


def test_commit_detail_lists_files_under_their_offset_ranges(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector, {("orders", 0): 500, ("orders", 1): 0})
    entry = commit({("orders", 0): 100, ("orders", 1): 3}, snapshot=987654321)
    html = alice.get(reverse("commit-detail", args=["orders-sink", entry.commit_id])).content.decode()
    rows = re.findall(r"<tr>\s*<th scope=\"row\" class=\"mono small\">(.*?)</th>(.*?)</tr>", html, re.S)
    assert [r[0] for r in rows] == ["orders/0", "orders/1"]
    figures = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[0][1], re.S)]
    assert figures[:3] == ["500", "600", "100"]
    assert f"orders+0+500+600-{entry.commit_id}.parquet" in rows[0][1]
    assert f"orders+1+0+3-{entry.commit_id}.parquet" in rows[1][1]
    assert "987654321" in html
    assert reverse("admin:connectors_commit_change", args=[entry.pk]) in html


def test_the_history_of_a_deleted_connector_stays_readable(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    entry = commit_ledger(connector)({("orders", 0): 10})
    actions.delete_connector("orders-sink")
    html = alice.get(reverse("commit-history", args=["orders-sink"])).content.decode()
    assert "orders-sink (deleted)" in html
    assert str(entry.commit_id) in html
    assert alice.get(reverse("commit-history", args=["never-existed"])).status_code == 404
