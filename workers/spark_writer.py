"""Spark is the data plane: the process's session, and the jobs sinks run on it.

Participants stage raw records (``workers.staging.RawStagingFile``) while they
consume; at END_COMMIT a task hands its staged files to Spark in **one job**
(a Spark task per core, each decoding a group of staged partitions:
``task_groups``) and goes on consuming for the next commit while the job runs
(``workers.participant``). What a Spark task does with a staged partition is
the sink's (a ``StagedJob``: the Iceberg sink decodes into its tables' data
files, the files sink into its layout, Hudi into its base files); the job
returns only each partition's outcome (files written, bad records, skips).
A coordinator's work in units (an Iceberg upsert's live files looked up, and
rewritten or given delete files) is a ``UnitJob``, also run as a Spark task
per core. Both are Python functions over ``mapInArrow``: Spark's Python
workers read the staged files and write the data files themselves, the
fastest of the ways measured (docs/spark.md, bench/spark_decoding.py).

One process connects once and keeps its session; the project's code reaches
Spark's Python workers as a Python artifact of that session, so it works on a
cluster whose executors have only the Python packages installed.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from connectors.config import SinkConfig
from workers.staging import STAGING_SCHEMA, RecordChunk, StagedPartition

log = logging.getLogger(__name__)

_session_lock = threading.Lock()
_session: Any = None

SESSION_CONF = {
    # pyiceberg reads INT96 timestamps poorly; Iceberg wants micros.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.shuffle.partitions": "4",
}

STAGING_DDL = (
    "`topic` STRING, `partition` INT, `offset` BIGINT, `timestamp` BIGINT, `key` BINARY, `value` BINARY, "
    "`headers` ARRAY<STRUCT<`key`: STRING, `value`: BINARY>>, `error` STRING"
)
assert STAGING_SCHEMA.names == ["topic", "partition", "offset", "timestamp", "key", "value", "headers", "error"]

# A job's output: what became of each staged partition.
OUTCOME_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("outcome", pa.string())])

# The packages Spark's Python workers import (the decoder and what it uses).
SHIPPED_PACKAGES = ("workers", "connectors", "sinks")


class SparkUnavailable(Exception):
    """The configured Spark cannot be reached."""


class SparkRuntimeMissing(RuntimeError):
    """The Spark a table is read or maintained on lacks that table format's runtime."""


# What a Spark lacking a table format's runtime answers: the data source or the
# catalog class it cannot find, or (Iceberg's SQL extensions off) a CALL it cannot parse.
_RUNTIME_MISSING = {
    "Iceberg": re.compile(
        r"Failed to find the data source: iceberg\b"
        r"|catalog plugin class for catalog '[^']*': org\.apache\.iceberg\."
        r"|Syntax error at or near 'CALL'"
    ),
    "Hudi": re.compile(
        r"Failed to find the data source: (?:hudi|org\.apache\.hudi)\b"
        r"|catalog plugin class for catalog '[^']*': org\.apache\.spark\.sql\.hudi\."
    ),
}


def runtime_missing(exc: BaseException) -> SparkRuntimeMissing | None:
    """ "Spark at … has no Iceberg runtime" (or Hudi), if that is what ``exc`` says, naming what it needs."""
    text = str(exc)
    for table_format, sign in _RUNTIME_MISSING.items():
        if sign.search(text):
            from sinkadmin.services import SPARK_SQL_EXTENSIONS, pinned_spark_artifacts

            runtime = next(
                f"{group}:{artifact}:{version}"
                for group, artifact, version in pinned_spark_artifacts()
                if table_format.lower() in artifact
            )
            extension = next(e for e in SPARK_SQL_EXTENSIONS if table_format.lower() in e.lower())
            return SparkRuntimeMissing(
                f"Spark at {spark_endpoint()} has no {table_format} runtime ({_first_line(exc)}): it needs {runtime}"
                f" in spark.jars.packages and {extension} in spark.sql.extensions"
                " (manage.py spark_conf prints this project's Spark configuration)"
            )
    return None


