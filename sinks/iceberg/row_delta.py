"""An upsert commit's snapshot: data files added and replaced, and position delete files added, at once.

pyiceberg 0.12 commits data files only (its delete-file writes are apache/iceberg-python #1078). What
Java's ``RowDelta`` does is done here with pyiceberg's own snapshot producer, manifest writer and
summaries: the delete files go in a delete manifest (content ``deletes``) of the snapshot that adds the
commit's data files, so readers see the commit's updates and deletes at once or not at all
(docs/decisions/013-merge-on-read-upserts.md). Each delete file deletes rows of one data file, and says so
by its ``file_path`` bounds (lower = upper), as Iceberg's writers do for file-scoped deletes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table import TableProperties
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update.snapshot import _FastAppendFiles, _OverwriteFiles, _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT
from pyiceberg.types import LongType, StringType

if TYPE_CHECKING:
    from pyiceberg.table import Table

# The ids Iceberg's table spec reserves for a position delete file's columns.
FILE_PATH_ID, POS_ID = 2147483546, 2147483545


def position_delete_file(outcome: Mapping[str, Any], data_file: DataFile, spec_id: int) -> DataFile:
    """Iceberg's description of the position delete file a ``PositionDeletes`` unit wrote for ``data_file``
    (of partition spec ``spec_id``): in its partition, bounded to its path."""
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=outcome["path"],
        file_format=FileFormat.PARQUET,
        partition=data_file.partition,
        record_count=outcome["records"],
        file_size_in_bytes=outcome["size"],
        lower_bounds={
            FILE_PATH_ID: to_bytes(StringType(), data_file.file_path),
            POS_ID: to_bytes(LongType(), outcome["first"]),
        },
        upper_bounds={
            FILE_PATH_ID: to_bytes(StringType(), data_file.file_path),
            POS_ID: to_bytes(LongType(), outcome["last"]),
        },
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        value_counts={FILE_PATH_ID: outcome["records"], POS_ID: outcome["records"]},
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
    )
    delete_file.spec_id = spec_id  # (not a field of the manifest entry: set beside it, as pyiceberg's reader does)
    return delete_file


class _DeleteManifestWriter(ManifestWriterV2):
    """A format v2 manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _AddsDeleteFiles(_SnapshotProducer[Any]):
    """A pyiceberg snapshot producer that adds position delete files too, in delete manifests of the same
    snapshot."""

    def __init__(self, *args: Any, delete_files: Sequence[DataFile], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._added_delete_files = list(delete_files)

    def _manifests(self) -> list[ManifestFile]:
        manifests = super()._manifests()
        by_spec: dict[int, list[DataFile]] = defaultdict(list)
        for delete_file in self._added_delete_files:
            by_spec[delete_file.spec_id].append(delete_file)
        for spec_id, files in sorted(by_spec.items()):
            with _DeleteManifestWriter(
                self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
            ) as writer:
                for delete_file in files:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=delete_file,
                        )
                    )
            manifests.append(writer.to_manifest_file())
        return manifests

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        # pyiceberg's, with the delete files counted too (added-delete-files, added-position-deletes...),
        # each file under its own partition spec (a delete file has its data file's, which may be older).
        metadata = self._transaction.table_metadata
        schema, specs = metadata.schema(), metadata.specs()
        limit = int(
            metadata.properties.get(
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT
            )
        )
        collector = SnapshotSummaryCollector(partition_summary_limit=limit)
        # (The data files of the snapshot: pyiceberg writes the added ones in its manifest, under the current
        # spec; a removed one keeps its own.)
        for added in self._added_data_files:
            collector.add_file(added, schema=schema, partition_spec=metadata.spec())
        for delete_file in self._added_delete_files:
            collector.add_file(delete_file, schema=schema, partition_spec=specs[delete_file.spec_id])
        for removed in self._deleted_data_files:
            collector.remove_file(removed, schema=schema, partition_spec=specs[removed.spec_id])
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        return update_snapshot_summaries(
            summary=Summary(operation=self._operation, **collector.build(), **snapshot_properties),
            previous_summary=parent.summary if parent is not None else None,
        )


class _RowDelta(_AddsDeleteFiles, _OverwriteFiles):
    """Data files removed (copy-on-write): pyiceberg's overwrite, which rewrites the manifests that list them."""


class _RowDeltaAppend(_AddsDeleteFiles, _FastAppendFiles):
    """No data file removed (merge-on-read): the parent's manifests are kept as they are, unread, as Iceberg's
    own RowDelta keeps them. pyiceberg's overwrite reads every manifest of the table to find the files it
    removes, even when there are none: at a commit a second, that grew with the table's history."""


def commit_row_delta(
    table: Table,
    properties: dict[str, str],
    replaced: Sequence[DataFile],
    added: Sequence[DataFile],
    deletes: Sequence[DataFile],
) -> None:
    """One snapshot of ``table`` that removes ``replaced``, adds ``added`` and the position delete files
    ``deletes``, with ``properties`` in its summary. Its operation is Iceberg's for such a change (append,
    delete or overwrite). Raises pyiceberg's CommitFailedException if the table moved since it was loaded."""
    if replaced or (added and deletes):
        operation = Operation.OVERWRITE
    elif deletes:
        operation = Operation.DELETE
    else:
        operation = Operation.APPEND
    with table.transaction() as tx:
        if tx.table_metadata.name_mapping() is None:
            mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
            tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
        producer = _RowDelta if replaced else _RowDeltaAppend
        delta = producer(
            operation=operation,
            transaction=tx,
            io=table.io,
            snapshot_properties=properties,
            delete_files=deletes,
        )
        with delta:
            for data_file in replaced:
                delta.delete_data_file(data_file)
            for data_file in added:
                delta.append_data_file(data_file)
