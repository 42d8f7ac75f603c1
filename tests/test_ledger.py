"""The ledger's compare-and-set against real PostgreSQL: fencing (I3) and contiguity (I1)."""

import uuid

import pytest
from django.utils import timezone

from connectors import actions
from connectors.actions.ledger import PartitionRange, seed_offsets
from connectors.models import Commit, CommitEnd, CommitState, PartitionOffset
from tests.integration.helpers import create_topic

pytestmark = pytest.mark.django_db

CONFIG = {"connector.class": "iceberg", "topics": "orders", "iceberg.tables": "db.orders"}


def _prepare(connector_id: int, epoch: int, start: int, end: int, partition: int = 0, skipped: int = 0) -> Commit:
    return actions.prepare_commit(
        connector_id,
        epoch=epoch,
        commit_id=uuid.uuid4(),
        started_at=timezone.now(),
        ranges=[PartitionRange("orders", partition, start, end, records=end - start - skipped, skipped=skipped)],
        files=[
            {"table": "db.orders", "path": f"/w/orders+{partition}+{start}+{end}", "records": end - start, "bytes": 10}
        ],
        watermark=None,
        complete=True,
    )


def test_a_commit_advances_the_partition_offset_readers_are_told_once_it_is_committed() -> None:
    connector = actions.create_connector("c1", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 0})
    commit = _prepare(connector.pk, epoch, 0, 10)
    assert commit.state == CommitState.PREPARED
    # Prepared: the next commit continues from its end, but no reader can see its records yet (I10).
    assert actions.next_offsets(connector.pk) == {("orders", 0): 10}
    assert actions.committed_offsets(connector.pk) == {("orders", 0): 0}
    assert actions.mark_committed(commit.commit_id, {"db.orders": 42})
    commit.refresh_from_db()
    assert commit.state == CommitState.COMMITTED and commit.snapshot_ids == {"db.orders": 42}
    assert actions.committed_offsets(connector.pk) == {("orders", 0): 10}
    assert not actions.mark_committed(commit.commit_id, {})


def test_records_read_and_written_nowhere_are_counted_as_skipped() -> None:
    # Tombstones, and records the transforms dropped: inside the commit's range, in no file.
    connector = actions.create_connector("c-skips", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 0})
    commit = _prepare(connector.pk, epoch, 0, 10, skipped=3)
    assert (commit.records, commit.skipped, commit.ended_by) == (7, 3, CommitEnd.INTERVAL)
    assert [(p.records, p.skipped) for p in commit.partitions.all()] == [(7, 3)]


def test_a_zombie_coordinator_cannot_prepare() -> None:
    connector = actions.create_connector("c2", CONFIG)
    old_epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, old_epoch, {("orders", 0): 0})
    actions.take_coordinator_lease(connector.pk, "w2")
    with pytest.raises(actions.StaleEpoch):
        _prepare(connector.pk, old_epoch, 0, 10)
    assert actions.committed_offsets(connector.pk) == {("orders", 0): 0}
    assert not Commit.objects.exists()


def test_a_range_that_does_not_continue_the_ledger_is_refused() -> None:
    connector = actions.create_connector("c3", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 0})
    actions.mark_committed(_prepare(connector.pk, epoch, 0, 10).commit_id, {})
    with pytest.raises(actions.LedgerConflict, match="starts at 5, the ledger is at 10"):
        _prepare(connector.pk, epoch, 5, 20)
    with pytest.raises(actions.LedgerConflict):
        _prepare(connector.pk, epoch, 0, 10)
    _prepare(connector.pk, epoch, 10, 20)


def test_an_unseeded_partition_is_refused() -> None:
    connector = actions.create_connector("c4", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    with pytest.raises(actions.LedgerConflict, match="the ledger is at None"):
        _prepare(connector.pk, epoch, 0, 10, partition=3)


def test_only_one_commit_may_be_prepared_at_a_time() -> None:
    connector = actions.create_connector("c5", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 0, ("orders", 1): 0})
    _prepare(connector.pk, epoch, 0, 10)
    with pytest.raises(actions.LedgerConflict, match="must be finished first"):
        _prepare(connector.pk, epoch, 0, 5, partition=1)


def test_seeding_never_moves_a_known_offset() -> None:
    connector = actions.create_connector("c6", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 7})
    assert seed_offsets(connector.pk, epoch, {("orders", 0): 0, ("orders", 1): 3}) == {
        ("orders", 0): 7,
        ("orders", 1): 3,
    }


def test_stopping_fences_the_running_coordinator() -> None:
    connector = actions.create_connector("c7", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 0})
    actions.stop_connector("c7")
    with pytest.raises(actions.StaleEpoch):
        _prepare(connector.pk, epoch, 0, 10)


def test_offsets_can_only_be_altered_when_stopped(kafka_bootstrap: str) -> None:
    # (Offsets are refused for partitions the cluster does not have: this one has it.)
    create_topic(kafka_bootstrap, "ledger-offsets", 1)
    actions.create_connector("c8", {**CONFIG, "topics": "ledger-offsets"})
    with pytest.raises(actions.NotStopped):
        actions.alter_offsets("c8", [("ledger-offsets", 0, 5)])
    actions.stop_connector("c8")
    connector = actions.alter_offsets("c8", [("ledger-offsets", 0, 5)])
    assert PartitionOffset.objects.get(connector=connector).next_offset == 5
    actions.alter_offsets("c8", [("ledger-offsets", 0, None)])
    assert not PartitionOffset.objects.filter(connector=connector).exists()


