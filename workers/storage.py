"""A table's storage as the workers reach it beside Spark: a local path, or an ``s3a://`` URL.

Spark and the lakehouse writers it runs (Hudi's) reach storage through Hadoop's file systems, configured
in Spark's Hadoop configuration: for S3, Hadoop's S3A connector and its ``fs.s3a.*`` settings, in
``spark-defaults.conf`` as ``spark.hadoop.fs.s3a.*`` (per bucket: ``fs.s3a.bucket.<bucket>.*``). The
workers read and write beside Spark (rows for a commit, the table's timeline, a probe), with pyarrow
and hudi-rs; they take the same settings from the same file (``sinkadmin.services.spark_defaults``), so
a store is configured once, the way Spark users configure it. Settings not given there fall to the AWS
SDKs' own defaults (``AWS_ACCESS_KEY_ID``..., an instance profile), in Hadoop's connector and here alike.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import pyarrow.fs as pafs

# The URL schemes the workers reach: a path on a file system every worker and executor mounts, or S3
# through Hadoop's S3A connector (s3a:// is its scheme; s3:// and s3n:// are other connectors').
LOCAL_SCHEMES = ("", "file")
S3A = "s3a"
# Hadoop's S3A settings the workers use, by their name under fs.s3a.
S3A_SETTINGS = (
    "endpoint",
    "endpoint.region",
    "access.key",
    "secret.key",
    "session.token",
    "path.style.access",
    "connection.ssl.enabled",
)


def s3a_settings(bucket: str, spark_properties: Mapping[str, str]) -> dict[str, str]:
    """The ``fs.s3a.*`` settings Hadoop's S3A connector uses for ``bucket``, from Spark properties
    (``spark.hadoop.fs.s3a.<name>``, overridden by ``spark.hadoop.fs.s3a.bucket.<bucket>.<name>``, as
    Hadoop's per-bucket configuration does), by their name under ``fs.s3a.``."""
    found = {}
    for name in S3A_SETTINGS:
        for key in (f"spark.hadoop.fs.s3a.bucket.{bucket}.{name}", f"spark.hadoop.fs.s3a.{name}"):
            if spark_properties.get(key, "").strip():
                found[name] = spark_properties[key].strip()
                break
    return found


@dataclass(frozen=True)
class StoragePath:
    """A directory (a table's base path) as Spark names it (``uri``) and as the workers reach it; for S3,
    with the S3A settings of its bucket, resolved where it was parsed (they go with a job to Spark's
    Python workers, which may run where no spark-defaults.conf is)."""

    uri: str
    s3a: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, text: str) -> StoragePath:
        """A local path (``/x``, ``file:///x``) or an ``s3a://bucket/key`` URL, normalised."""
        parts = urlsplit(text)
        if parts.scheme in LOCAL_SCHEMES:
            return cls(posixpath.normpath(parts.path if parts.scheme else text))
        if parts.scheme != S3A:
            raise ValueError(f"{parts.scheme}:// is not a storage the workers reach")
        from sinkadmin.services import spark_defaults

        key = posixpath.normpath("/" + parts.path.lstrip("/")).rstrip("/")
        settings = s3a_settings(parts.netloc, spark_defaults())
        return cls(f"{S3A}://{parts.netloc}{key}", tuple(sorted(settings.items())))

    @property
    def is_local(self) -> bool:
        return "://" not in self.uri

    def child(self, *names: str) -> StoragePath:
        return StoragePath(posixpath.join(self.uri, *names), self.s3a)

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """pyarrow's file system for this storage, and this directory's path on it."""
        import pyarrow.fs as pafs

        if self.is_local:
            return pafs.LocalFileSystem(), self.uri
        parts = urlsplit(self.uri)
        settings = dict(self.s3a)
        endpoint = self._endpoint(settings)
        kwargs: dict[str, object] = {
            "access_key": settings.get("access.key"),
            "secret_key": settings.get("secret.key"),
            "session_token": settings.get("session.token"),
            "region": settings.get("endpoint.region"),
            "allow_bucket_creation": False,
        }
        if endpoint is not None:
            kwargs.update(scheme=endpoint[0], endpoint_override=endpoint[1])
        if self._virtual_hosted(settings):
            kwargs["force_virtual_addressing"] = True
        fs = pafs.S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None})
        return fs, f"{parts.netloc}{parts.path}"

    def storage_options(self) -> dict[str, str]:
        """hudi-rs's storage options (object_store's S3 keys) for this storage."""
        if self.is_local:
            return {}
        settings = dict(self.s3a)
        options = {
            "aws_access_key_id": settings.get("access.key", ""),
            "aws_secret_access_key": settings.get("secret.key", ""),
            "aws_session_token": settings.get("session.token", ""),
            "aws_region": settings.get("endpoint.region", ""),
        }
        endpoint = self._endpoint(settings)
        if endpoint is not None:
            options["aws_endpoint"] = f"{endpoint[0]}://{endpoint[1]}"
            options["aws_allow_http"] = str(endpoint[0] == "http").lower()
        if self._virtual_hosted(settings):
            options["aws_virtual_hosted_style_request"] = "true"
        return {k: v for k, v in options.items() if v}

    @classmethod
    def _virtual_hosted(cls, settings: Mapping[str, str]) -> bool:
        """Whether buckets are addressed as hosts (AWS's own endpoints), not as paths: without an endpoint
        of the config's and without ``path.style.access``."""
        return cls._endpoint(settings) is None and settings.get("path.style.access", "").lower() != "true"

    @staticmethod
    def _endpoint(settings: Mapping[str, str]) -> tuple[str, str] | None:
        """(scheme, host[:port]) of the S3A endpoint setting, if it names one: Hadoop's connector takes it
        with or without a scheme (then by ``connection.ssl.enabled``, https by default)."""
        endpoint = settings.get("endpoint", "")
        if not endpoint:
            return None
        if "://" in endpoint:
            parts = urlsplit(endpoint)
            return parts.scheme, parts.netloc
        ssl = settings.get("connection.ssl.enabled", "true").lower() != "false"
        return ("https" if ssl else "http"), endpoint

    def exists(self, name: str) -> bool:
        """Whether the file ``name`` (a path under this directory) exists."""
        import pyarrow.fs as pafs

        fs, root = self.filesystem()
        return fs.get_file_info(posixpath.join(root, name)).type == pafs.FileType.File

    def write_bytes(self, name: str, data: bytes) -> None:
        fs, root = self.filesystem()
        path = posixpath.join(root, name)
        fs.create_dir(posixpath.dirname(path), recursive=True)
        with fs.open_output_stream(path) as out:
            out.write(data)

    def delete(self, name: str) -> None:
        """Delete the file or directory ``name`` under this directory; nothing if it is not there."""
        import pyarrow.fs as pafs

        fs, root = self.filesystem()
        path = posixpath.join(root, name)
        found = fs.get_file_info(path).type
        if found == pafs.FileType.Directory:
            fs.delete_dir(path)
        elif found == pafs.FileType.File:
            fs.delete_file(path)

    def _entries(self) -> tuple[pafs.FileSystem, list[pafs.FileInfo]]:
        """The file system, and what is right under this directory (nothing if it is not there)."""
        import pyarrow.fs as pafs

        fs, root = self.filesystem()
        if fs.get_file_info(root).type != pafs.FileType.Directory:
            return fs, []
        return fs, fs.get_file_info(pafs.FileSelector(root))

    def files(self) -> list[str]:
        """The names of the files right under this directory (none if it is not there)."""
        import pyarrow.fs as pafs

        return [f.base_name for f in self._entries()[1] if f.type == pafs.FileType.File]

    def folders(self) -> Iterator[tuple[str, float]]:
        """Each directory right under this one, with the time its newest file was written (epoch seconds; an
        empty one's own time, or 0 on S3, where a directory has none)."""
        import pyarrow.fs as pafs

        fs, entries = self._entries()
        for folder in entries:
            if folder.type != pafs.FileType.Directory:
                continue
            files = fs.get_file_info(pafs.FileSelector(folder.path, recursive=True))
            times = [f.mtime.timestamp() for f in files if f.type == pafs.FileType.File and f.mtime is not None]
            if not times and folder.mtime is not None:
                times.append(folder.mtime.timestamp())
            yield folder.base_name, max(times, default=0.0)
