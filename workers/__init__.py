"""Runtime of a connector: control channel, coordinator, participants, Spark writer, table committer."""

import os
import tempfile


def _leave_a_deleted_working_directory() -> None:
    """Move to the temporary directory if the working directory no longer exists.

    Spark's Python workers run here (this package holds every function they
    are given), forked by a daemon whose working directory is a Spark Connect
    session's, which the server deletes with the session; pyiceberg reads
    os.getcwd() when it is imported, so on a server that had outlived a
    session every write and compaction failed with FileNotFoundError.
    """
    try:
        os.getcwd()
    except FileNotFoundError:
        os.chdir(tempfile.gettempdir())


_leave_a_deleted_working_directory()
