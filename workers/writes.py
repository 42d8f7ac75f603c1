"""What both data planes (Arrow in the participant, Spark on the host) share:
the tables of a commit, its results, and how data files are named."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema

from connectors.config.transforms import PartitionField
from connectors.config.validation import TableTarget
from workers.events import DataFile
from workers.staging import StagedPartition
from workers.tables import spec_fields


def uri(path: str) -> str:
    return path if "://" in path else f"file://{path}"


@dataclass(frozen=True)
class TargetTable:
    """A table records are written to, as resolved (or created) for a commit."""

    target: TableTarget
    schema: Schema
    location: str
    # The table's current partition spec (what the Arrow data plane splits by).
    spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC

    @property
    def partition_by(self) -> tuple[PartitionField, ...]:
        """The spec as transforms of source columns (what the Spark data plane splits by)."""
        return spec_fields(self.spec, self.schema)


@dataclass(frozen=True)
class WritePlan:
    tables: tuple[TargetTable, ...]
    # "arrow": participants decode; "spark": they stage raw records for Spark.
    engine: str


@dataclass(frozen=True)
class BadRecord:
    topic: str
    partition: int
    offset: int
    reason: str


@dataclass
class WriteResult:
    files: list[DataFile] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    # Per (topic, partition): records written to no table (null values).
    skipped: dict[tuple[str, int], int] = field(default_factory=dict)


def publish(
    commit_id: uuid.UUID,
    attempt: str,
    source: str,
    n: int,
    table: str,
    location: str,
    staged: StagedPartition,
    partition_values: str | None = None,
) -> DataFile:
    """Move a written file to its immutable name (DESIGN I5) and describe it for the commit.

    ``source`` is a path on the filesystem of the table's location, as
    pyarrow names it there (no scheme): both data planes write there.
    """
    data_dir = f"{location.rstrip('/')}/data"
    fs, data_path = pafs.FileSystem.from_uri(uri(data_dir))
    name = f"{staged.topic}+{staged.partition}+{staged.start}+{staged.end - 1}-{commit_id}-{attempt}-{n:03d}.parquet"
    target = f"{data_path}/{name}"
    fs.move(source, target)
    metadata = pq.read_metadata(target, filesystem=fs)
    return DataFile(
        table=table,
        path=f"{data_dir}/{name}" if "://" in data_dir else uri(target),
        topic=staged.topic,
        partition=staged.partition,
        records=metadata.num_rows,
        bytes=fs.get_file_info(target).size,
        partition_values=partition_values,
    )
