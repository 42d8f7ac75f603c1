"""S3 as the files sink writes it: objects only, never a directory marker.

pyarrow's S3FileSystem emulates directories with zero-byte ``<dir>/`` objects:
``create_dir`` writes one per level, and ``delete_file``, ``delete_dir`` and
``move`` each write one for the parent of what they removed (Arrow's
``EnsureParentExists``, so that an emptied directory still lists). The
Confluent S3 sink writes no such objects, and readers of its layout do not
expect them (a Hive or Athena table over ``topics/`` lists them as files of
size 0). So the files sink reaches S3 through ``ObjectsOnlyS3``, a pyarrow
file system handler in front of pyarrow's own S3 client: reads and writes are
pyarrow's; a directory is never created (a key needs none); objects are
deleted with boto3, which deletes the keys it is given and writes nothing; and
copied with boto3, which names the canned ACL (``s3.acl.canned``) that S3 gives
a copy (pyarrow's copy names none, and the copy is private). A move is a copy
and a delete, as pyarrow's is on S3.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pyarrow.fs as pafs

if TYPE_CHECKING:
    from sinks.files.settings import Storage

# S3's limit on the keys of one DeleteObjects request.
DELETE_BATCH = 1000


class ObjectsOnlyS3(pafs.FileSystemHandler):
    """pyarrow's S3 file system (``native``) with its directory markers left out: wrap it in ``pafs.PyFileSystem``.
    Paths are pyarrow's S3 paths, ``<bucket>/<key>``."""

    def __init__(self, native: pafs.S3FileSystem, storage: Storage) -> None:
        self.native = native
        self.storage = storage
        self._client: Any = None

    def __reduce__(self) -> tuple[type[ObjectsOnlyS3], tuple[pafs.S3FileSystem, Storage]]:
        # (Pickled without its boto3 client, which is made again where it is needed.)
        return ObjectsOnlyS3, (self.native, self.storage)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ObjectsOnlyS3):
            return NotImplemented
        return self.storage == other.storage

    def __hash__(self) -> int:
        return hash(self.storage)

    def get_type_name(self) -> str:
        return "s3"

    def normalize_path(self, path: str) -> str:
        return str(self.native.normalize_path(path))

    # Reading and listing: pyarrow's.

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return list(self.native.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return list(self.native.get_file_info(selector))

    def open_input_stream(self, path: str) -> Any:
        # (PyFileSystem applies the caller's compression: the stream given back is the object's bytes.)
        return self.native.open_input_stream(path, compression=None)

    def open_input_file(self, path: str) -> Any:
        return self.native.open_input_file(path)

    # Writing: pyarrow's, which writes the object and nothing else (an upload creates no parent).

    def open_output_stream(self, path: str, metadata: dict[str, str] | None) -> Any:
        return self.native.open_output_stream(path, compression=None, metadata=metadata)

    def open_append_stream(self, path: str, metadata: dict[str, str] | None) -> Any:
        return self.native.open_append_stream(path, compression=None, metadata=metadata)

    def copy_file(self, src: str, dest: str) -> None:
        self.copy_object(src, dest)

    def copy_object(
        self, src: str, dest: str, metadata: dict[str, str] | None = None, tags: dict[str, str] | None = None
    ) -> None:
        """A CopyObject, which writes ``dest`` only; with ``metadata``, ``dest`` has that user metadata (not the
        source's); with ``tags``, those tags (named by the request, which takes s3:PutObjectTagging only; a copy
        of the source's would take s3:GetObjectTagging too). boto3's, not pyarrow's: S3 gives a copy no ACL but
        the one the request names, and pyarrow's names none (nor any metadata)."""
        src_bucket, src_key = _bucket_and_key(src)
        bucket, key = _bucket_and_key(dest)
        extra: dict[str, Any] = {"ACL": self.storage.acl} if self.storage.acl else {}
        if metadata is not None:
            # (Replacing the metadata replaces its content type too: pyarrow's, which its uploads set.)
            extra |= {"Metadata": metadata, "MetadataDirective": "REPLACE", "ContentType": "application/octet-stream"}
        if tags is not None:
            extra |= {"Tagging": urlencode(tags), "TaggingDirective": "REPLACE"}
        self._call(
            f"copying {src} to {dest}",
            lambda s3: s3.copy_object(
                Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key}, **extra
            ),
        )

    def tag_object(self, path: str, tags: dict[str, str]) -> None:
        """Set the object's tags (PutObjectTagging: they replace any it had, so a retry changes nothing)."""
        bucket, key = _bucket_and_key(path)
        tag_set = [{"Key": k, "Value": v} for k, v in tags.items()]
        self._call(
            f"tagging {path}", lambda s3: s3.put_object_tagging(Bucket=bucket, Key=key, Tagging={"TagSet": tag_set})
        )

    def user_metadata(self, path: str) -> dict[str, str]:
        """The object's user metadata (``x-amz-meta-*``, without the prefix)."""
        bucket, key = _bucket_and_key(path)
        return dict(self._call(f"reading {path}", lambda s3: s3.head_object(Bucket=bucket, Key=key))["Metadata"])

    def create_dir(self, path: str, recursive: bool) -> None:
        """Nothing: on S3 a key needs no directory, and the marker pyarrow would write is what this class leaves out."""

    # Removing: boto3's, which writes no marker for the parent.

    def delete_file(self, path: str) -> None:
        info = self.native.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"Path does not exist '{path}'")
        if info.type != pafs.FileType.File:
            raise IsADirectoryError(f"Not a regular file: '{path}'")
        bucket, key = _bucket_and_key(path)
        self._call(f"deleting {path}", lambda s3: s3.delete_object(Bucket=bucket, Key=key))

    def move(self, src: str, dest: str) -> None:
        if self.native.get_file_info(src).type == pafs.FileType.Directory:
            raise OSError(f"Cannot move the directory '{src}' on S3: move its files one by one")
        self.copy_file(src, dest)
        self.delete_file(src)

    def delete_dir(self, path: str) -> None:
        """Every object under ``path`` (markers that others wrote included)."""
        if not self._delete_under(path):
            raise FileNotFoundError(f"Path does not exist '{path}'")

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        # On S3 a directory is its objects: with its contents gone it is gone, and no marker keeps it.
        if not self._delete_under(path) and not missing_dir_ok:
            raise FileNotFoundError(f"Path does not exist '{path}'")

    def delete_root_dir_contents(self) -> None:
        raise OSError("Cannot delete all S3 buckets")

    def _delete_under(self, path: str) -> int:
        """Delete every object whose key is under ``path`` (``<key>/...``); how many there were."""
        bucket, key = _bucket_and_key(path)
        if not key:
            raise OSError(f"Would delete the contents of the bucket '{bucket}'")
        prefix = key.rstrip("/") + "/"
        deleted = 0
        batch: list[str] = []
        for found in self._keys(bucket, prefix):
            batch.append(found)
            if len(batch) == DELETE_BATCH:
                deleted += self._delete_keys(bucket, prefix, batch)
                batch = []
        if batch:
            deleted += self._delete_keys(bucket, prefix, batch)
        return deleted

    def _keys(self, bucket: str, prefix: str) -> Iterator[str]:
        pages = self._call(
            f"listing {bucket}/{prefix}",
            lambda s3: list(s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)),
        )
        for page in pages:
            for listed in page.get("Contents", ()):
                yield listed["Key"]

    def _delete_keys(self, bucket: str, prefix: str, keys: list[str]) -> int:
        answer = self._call(
            f"deleting {len(keys)} objects under {bucket}/{prefix}",
            lambda s3: s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}),
        )
        failed = answer.get("Errors") or []
        if failed:
            first = failed[0]
            raise OSError(
                f"When deleting {bucket}/{first.get('Key')}: {first.get('Code')}: {first.get('Message')} "
                f"({len(failed)} of {len(keys)} objects not deleted)"
            )
        return len(keys)

    def _call(self, doing: str, request: Callable[[Any], Any]) -> Any:
        """A boto3 request, its failures raised as OSError (as pyarrow raises its own), so that one that says
        the store cannot be reached is an outage (``sinks.files.committer.storage_outage``)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return request(self._s3())
        except (BotoCoreError, ClientError) as exc:
            raise OSError(f"When {doing}: {exc}") from exc

    def _s3(self) -> Any:
        """A boto3 S3 client for the same bucket, endpoint, addressing and credentials as pyarrow's."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            storage = self.storage
            self._client = boto3.client(
                "s3",
                region_name=storage.region,
                endpoint_url=storage.url or None,
                aws_access_key_id=storage.access_key,
                aws_secret_access_key=storage.secret_key,
                config=Config(
                    # s3.path.style.access.enabled names the bucket in the path of requests to store.url; AWS
                    # itself is reached by virtual host either way, as pyarrow reaches it.
                    s3={"addressing_style": "path" if storage.url and storage.path_style else "virtual"},
                    connect_timeout=10,
                    read_timeout=60,
                    retries={"mode": "standard", "max_attempts": 3},
                    # Checksums only where S3 requires one (DeleteObjects), which S3-compatible stores all take.
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                    proxies={"http": storage.proxy.url(), "https": storage.proxy.url()} if storage.proxy else None,
                ),
            )
        return self._client


def _bucket_and_key(path: str) -> tuple[str, str]:
    bucket, _, key = path.strip("/").partition("/")
    return bucket, key
