"""The files sink's runtime, as its plugin names it: the participants' writer and the coordinator's committer."""

from __future__ import annotations

from connectors.config import SinkConfig
from sinks.files.committer import FilesCommitter
from sinks.files.writer import FilesWriter


def writer(config: SinkConfig) -> FilesWriter:
    return FilesWriter(config)


def committer(connector: str, config: SinkConfig) -> FilesCommitter:
    return FilesCommitter(connector, config)