def guarded[T](run: Callable[[], T], forget_session: Callable[[], None]) -> T:
    """``run()``, a Spark job or statement on a session; how a Spark failure reads.

    A session the server closed or dropped (idle beyond its timeout: a
    connector whose topic was quiet that long) is routine, not a failure:
    ``forget_session`` and run again, on the session joined again. An
    unreachable Spark raises SparkUnavailable (and the session is forgotten:
    a restarted Spark Connect server forgets every session), one without a
    table format's runtime SparkRuntimeMissing, and any other failure a
    RuntimeError with Spark's own cause first (``spark_failure``).
    """
    try:
        try:
            return run()
        except Exception as exc:
            if not session_lost(exc):
                raise
            log.info("the Spark Connect session was closed or lost (%s): joining again", _first_line(exc))
            forget_session()
            return run()
    except Exception as exc:
        if _unreachable(exc):
            forget_session()
            raise SparkUnavailable(f"Spark at {spark_endpoint()} is unreachable: {_first_line(exc)}") from exc
        if (missing := runtime_missing(exc)) is not None:
            raise missing from exc
        raise RuntimeError(spark_failure(exc)) from exc


def spark_endpoint() -> str:
    from django.conf import settings

    return str(settings.SPARK_REMOTE or settings.SPARK_MASTER)


def spark_session() -> Any:
    """The process's Spark session, created on first use and kept."""
    global _session  # noqa: PLW0603 - one session per process is the point
    with _session_lock:
        if _session is None:
            from django.conf import settings
            from pyspark.sql import SparkSession

            try:
                if settings.SPARK_REMOTE:
                    from sinkadmin.services import port_open, split_hostport

                    if not port_open(*split_hostport(settings.SPARK_REMOTE.removeprefix("sc://").split("/")[0])):
                        raise ConnectionRefusedError("nothing listens there")
                    session = _shared_session(settings.SPARK_REMOTE)
                else:
                    from sinkadmin.services import SPARK_DAEMON_PATH, python_daemon_conf, spark_conf

                    # PySpark gives executors the Python that PYSPARK_PYTHON
                    # names when the context starts (else "python3"): this
                    # interpreter, unless the operator says where executors have theirs.
                    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                    builder = SparkSession.builder.appName("sinkadmin").master(settings.SPARK_MASTER)
                    builder = builder.config("spark.ui.enabled", "false")
                    # (Progress bars on a worker's stderr would only clutter its log.)
                    builder = builder.config("spark.ui.showConsoleProgress", "false")
                    # Iceberg's and Hudi's runtimes, as the Spark Connect server has them.
                    for key, value in {**spark_conf(), **SESSION_CONF}.items():
                        builder = builder.config(key, value)
                    if daemon := python_daemon_conf(settings.SPARK_MASTER):
                        # (Executors of the driver's own JVM: the daemon's directory comes through their environment.)
                        for key, value in {**daemon, "spark.executorEnv.PYTHONPATH": str(SPARK_DAEMON_PATH)}.items():
                            builder = builder.config(key, value)
                    session = builder.getOrCreate()
                    session.sparkContext.addPyFile(str(code_archive()))
            except Exception as exc:
                raise SparkUnavailable(f"Spark at {spark_endpoint()} is unreachable: {_first_line(exc)}") from exc
            _session = session
        return _session


# A process tries shared sessions of these generations before giving up.
SESSION_GENERATIONS = 64


