"""Spark's Python daemon for the data plane: the decoder's libraries imported once, before it forks workers.

Spark runs Python code through a daemon (``pyspark.daemon``) that forks a
worker per concurrent Python task, reuses it for the next tasks, and stops a
worker idle for a minute (a constant in Spark's ``PythonWorkerFactory``).
Each new worker then imported the decoder's libraries (pyarrow, pyiceberg,
pydantic, numpy: many modules, a costly import) at its first task. That
came back at every commit of a connector committing less often than once a
minute (``iceberg.control.commit.interval-ms`` is five minutes by default),
once per core, and at a connector's start. Forked from this daemon, a worker has them already,
shared copy-on-write with the daemon and its other workers (docs/benchmarks.md,
"Measurements behind the runtime's design").

Spark's own daemon imports nothing heavy before it forks, because a thread
that an import starts does not exist in the forked child, and a lock it held
stays held there. Two of these imports start one: OpenBLAS's thread pool
(numpy) and jemalloc's background purging thread (pyarrow, which links
jemalloc but allocates with mimalloc here). Both are told not to first; if
the process has more than one thread after all (another build of these
libraries), or when an import fails, it replaces itself with Spark's own
daemon, which preloads nothing.

Spark starts this module (``spark.python.daemon.module``) where it starts
Python workers on this machine: the Spark Connect server that ``make run``
starts with a local master, and a worker process's own local Spark. Its
directory is on their ``PYTHONPATH``; this project's own code is not
imported here, since it comes with each Spark session (the code archive,
which can be newer than this daemon).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import zipimport

# Modules (with what they import) that a Python worker's decode needs, and
# that are not this project's.
PRELOADED_LIBRARIES = (
    "pyspark.daemon",
    "pyspark.worker",
    # (PySpark 3.5 checks pyarrow's and pandas' versions with distutils' LooseVersion in each
    # worker: on Python 3.12, setuptools' distutils, ~80 modules.)
    "distutils.version",
    "numpy",
    "pyarrow",
    "pyarrow.acero",  # (grouping a partitioned table's rows by partition)
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.json",
    "pyarrow.parquet",
    "arro3.core",
    "arro3.io",
    "orjson",  # (columns the JSON readers cannot read: workers.json_values)
    "django.db",
    "pydantic",
    "pyiceberg.io.pyarrow",
    "pyiceberg.table",
    "pyiceberg_core.transform",  # (Iceberg's partition transforms: bucket, truncate)
    "fastavro",
)


def single_threaded() -> bool | None:
    """Whether this process has one thread (``None`` where the system does not say: no /proc)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return None


def preload() -> frozenset[str]:
    """Import ``PRELOADED_LIBRARIES`` asking them to start no thread, and take them out of the
    collector's reach (a worker's ``gc.collect()`` after each task would walk them again); the modules
    this process has."""
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["JE_ARROW_MALLOC_CONF"] = "background_thread:false"
    for name in PRELOADED_LIBRARIES:
        importlib.import_module(name)
    # A worker's first task adds the session's archives to its path and calls
    # importlib.invalidate_caches(), which has every zipimporter cached in
    # sys.path_importer_cache read its archive's directory again: one per
    # package imported from pyspark.zip and one for each archive on Spark's
    # PYTHONPATH, a noticeable part of a new worker's start. Those archives
    # do not change while Spark runs. Out of the cache, their importers are
    # made again when an import needs them, from the directory that
    # zipimport keeps for each archive (docs/benchmarks.md, "Measurements
    # behind the runtime's design").
    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[path]
    gc.freeze()
    return frozenset(sys.modules)


def become_sparks_daemon(why: str) -> None:
    """Replace this process with Spark's own daemon (same arguments), which preloads nothing."""
    print(f"sinkadmin_spark_daemon: {why}; running pyspark.daemon instead", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])


if __name__ == "__main__":
    try:
        # (Forked workers see it as __main__.PRELOADED: what they did not have to import.)
        PRELOADED = preload()
    except Exception as exc:
        # A library missing or broken in this Python: a worker's decode
        # will fail on it with its own error, where the task shows it.
        become_sparks_daemon(f"preloading failed ({type(exc).__name__}: {exc})")
    if single_threaded() is False:
        become_sparks_daemon("an import started a thread")
    from pyspark.daemon import manager

    manager()
