"""The files sink's runtime, as its plugin names it: the participants' writer, the coordinator's committer,
and the commits its files' names record (for rebuilding a lost ledger)."""

from __future__ import annotations

import uuid
from typing import Any

from connectors.config import SinkConfig
from sinks.files.committer import FilesCommitter, held_files
from sinks.files.writer import FilesWriter


def writer(config: SinkConfig) -> FilesWriter:
    return FilesWriter(config)


def committer(connector: str, config: SinkConfig) -> FilesCommitter:
    return FilesCommitter(connector, config)


def recovered_commits(connector: str, config: SinkConfig) -> list[Any]:
    """What the committed files' names say was committed: each partition's offsets from its first file's
    first offset to its last file's last, as the Confluent HDFS sink recovers its offsets by listing (with
    the S3 sink's names, which give no last offset, to the next offset in its last file's metadata).

    The names carry no commit id or epoch: the files are restored as one commit, whose id follows from
    what was found (rebuilding twice from the same files adds it once). Files under ``+tmp`` are of
    commits never finished, and are not listed.
    """
    from sinks.files.committer import committed_file_ranges

    ranges, committed_at = committed_file_ranges(config)
    if not ranges:
        return []
    from connectors.actions.ledger import RecoveredCommit

    found = sorted(ranges.items())
    return [
        RecoveredCommit(
            commit_id=uuid.uuid5(uuid.NAMESPACE_URL, f"sinkadmin:{connector}:files:{found}"),
            epoch=0,
            committed_at=committed_at,
            snapshot_ids={},
            ranges=dict(found),
            watermark=None,
        )
    ]


def commit_held(connector: str, config: SinkConfig, files: list[dict[str, Any]], commit_id: str) -> list[str]:
    """Where the sink holds part of a prepared commit already (its files at their names, moved before it stopped):
    such a commit is finished by a restart, never abandoned (its records would be written twice)."""
    return held_files(config, files, commit_id)
