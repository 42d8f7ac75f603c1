"""The files sink's commit: the prepared commit's files are moved to their final names.

A move is idempotent (a file found at its final name is done), so a
PREPARED commit is rolled forward by whichever coordinator gets to it, after
any crash, and two coordinators finishing the same commit (a zombie and its
successor) end with each file once. On S3 a move is a copy and a delete: a
crash between them leaves the file at both names, and the roll forward,
finding the final one, only deletes the temporary copy. Files of commits
that were never prepared stay under ``+tmp`` (no reader lists it) and are
removed with their commit's directory, or by the hourly sweep once an hour old.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs

from connectors.config import SinkConfig
from sinks.files.s3 import ObjectsOnlyS3
from sinks.files.settings import FilesSettings
from sinks.files.writer import TMP_DIR, tmp_root
from workers.coordinator import CommitNotApplied, PreparedCommit, SinkUnavailable

log = logging.getLogger(__name__)

# Words of the connection errors pyarrow's S3 and HDFS clients raise, and boto3's (the deletes on S3, sinks.files.s3).
_UNREACHABLE = (
    "NETWORK_CONNECTION",
    "Couldn't connect",
    "Connection refused",
    "timed out",
    "Could not resolve",
    "Could not connect to the endpoint",
    "Connect timeout on endpoint",
    "Read timeout on endpoint",
    "Failed to connect to proxy URL",
    "Connection was closed before we received",
)


def storage_outage(exc: BaseException, settings: FilesSettings) -> str | None:
    """What to show when ``exc`` says the store cannot be reached (a passing condition), else None."""
    cause: BaseException | None = exc
    while cause is not None:
        # The OSError itself (the coordinator's moves, the arrow plane), or its
        # line in the text of an error Spark relays from a Python worker.
        lines = str(cause).splitlines() if isinstance(cause, OSError) else _relayed_os_errors(str(cause))
        if lines and any(word in lines[0] for word in _UNREACHABLE):
            where = (
                f"s3://{settings.storage.bucket} at {settings.storage.url or 'AWS'}"
                if settings.storage.bucket
                else settings.storage.url
            )
            return f"the store {where} cannot be reached: {lines[0].removeprefix('OSError: ')}"
        cause = cause.__cause__ or cause.__context__
    return None


def _relayed_os_errors(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("OSError: ")]


# The user metadata of a file on S3: the commit that moved it there, and its Kafka partition's next offset after
# that commit, as the ledger had it (for rebuilding a lost ledger from files whose names, as the S3 sink's, give
# no last offset).
COMMIT_METADATA = "sinkadmin-commit-id"
NEXT_OFFSET_METADATA = "sinkadmin-next-offset"


def move(
    fs: pafs.FileSystem,
    source: str | None,
    target: str,
    metadata: dict[str, str] | None = None,
    tags: dict[str, str] | None = None,
) -> None:
    """Put a file at ``target`` from ``source``, idempotently: a file found at ``target`` is this move's, done.

    On S3 with ``metadata`` (the commit's, ``COMMIT_METADATA``), given with the copy: a file found at ``target``
    is this move's only if its metadata names the same commit. One that names another (offsets rewound, and the
    S3 sink's name, by the first offset alone, given again to other records) is replaced, as the S3 sink replaces
    an object. ``tags``: the copy's (s3.object.tagging)."""
    found = fs.get_file_info([target] + ([source] if source else []))
    staged = source if source and found[1].type == pafs.FileType.File else None
    there = found[0].type == pafs.FileType.File
    if there and _moved_by(fs, target, metadata, staged):
        if staged:
            fs.delete_file(staged)  # (a move cut between its copy and its delete)
        return
    if staged is None:
        what = "holds another commit's file" if there else "is missing"
        raise RuntimeError(f"{target} {what} and the temporary file {source} is missing: the commit cannot be finished")
    # The final directory, on a store that has directories (on S3 nothing is created: sinks.files.s3).
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    if metadata is None:
        fs.move(staged, target)
        return
    s3: ObjectsOnlyS3 = fs.handler  # type: ignore[attr-defined]
    s3.copy_object(staged, target, metadata, tags)
    fs.delete_file(staged)


def _moved_by(fs: pafs.FileSystem, target: str, metadata: dict[str, str] | None, staged: str | None) -> bool:
    """Whether the file at ``target`` is the move's: any file there; on S3, one whose metadata names the move's
    commit, or, its temporary file gone, one that names none (moved by this sink before its files named their
    commits, 2026-11-30: a commit prepared then, rolled forward now)."""
    if metadata is None:
        return True
    s3: ObjectsOnlyS3 = fs.handler  # type: ignore[attr-defined]
    commit = s3.user_metadata(target).get(COMMIT_METADATA)
    return commit == metadata[COMMIT_METADATA] or (commit is None and staged is None)


def fs_path(settings: FilesSettings, path: str) -> str:
    """A file's path on the store's file system, from the URL the ledger keeps (the one readers use)."""
    if settings.storage.bucket:
        return path.removeprefix("s3://")
    if path.startswith("file://"):
        return path.removeprefix("file://")
    if "://" in path:
        return "/" + path.split("://", 1)[1].split("/", 1)[1]
    return path


def held_files(config: SinkConfig, files: list[dict[str, Any]], commit_id: str) -> list[str]:
    """The files of a prepared commit that are at their names already (its commit moved them before it
    stopped): abandoning the commit would write their records again. On S3, a file there is the commit's if its
    metadata names it (or names none and its temporary file is gone: moved by the version before); elsewhere, a
    file at the name is taken as the commit's (a move is a rename)."""
    settings: FilesSettings = config.settings
    fs, _ = settings.storage.filesystem()

    def held(f: dict[str, Any]) -> bool:
        target = fs_path(settings, f["path"])
        if _present(fs, target) is None:
            return False
        on_s3 = settings.storage.bucket is not None
        return not on_s3 or _moved_by(fs, target, {COMMIT_METADATA: commit_id}, _present(fs, f.get("staged_path")))

    return [f["path"] for f in files if held(f)]


def _present(fs: pafs.FileSystem, path: str | None) -> str | None:
    """``path``, if a file is there."""
    return path if path and fs.get_file_info(path).type == pafs.FileType.File else None


class FilesCommitter:
    """The coordinator's CommitterPort for the files sink."""

    def __init__(self, connector: str, config: SinkConfig) -> None:
        self.connector = connector
        self.config = config
        self.settings: FilesSettings = config.settings
        self._fs: Any = None
        self._root = ""
        self._swept_at: float | None = None

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            self._fs, self._root = self.settings.storage.filesystem()
        return self._fs, self._root

    def close(self) -> None:
        self._fs = None

    def commit(self, prepared: PreparedCommit) -> dict[str, int]:
        try:
            return self._commit(prepared)
        except Exception as exc:
            outage = storage_outage(exc, self.settings)
            if outage is None:
                raise
            raise SinkUnavailable(outage) from exc

    def _commit(self, prepared: PreparedCommit) -> dict[str, int]:
        fs, root = self.filesystem()
        on_s3 = self.settings.storage.bucket is not None
        moves = []
        for f in prepared.files:
            metadata = None
            if on_s3:
                next_offset = prepared.offsets[f["topic"]][str(f["partition"])][1]
                metadata = {COMMIT_METADATA: str(prepared.commit_id), NEXT_OFFSET_METADATA: str(next_offset)}
            moves.append((f, f.get("staged_path"), fs_path(self.settings, f["path"]), metadata))
        # Tags (s3.object.tagging) first, set on the temporary files, so that a file S3 will not tag is known
        # before any file of the commit is visible; each copy then names its file's tags.
        tags = {target: self._tags(fs, f, staged, target, metadata, prepared) for f, staged, target, metadata in moves}
        for _, staged, target, metadata in moves:
            self._move(fs, staged, target, metadata, tags.get(target))
        # What is left of this commit: files of a write that was superseded or retried.
        leftovers = tmp_root(self.settings, root, prepared.commit_id)
        if fs.get_file_info(leftovers).type == pafs.FileType.Directory:
            fs.delete_dir(leftovers)
        if self._swept_at is None or time.monotonic() - self._swept_at > self.ORPHAN_AGE_S:
            self._sweep(prepared)
        # Files have no snapshots: the ledger's entry is the commit's record.
        return {}

    def _move(
        self,
        fs: pafs.FileSystem,
        staged: str | None,
        target: str,
        metadata: dict[str, str] | None,
        tags: dict[str, str] | None,
    ) -> None:
        """``move``, its copy naming the file's tags. With s3.object.behavior.on.tagging.error=ignore, a copy S3
        refuses with them (a bucket policy that lets the temporary files be tagged but not the final ones) is
        made again without them, logged."""
        try:
            move(fs, staged, target, metadata, tags)
        except OSError as exc:
            tagging = self.settings.tagging
            if tags is None or tagging is None or tagging.fail or storage_outage(exc, self.settings) is not None:
                raise
            log.warning(
                "%s: s3://%s is committed untagged: S3 refused its copy with its tags "
                "(s3.object.behavior.on.tagging.error=ignore): %s",
                self.connector,
                target,
                exc,
            )
            move(fs, staged, target, metadata)

    def _tags(
        self,
        fs: pafs.FileSystem,
        file: dict[str, Any],
        staged: str | None,
        target: str,
        metadata: dict[str, str] | None,
        prepared: PreparedCommit,
    ) -> dict[str, str] | None:
        """The tags of a file the commit moves (s3.object.tagging), as the S3 sink tags it, once S3 has taken them
        on its temporary file (None: no tagging, or tags S3 refused with s3.object.behavior.on.tagging.error
        =ignore). A file this commit moved before (a commit rolled forward) is tagged at its name; another
        commit's file there is left alone (the move says why the commit cannot be finished). A store that
        cannot be reached is an outage; tags S3 refuses are logged (ignore) or fail the commit (fail), before
        any of its files is moved."""
        tagging = self.settings.tagging
        if tagging is None:
            return None
        first, last = file.get("first_offset"), file.get("last_offset")
        if first is None or last is None:
            log.warning(
                "%s: s3://%s is not tagged: commit %s was prepared by a version that did not record its files' offsets",
                self.connector,
                target,
                prepared.commit_id,
            )
            return None
        tags = tagging.tags(first, last, file["records"])
        at = _present(fs, staged)
        if at is None and _present(fs, target) and _moved_by(fs, target, metadata, None):
            at = target
        if at is None:
            return None
        s3: ObjectsOnlyS3 = fs.handler  # type: ignore[attr-defined]
        try:
            s3.tag_object(at, tags)
        except OSError as exc:
            if storage_outage(exc, self.settings) is not None:
                raise
            if tagging.fail:
                reason = f"S3 did not tag it (s3.object.behavior.on.tagging.error=fail): {exc}"
                raise CommitNotApplied(self.connector, prepared.commit_id, reason, f"s3://{target}") from exc
            log.warning(
                "%s: s3://%s is committed untagged (s3.object.behavior.on.tagging.error=ignore): %s",
                self.connector,
                target,
                exc,
            )
            return None
        return tags

    # Temporary directories of commits that will never be prepared are
    # removed once they are this old: a write in flight (this commit's, or a
    # late one of a timed-out commit) is never older.
    ORPHAN_AGE_S = 3600.0

    def _sweep(self, prepared: PreparedCommit) -> None:
        """Remove what commits that were never prepared left under ``+tmp`` (at a coordinator's
        first commit, then hourly: aborted commits leave their files behind)."""
        self._swept_at = time.monotonic()
        fs, root = self.filesystem()
        tmp = tmp_root(self.settings, root, "").rstrip("/")
        assert tmp.endswith(TMP_DIR)
        now = time.time()
        for info in fs.get_file_info(pafs.FileSelector(tmp, allow_not_found=True)):
            if info.type != pafs.FileType.Directory or info.base_name == str(prepared.commit_id):
                continue
            # Directories' times count too: one made a moment ago may be about to get a file.
            newest = max(
                (
                    f.mtime.timestamp()
                    for f in fs.get_file_info(pafs.FileSelector(info.path, recursive=True))
                    if f.mtime
                ),
                default=0.0,
            )
            if now - newest > self.ORPHAN_AGE_S:
                log.info("%s: removing %s, left by a commit that was never prepared", self.connector, info.path)
                fs.delete_dir(info.path)


def committed_file_ranges(config: SinkConfig) -> tuple[dict[tuple[str, int], tuple[int, int]], datetime]:
    """Each partition's offsets [first, last + 1) over the committed files of the connector's topics (the
    temporary directory left out), and when the newest of them was written."""
    settings: FilesSettings = config.settings
    fs, root = settings.storage.filesystem()
    base = settings.topics_path(root)
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    pattern = re.compile(config.topics_regex) if config.topics_regex else None
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    # Of each partition, with the S3 sink's names: the file of the greatest first offset.
    latest: dict[tuple[str, int], tuple[str, int]] = {}
    newest = 0.0
    for info in fs.get_file_info(selector):
        directory = info.path[len(base) :].lstrip("/").split("/", 1)[0]
        if info.type != pafs.FileType.File or directory == TMP_DIR:
            continue
        parsed = settings.parse_file_name(info.base_name, topic=directory)
        if parsed is None:
            continue
        topic, partition, first, last = parsed
        if topic not in config.topics and not (pattern is not None and pattern.fullmatch(topic)):
            continue
        if last is None:
            # The S3 sink's name: the partition's next offset is in the metadata of its last file.
            if first >= latest.get((topic, partition), ("", -1))[1]:
                latest[(topic, partition)] = (info.path, first)
            last = first
        start, end = ranges.get((topic, partition), (first, last + 1))
        ranges[(topic, partition)] = (min(start, first), max(end, last + 1))
        if info.mtime is not None:
            newest = max(newest, info.mtime.timestamp())
    for key, (path, _) in latest.items():
        s3: ObjectsOnlyS3 = fs.handler  # type: ignore[attr-defined]
        found = s3.user_metadata(path).get(NEXT_OFFSET_METADATA)
        if found is None or not found.isdigit():
            raise RuntimeError(
                f"s3://{path} has no {NEXT_OFFSET_METADATA} metadata, so where its partition's records end is not "
                "known (a file this sink did not move there)"
            )
        ranges[key] = (ranges[key][0], max(ranges[key][1], int(found)))
    return ranges, datetime.fromtimestamp(newest, tz=UTC) if newest else datetime.now(tz=UTC)