def shared_session_id(generation: int) -> str:
    """The Spark Connect session every process running this code joins (``generation`` 0 unless closed).

    A Spark Connect server gives each session its own Python daemon and
    workers (a session's artifacts are its workers' ``PYTHONPATH``). With a
    session per runner, each one paid a cold start of seconds and CPU-seconds
    (its first commit waited for it) and kept a daemon and up to one worker a
    core alive, each holding memory of its own: dozens of runners meant
    gigabytes of idle Python. Processes of one host or of many that run the
    same code join one session instead, and share its warm workers. The id
    derives from the code archive's name (its content's hash), so two
    versions of the code, during an upgrade, never share the workers' path
    (docs/benchmarks.md, "Measurements behind the runtime's design").
    """
    digest = hashlib.sha256(f"sinkadmin:{code_archive().name}:{generation}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _shared_session(remote: str) -> Any:
    """Join this code's session on the Spark Connect server at ``remote`` (see ``shared_session_id``).

    A session the server has closed (idle beyond its timeout, or released)
    cannot be joined again: the server answers SESSION_CLOSED, and the
    processes move on together to the next generation's id. (Spark 4's
    servers do; a Spark 3.5 server never closes a session, it drops it and
    answers the same id with a new, empty one: ``session_lost``.)
    """
    ids: list[str | None]
    if "session_id=" in remote:
        ids = [None]  # the operator chose the session
    else:
        ids = [shared_session_id(generation) for generation in range(SESSION_GENERATIONS)]
    for session_id in ids:
        url = remote if session_id is None else with_session_id(remote, session_id)
        session = connect(url)
        try:
            apply_session_conf(session)
        except Exception as exc:
            if "SESSION_CLOSED" in str(exc) and session_id is not None:
                continue
            raise
        _add_code(session)
        return session
    raise RuntimeError(f"the server has closed sessions of all {SESSION_GENERATIONS} generations of this code")


def connect(url: str, *, max_retries: int = 6, max_backoff_ms: int = 8000) -> Any:
    """A Spark Connect session of the server at ``url``, made without a round trip, whose client
    retries an unreachable server ``max_retries`` times (50 ms, growing fourfold, at most
    ``max_backoff_ms``): about 20 s by default, then a write fails and is retried. The client's own
    policy retries for ten minutes and more; a commit would wait that long to be told.

    Not ``SparkSession.builder.remote(url).create()``: Spark 3.5's builder sets ``spark.remote`` on
    the server as it creates the session, a round trip under that default policy, whose failure it
    only warns about. (Spark 3.5's client takes its policy as a dict; 4.x has
    ``set_retry_policies([DefaultPolicy(...)])`` instead.)
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    _share_release_pool()
    # (As the builder does: pyspark's functions then build Spark Connect's columns.)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = ConnectSession(connection=url)
    session.client._retry_policy.update(max_retries=max_retries, max_backoff=max_backoff_ms)
    ConnectSession._set_default_and_active_session(session)
    return session


@functools.cache
def _share_release_pool() -> None:
    """Keep pyspark's one pool of release calls open for every Spark Connect client of the process.

    Spark 3.5's client sends each result's release from a thread pool of its
    iterator class, shared by all clients of the process, and closing any
    client, or a session collected by the garbage collector in any thread,
    closes that pool for all of them: a query of another client that then
    releases its result fails with "ValueError: Pool not running" (SPARK-55406;
    fixed upstream by apache/spark#54189, which waits for the closing client's
    own releases instead, after 3.5). So the pool is never shut down here; its threads are daemons, and
    a closing client's pending releases end with its channel, which the server
    tolerates (it drops an unreleased result after its timeout).
    """
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator

    ExecutePlanResponseReattachableIterator.shutdown = classmethod(lambda cls: None)  # type: ignore[method-assign,assignment]


def apply_session_conf(session: Any) -> None:
    for key, value in SESSION_CONF.items():
        session.conf.set(key, value)


def is_connect(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect client's (else a session of this process's own JVM)."""
    return type(session).__module__.startswith("pyspark.sql.connect.")


def with_session_id(remote: str, session_id: str) -> str:
    """A Spark Connect URL (``sc://host:port[/;param=value...]``) that names the session to join."""
    base = remote if "/;" in remote else remote.rstrip("/") + "/"
    return f"{base};session_id={session_id}"


def _add_code(session: Any) -> None:
    """Give the session's Python workers this project's code (idempotent: the archive is named by its content)."""
    import grpc

    try:
        session.addArtifacts(str(code_archive()), pyfile=True)
    except grpc.RpcError as exc:
        # A Spark 3.5 server refuses an artifact whose name the session has
        # already ("Duplicate Artifact ... cannot be overwritten", in its log),
        # whatever its content, and its client hears only UNKNOWN, without
        # details. The name is the content's hash: another process of this
        # code added it to the shared session. (Had the add failed for
        # another reason, the job's Python workers cannot import the code,
        # and the session is joined again: session_lost.)
        if exc.code() != grpc.StatusCode.UNKNOWN or exc.details():
            raise
        log.debug("the session has this code already (%s)", code_archive().name)


def forget_session(session: Any) -> None:
    """Drop the process's session if it is ``session`` (one that lost its Spark)."""
    global _session  # noqa: PLW0603
    with _session_lock:
        if _session is session:
            _session = None


# A Python worker of a session that lacks this project's code (SHIPPED_PACKAGES).
_CODE_MISSING = re.compile(r"No module named '(?:" + "|".join(SHIPPED_PACKAGES) + r")[.']")


def session_lost(exc: BaseException) -> bool:
    """Whether the session no longer holds what this process gave it, and must be joined again.

    A Spark 4 server closes a session idle beyond its timeout and answers
    INVALID_HANDLE.SESSION_CLOSED. A Spark 3.5 server keeps at most 100
    sessions, each for an hour after its last use, and then drops it
    silently: the same session id comes back as a new, empty session (its
    server, restarted, does the same), without this code (the job's Python
    workers cannot import it) or SESSION_CONF. Joined again, the session
    gets both.
    """
    text = str(exc)
    return "INVALID_HANDLE.SESSION_CLOSED" in text or _CODE_MISSING.search(text) is not None


def _unreachable(exc: BaseException) -> bool:
    text = str(exc)
    return any(
        sign in text
        for sign in ("StatusCode.UNAVAILABLE", "failed to connect", "Connection refused", "INVALID_HANDLE.SESSION")
    )


@functools.cache
def code_archive() -> Path:
    """This project's Python packages as one zip, for Spark's Python workers (named by its content)."""
    root = Path(__file__).resolve().parent.parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in SHIPPED_PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                # Fixed timestamps: the same code gives the same archive (and name).
                info = zipfile.ZipInfo(str(path.relative_to(root)), date_time=(2020, 1, 1, 0, 0, 0))
                archive.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    target = Path(tempfile.gettempdir()) / f"sinkadmin-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.exists():
        partial = target.with_suffix(f".{uuid.uuid4().hex}.tmp")
        partial.write_bytes(data)
        partial.replace(target)
    return target


def spark_failure(exc: BaseException) -> str:
    """Spark's own cause first (the Python error in a worker, or the JVM's message), then the rest."""
    text = str(exc)
    if "== SQL ==" in text:
        # A statement Spark could not parse: its message, before the statement.
        return f"Spark job failed: {_first_line(text.split('== SQL ==', maxsplit=1)[0])}"
    # (Spark 4 ends a relayed error with a line of its SQLSTATE: not the cause.)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("SQLSTATE:")]
    cause = next(
        (line for line in reversed(lines) if not line.startswith(("File ", "at ", "^", "Traceback", "JVM stacktrace"))),
        text,
    )
    if "Traceback" in text:
        # A Python worker's exception: its last line is the error itself.
        python = [line for line in lines if not line.startswith(("File ", "at ", "^", "Traceback"))]
        cause = next((line for line in reversed(python) if ":" in line and not line.startswith("JVM")), cause)
    return f"Spark job failed: {cause}"


def _first_line(exc: BaseException | str) -> str:
    """What an error says, in one line: a gRPC call's status and details (its text is a multi-line repr whose
    first line, "<_MultiThreadedRendezvous of RPC that terminated with:", says nothing), else its first line."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if type(exc).__module__.startswith("grpc") and callable(code) and callable(details):
        return f"{getattr(code(), 'name', code())}: {details()}"
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def read_staged_chunks(path: Path, chunk_bytes: int) -> Iterator[RecordChunk]:
    """A raw staging file's records in chunks of about ``chunk_bytes``, as the participants hand them over."""
    staged = pq.ParquetFile(path)
    for group in range(staged.num_row_groups):
        rows = staged.read_row_group(
            group, columns=["topic", "partition", "offset", "timestamp", "key", "value", "error"]
        )
        size = staged.metadata.row_group(group).total_byte_size
        step = max(1, rows.num_rows * chunk_bytes // max(1, size))
        topic, partition = rows.column("topic")[0].as_py(), rows.column("partition")[0].as_py()
        for first in range(0, rows.num_rows, step):
            piece = rows.slice(first, step)
            n = piece.num_rows
            yield RecordChunk(
                topic,
                partition,
                piece.column("offset").to_pylist(),
                piece.column("timestamp").to_pylist(),
                piece.column("key").to_pylist(),
                piece.column("value").to_pylist(),
                [None] * n,  # headers only travel to the dead-letter topic, from the staged file itself
                piece.column("error").to_pylist(),
            )


class StagedJob(Protocol):
    """A task's share of one commit as Spark runs it: each Spark task runs ``decode`` over a group of ``staged``.

    Pickled with the job to Spark's Python workers; ``decode`` returns a
    JSON-able outcome of one staged partition."""

    @property
    def staged(self) -> tuple[StagedPartition, ...]: ...

    def decode(self, staged: StagedPartition) -> dict[str, Any]: ...


class UnitJob(Protocol):
    """Work split in units, as Spark runs it: each Spark task runs ``run_unit(n)`` for the units of its
    group (``unit_groups``; the job is pickled with the function)."""

    @property
    def count(self) -> int: ...

    def run_unit(self, index: int) -> dict[str, Any]: ...


class UnitRunner:
    """Runs a coordinator's UnitJob (an Iceberg upsert's units) where the connector's data
    plane runs: as one Spark job, or (the arrow plane) in this process. Spark out of reach is an outage
    of the sink (SinkUnavailable): the prepared commit is rolled forward once it answers."""

    def __init__(self, config: SinkConfig, spark: SparkJobs | None = None) -> None:
        self.config = config
        self._spark = spark

    def __call__(self, job: UnitJob) -> list[dict[str, Any]]:
        from workers.coordinator import SinkUnavailable

        if self.config.writer != "spark":
            return [job.run_unit(n) for n in range(job.count)]
        if self._spark is None:
            self._spark = SparkJobs()
        try:
            return self._spark.run_units(job)
        except SparkUnavailable as exc:
            raise SinkUnavailable(str(exc)) from exc


UNIT_OUTCOME = pa.schema([("unit", pa.int64()), ("outcome", pa.string())])


def raised_briefly(
    function: Callable[..., Iterator[pa.RecordBatch]],
) -> Callable[..., Iterator[pa.RecordBatch]]:
    """A function for Spark's Python workers whose error reaches the client whole.

    Spark 3.5's Connect server cuts the text of an error it relays to the
    client (its end becomes "..."), and a Python worker's error is its
    traceback, the error itself last: a storage outage deep in
    pyarrow arrived as "OSError: When testing for existence of buck...",
    which no check can read. Raised again here, it keeps its class and
    message with a traceback of one frame.
    """

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        try:
            yield from function(*args, **kwargs)
        except Exception as exc:
            try:
                brief = type(exc)(*exc.args)
            except Exception:
                brief = RuntimeError(f"{type(exc).__name__}: {exc}")
            raise brief from None

    return run


@raised_briefly
def run_job_units(
    job: UnitJob, groups: tuple[tuple[int, ...], ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The function Spark's Python workers run for a UnitJob (``mapInArrow`` over ``range(len(groups))``,
    a Spark task per group of units): one outcome row per unit."""
    _freeze_imports()
    for batch in batches:
        for group in batch.column("id").to_pylist():
            for n in groups[group]:
                outcome = json.dumps(job.run_unit(n))
                yield pa.RecordBatch.from_pylist([{"unit": n, "outcome": outcome}], schema=UNIT_OUTCOME)


# How many modules this Python worker had when it last froze its objects.
_frozen_modules = 0


def _freeze_imports() -> None:
    """Take what this Python worker has imported out of the garbage collector's reach, again whenever
    it has imported more since (called as a Spark task starts).

    PySpark's daemon runs ``gc.collect()`` in a reused worker after every
    Spark task. Over the modules the decoder imports (pyarrow, pyiceberg,
    pydantic) a full collection cost most of the Python workers' CPU in a
    commit's job (profiled with py-spy); with the imports frozen it walks
    only what the task itself left. Frozen only once, at the warm-up job,
    the many modules a worker's first decode imports (Parquet's, pyiceberg's
    I/O) were walked after every later task, a large part of the Python
    workers' CPU per commit beyond the records themselves. As a task
    starts, the garbage of the ones before it is gone (the daemon collected
    it), so what is frozen is what the imports keep, with the few objects of
    this task's start; that happens only when modules were imported since, a
    few times in a worker's life (docs/benchmarks.md, "Measurements behind
    the runtime's design").
    """
    global _frozen_modules  # noqa: PLW0603 - once per new batch of imports in this worker process
    if len(sys.modules) != _frozen_modules:
        gc.freeze()
        _frozen_modules = len(sys.modules)


def _imported(modules: Sequence[str], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A warm-up job's function: the Python worker imports what decoding needs (``modules``), and
    answers one row per Spark task (so the job's rows count the tasks it ran)."""
    for module in modules:
        importlib.import_module(module)

    _freeze_imports()
    answered = False
    for batch in batches:
        if not answered and batch.num_rows:
            answered = True
            yield batch.slice(0, 1)


@raised_briefly
def decode_staged_partitions(
    job: StagedJob, groups: tuple[tuple[int, ...], ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The function Spark's Python workers run (``mapInArrow`` over ``range(len(groups))``, a
    Spark task per group of staged partitions): one outcome row per staged partition."""
    _freeze_imports()
    for batch in batches:
        for n in batch.column("id").to_pylist():
            for index in groups[n]:
                staged = job.staged[index]
                outcome = json.dumps(job.decode(staged))
                yield pa.RecordBatch.from_pylist(
                    [{"topic": staged.topic, "partition": staged.partition, "outcome": outcome}], schema=OUTCOME_SCHEMA
                )


def balanced_groups(weights: Sequence[int], count: int) -> tuple[tuple[int, ...], ...]:
    """The indices of ``weights`` in at most ``count`` groups of about equal weight: the heaviest
    first, each into the group with the least weight yet (longest processing time first), so that
    groups worked on side by side end together."""
    groups: list[list[int]] = [[] for _ in range(max(1, min(count, len(weights))))]
    load = [0] * len(groups)
    for index in sorted(range(len(weights)), key=lambda i: -weights[i]):
        lightest = load.index(min(load))
        groups[lightest].append(index)
        load[lightest] += weights[index]
    return tuple(tuple(sorted(group)) for group in groups if group)


def unit_groups(count: int, cores: int) -> tuple[tuple[int, ...], ...]:
    """A UnitJob's ``count`` units in at most ``cores`` groups, a Spark task each, for the reason
    ``task_groups`` gives: an upsert commit's units (a live file's keys looked up, a small delete file
    written) take milliseconds, and a Spark task each cost more than the work. Units are dealt in turn,
    so that neighbours (the files of one partition, of like size) go to different groups."""
    return balanced_groups([1] * count, cores)


def task_groups(staged: Sequence[StagedPartition], cores: int) -> tuple[tuple[int, ...], ...]:
    """The staged partitions (by index) in at most ``cores`` groups of about equal records, a Spark task each.

    A Spark task has a cost of its own, whatever it decodes: a job of eight
    Python tasks cost more Spark CPU than a job of one, and took far longer
    on two cores (four rounds of tasks); a commit's job with a task per
    staged partition paid it eight times where two tasks kept both cores as
    busy. So a job has a task per core, each decoding its group in turn, the
    groups balanced by records (``balanced_groups``). On a cluster with a
    core per partition it is a task each (docs/benchmarks.md, "Measurements
    behind the runtime's design").
    """
    return balanced_groups([s.records for s in staged], cores)


class SparkJobs:
    """Runs a sink's jobs on the process's Spark session: a ``StagedJob`` (a task's share of a commit,
    decoded by Spark's Python workers) or a ``UnitJob`` (a coordinator's work in units). A session Spark
    dropped is joined again and the job retried (``guarded``); Spark out of reach is ``SparkUnavailable``."""

    def __init__(self, session: Any = None, decoder_modules: Sequence[str] = ("workers.json_decoder",)) -> None:
        self._session = session
        # What the sink's Python workers import to decode (imported by the warm-up job).
        self.decoder_modules = tuple(decoder_modules)
        self._cores: int | None = None
        # The warm-up and a first write that came before it was done ask at once: one job learns.
        self._learning_cores = threading.Lock()

    @property
    def spark(self) -> Any:
        if self._session is None:
            self._session = spark_session()
        return self._session

    def warm_up(self) -> None:
        """Connect, and have Spark's Python workers import the decoder, before the first commit
        needs them: the first job of a session takes seconds longer than the next ones
        (docs/benchmarks.md, "Measurements behind the runtime's design")."""
        _ = self.cores

    @property
    def cores(self) -> int:
        """How many Spark tasks Spark runs at once for this session: its default parallelism.

        Learnt with the warm-up job, which runs a task per core (``range``
        without a partition count splits by the default parallelism), and
        learnt again with a new session.
        """
        with self._learning_cores:
            if self._cores is None:
                from pyspark.sql.types import LongType, StructField, StructType

                frame = self.spark.range(0, 1 << 16)
                imported = functools.partial(_imported, self.decoder_modules)
                answers = frame.mapInArrow(imported, StructType([StructField("id", LongType())])).collect()
                self._cores = max(1, len(answers))
            return self._cores

    def run(self, job: StagedJob) -> dict[tuple[str, int], dict[str, Any]]:
        """One Spark job over the staged partitions; each one's outcome, by (topic, partition)."""
        collected = self._guarded(lambda: self._collect(job))
        return {(r["topic"], r["partition"]): json.loads(r["outcome"]) for r in collected}

    def run_units(self, job: UnitJob) -> list[dict[str, Any]]:
        """One Spark job over a job's units (a Spark task per group of them: ``unit_groups``); their
        outcomes, in unit order."""
        collected = self._guarded(lambda: self._collect_units(job))
        return [json.loads(r["outcome"]) for r in sorted(collected, key=lambda r: r["unit"])]

    def run_on_session[T](self, work: Callable[[Any], T]) -> T:
        """``work(session)``: a sink's own statements on the session (a Hudi write), guarded as a job is
        (run again on a session joined again when Spark dropped it, so ``work`` must be safe to repeat)."""
        return guarded(lambda: work(self.spark), self._forget_session)

    def _guarded(self, collect: Callable[[], list[Any]]) -> list[Any]:
        return guarded(collect, self._forget_session)

    def _forget_session(self) -> None:
        forget_session(self._session)
        self._session = None
        self._cores = None  # (a new session may have other executors)

    def _collect(self, job: StagedJob) -> list[Any]:
        from pyspark.sql.pandas.types import from_arrow_schema

        # A Spark task per group of staged partitions (task_groups), in one
        # stage: the staged partitions travel with the function, the rows
        # only number the groups. (The output schema is built here, not given
        # as DDL text: over Spark Connect, text is parsed by the server, a round trip.)
        groups = task_groups(job.staged, self.cores)
        frame = self.spark.range(0, len(groups), 1, len(groups))
        decode = functools.partial(decode_staged_partitions, job, groups)
        return list(frame.mapInArrow(decode, from_arrow_schema(OUTCOME_SCHEMA)).collect())

    def _collect_units(self, job: UnitJob) -> list[Any]:
        from pyspark.sql.pandas.types import from_arrow_schema

        groups = unit_groups(job.count, self.cores)
        frame = self.spark.range(0, len(groups), 1, len(groups))
        run = functools.partial(run_job_units, job, groups)
        return list(frame.mapInArrow(run, from_arrow_schema(UNIT_OUTCOME)).collect())