def test_deleting_a_connector_keeps_its_ledger_unless_asked() -> None:
    connector = actions.create_connector("c9", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 0})
    commit = _prepare(connector.pk, epoch, 0, 10)
    actions.delete_connector("c9")
    commit.refresh_from_db()
    assert commit.connector_id is None and commit.connector_name == "c9"


def test_a_connector_created_again_under_a_deleted_ones_name_resumes_where_it_stopped() -> None:
    """As Kafka Connect's sink resumes from the consumer group a deleted connector left: no record read twice."""
    connector = actions.create_connector("c-again", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 0, ("orders", 1): 100})
    assert actions.mark_committed(_prepare(connector.pk, epoch, 0, 10).commit_id, {})
    assert actions.mark_committed(_prepare(connector.pk, epoch, 100, 120, partition=1).commit_id, {})
    # A commit given up moves nothing; one prepared when the connector was deleted is rolled forward (I4).
    actions.abort_commit(
        connector.pk,
        epoch=epoch,
        commit_id=uuid.uuid4(),
        started_at=timezone.now(),
        ranges=[PartitionRange("orders", 0, 10, 30, records=20)],
        error="a write failed",
    )
    prepared = _prepare(connector.pk, epoch, 10, 25)
    actions.delete_connector("c-again")

    again = actions.create_connector("c-again", CONFIG)
    assert actions.next_offsets(again.pk) == {("orders", 0): 25, ("orders", 1): 120}
    assert actions.committed_offsets(again.pk) == {("orders", 0): 10, ("orders", 1): 120}
    pending = actions.pending_commit(again.pk)
    assert pending is not None and pending.commit_id == prepared.commit_id
    assert Commit.objects.filter(connector_name="c-again", connector__isnull=True).count() == 0
    # Its coordinator applies the prepared commit, then goes on from its end.
    epoch = actions.take_coordinator_lease(again.pk, "w2")
    assert actions.mark_committed(prepared.commit_id, {})
    assert actions.committed_offsets(again.pk)[("orders", 0)] == 25
    assert _prepare(again.pk, epoch, 25, 40).state == CommitState.PREPARED

    # Deleted with its ledger, a name starts over.
    actions.delete_connector("c-again", delete_ledger=True)
    assert actions.next_offsets(actions.create_connector("c-again", CONFIG).pk) == {}


def test_create_rejects_invalid_config_and_duplicates() -> None:
    with pytest.raises(actions.InvalidConfig) as excinfo:
        actions.create_connector("bad", {"connector.class": "iceberg"})
    assert "topics" in excinfo.value.validation.errors
    actions.create_connector("dup", CONFIG)
    with pytest.raises(actions.ConnectorExists):
        actions.create_connector("dup", CONFIG)
    with pytest.raises(actions.InvalidName):
        actions.create_connector("a/b", CONFIG)


def test_config_update_keeps_hidden_secrets_and_bumps_generation() -> None:
    connector = actions.create_connector("c10", {**CONFIG, "sasl.password": "s3cret"})
    updated, created = actions.update_config("c10", {**CONFIG, "sasl.password": "[hidden]", "tasks.max": "2"})
    assert not created
    assert updated.config["sasl.password"] == "s3cret"
    assert updated.generation == connector.generation + 1


def test_skipping_offsets_is_one_ledger_entry_that_keeps_the_ranges_contiguous() -> None:
    connector = actions.create_connector("skips", CONFIG)
    epoch = actions.take_coordinator_lease(connector.pk, "w1")
    seed_offsets(connector.pk, epoch, {("orders", 0): 0, ("orders", 1): 0})
    actions.mark_committed(_prepare(connector.pk, epoch, 0, 10).commit_id, {})

    # From anywhere but the ledger's offset, or backwards, or with a stale epoch: refused.
    for skips in ({("orders", 0): (5, 30)}, {("orders", 0): (10, 10)}, {("orders", 2): (0, 3)}):
        with pytest.raises(actions.LedgerConflict):
            actions.skip_offsets(connector.pk, epoch, skips)
    with pytest.raises(actions.StaleEpoch):
        actions.skip_offsets(connector.pk, epoch - 1, {("orders", 0): (10, 30)})

    skip = actions.skip_offsets(connector.pk, epoch, {("orders", 0): (10, 30), ("orders", 1): (0, 4)})
    assert (skip.state, skip.ended_by, skip.skipped, skip.records) == (CommitState.COMMITTED, CommitEnd.SKIPPED, 24, 0)
    assert skip.offsets() == {"orders/0": [10, 30], "orders/1": [0, 4]}
    assert [p.skipped for p in skip.partitions.all()] == [20, 4]
    assert actions.committed_offsets(connector.pk) == {("orders", 0): 30, ("orders", 1): 4}
    assert _prepare(connector.pk, epoch, 30, 35).state == CommitState.PREPARED  # the next commit continues
