"""Local services for development and tests: the JVM artifacts they run on, a
Spark Connect server and a Spark standalone cluster (the embedded Kafka broker
is sinkadmin.kafka_broker).

Production points KAFKA_BOOTSTRAP_SERVERS and SPARK_REMOTE at real clusters
and starts neither.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil


class ServiceError(Exception):
    pass


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def split_hostport(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]"), int(port)


def listening_process(port: int) -> psutil.Process | None:
    """The local process listening on ``port`` (the broker, whoever started it), if any."""
    for connection in psutil.net_connections(kind="tcp"):
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port and connection.pid:
            return psutil.Process(connection.pid)
    return None


@dataclass
class ManagedProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is not None:
            return
        # Each service runs in its own process group; signal the group so
        # children (the JVM under spark-submit) go too.
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


class ProcessEvents(Protocol):
    """Where ``Restarted`` reports a child's life (``make run`` records it for the workers page)."""

    def started(self, service: ManagedProcess) -> None: ...

    def exited(self, service: ManagedProcess) -> None: ...


class Restarted:
    """A child of ``make run`` started again when it dies, after a back-off that doubles with each death
    (1 s up to a minute) and starts over once the child has lived a minute: a Spark Connect server or a
    worker that crashes comes back, and the rest of the stack goes on serving meanwhile."""

    MAX_BACKOFF_S = 60.0
    HEALTHY_AFTER_S = 60.0

    def __init__(
        self, start: Callable[[], ManagedProcess], say: Callable[[str], None], events: ProcessEvents | None = None
    ) -> None:
        self.start = start
        self.say = say
        self.events = events
        self.current = start()
        self.started_at = time.monotonic()
        self.deaths = 0
        self.due: float | None = None
        if events is not None:
            events.started(self.current)

    @property
    def name(self) -> str:
        return self.current.name

    def check(self, now: float | None = None) -> None:
        """Notice a death (and schedule the restart), or restart when its back-off is over."""
        now = time.monotonic() if now is None else now
        if self.due is None:
            if self.current.process.poll() is None:
                if now - self.started_at >= self.HEALTHY_AFTER_S:
                    self.deaths = 0
                return
            backoff = min(self.MAX_BACKOFF_S, 2.0**self.deaths)
            self.deaths += 1
            self.due = now + backoff
            self.say(
                f"{self.name} exited ({self.current.process.returncode}); restarting in {backoff:.0f} s "
                f"(see {self.current.log_path})"
            )
            if self.events is not None:
                self.events.exited(self.current)
        elif now >= self.due:
            try:
                self.current = self.start()
            except ServiceError as exc:
                backoff = min(self.MAX_BACKOFF_S, 2.0**self.deaths)
                self.deaths += 1
                self.due = time.monotonic() + backoff
                self.say(f"{self.name} did not start again: {exc}; next try in {backoff:.0f} s")
                return
            self.started_at, self.due = time.monotonic(), None
            self.say(f"{self.name} restarted")
            if self.events is not None:
                self.events.started(self.current)

    def stop(self) -> None:
        self.due = None
        self.current.stop()


def serve_in_foreground(service: ManagedProcess) -> None:
    """Wait until SIGTERM or SIGINT (Ctrl-C), then stop ``service``; a service that exits by itself
    first is an error naming its log."""
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping and service.process.poll() is None:
        time.sleep(0.5)
    service.stop()
    if not stopping:
        raise ServiceError(f"{service.name} exited with {service.process.returncode}: see {service.log_path}")


def spawn(
    name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> ManagedProcess:
    """``argv`` in a session of its own, its output in ``log_dir/<name>.log``, in ``cwd`` (else this one)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    return ManagedProcess(name, process, log_path)


def wait_ready(service: ManagedProcess, host: str, port: int, timeout: float, *, dump_threads: bool = False) -> None:
    """Wait until ``service`` listens on ``host:port``; else stop it and raise with its log's tail.
    ``dump_threads``: the service is a JVM of its own (not a launcher script), so before it is stopped
    it is sent SIGQUIT, and its threads' stacks at the time show in the log where it was stuck."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            raise ServiceError(f"{service.name} exited with {service.process.returncode}; {log_tail(service)}")
        if port_open(host, port):
            return
        time.sleep(0.2)
    tail = log_tail(service)
    if dump_threads and service.process.poll() is None:
        service.process.send_signal(signal.SIGQUIT)
        time.sleep(2)
        tail += "\n(its threads' stacks follow in the log)"
    service.stop()
    raise ServiceError(f"{service.name} did not listen on {host}:{port} within {timeout:.0f}s; {tail}")


def log_tail(service: ManagedProcess, chars: int = 4000) -> str:
    return f"the tail of {service.log_path}:\n{service.log_path.read_text(errors='replace')[-chars:]}"


# JVM artifacts pinned by jvm/<name>/pom.xml, resolved from Maven Central by
# scripts/resolve-jars (make install) into var/jars/<name>/.
JARS_DIR = Path(__file__).resolve().parent.parent / "var" / "jars"
JVM_DIR = Path(__file__).resolve().parent.parent / "jvm"


def jvm_classpath(name: str) -> list[Path]:
    """The jars of ``jvm/<name>/pom.xml``, as ``make install`` resolved them: refused when they were
    never resolved, or resolved before the pom last changed (its pins may name other versions)."""
    folder = JARS_DIR / name
    marker, pom = folder / ".resolved", JVM_DIR / name / "pom.xml"
    if not marker.exists() or marker.stat().st_mtime < pom.stat().st_mtime:
        raise ServiceError(f"{folder} does not hold {pom}'s jars: run `make install` (scripts/resolve-jars {name})")
    return sorted(folder.glob("*.jar"))


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def java_available() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


# Spark's Python daemon with the data plane's libraries imported before it
# forks workers (sinkadmin/spark_daemon/sinkadmin_spark_daemon.py says why).
SPARK_DAEMON_PATH = Path(__file__).resolve().parent / "spark_daemon"
SPARK_DAEMON_MODULE = "sinkadmin_spark_daemon"


def python_daemon_conf(master: str) -> dict[str, str]:
    """Spark configuration that starts Python workers from this project's daemon, for a Spark whose
    executors run on this machine (``local`` masters; a cluster's executors lack the file), unless
    ``SINKADMIN_SPARK_PRELOAD_PYTHON`` is false. The daemon's directory must be on the executors'
    ``PYTHONPATH`` too: the JVM's environment for a Spark Connect server (which ignores
    ``spark.executorEnv``), ``spark.executorEnv.PYTHONPATH`` for a session of its own."""
    from django.conf import settings

    if not master.startswith("local") or not settings.SPARK_PRELOAD_PYTHON:
        return {}
    return {"spark.python.daemon.module": SPARK_DAEMON_MODULE}


# The JVM artifacts a Spark of this project loads beside pyspark's own jars, pinned in a checked-in pom
# and copied by Maven (``scripts/resolve-jars spark``, make install) into var/jars/spark/.
SPARK_POM = JVM_DIR / "spark" / "pom.xml"
# The Spark Connect server: pyspark 3.5's wheel does not bundle it (4.x does).
SPARK_CONNECT_ARTIFACT = "spark-connect_"
# Iceberg's SQL extensions (CALL <catalog>.system.*, ALTER TABLE ... WRITE ORDERED BY) and Hudi's (its
# SQL, CALL <procedure>). Hudi's parser comes last, so it sees a statement first: it takes the CALLs of
# its own procedures and hands every other statement, Iceberg's CALLs too, to Iceberg's parser.
SPARK_SQL_EXTENSIONS = (
    "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
)


@functools.cache
def pinned_spark_artifacts() -> tuple[tuple[str, str, str], ...]:
    """(groupId, artifactId, version) of each artifact jvm/spark/pom.xml pins, properties resolved."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(SPARK_POM).getroot()
    declared = root.find("m:properties", ns)
    properties = {p.tag.split("}")[1]: p.text or "" for p in (declared if declared is not None else [])}

    def text(element: ET.Element, tag: str) -> str:
        value = element.findtext(f"m:{tag}", default="", namespaces=ns)
        return re.sub(r"\$\{([^}]+)\}", lambda m: properties[m.group(1)], value)

    return tuple(
        (text(d, "groupId"), text(d, "artifactId"), text(d, "version"))
        for d in root.findall("m:dependencies/m:dependency", ns)
    )


def spark_jars(*, server: bool) -> list[Path]:
    """The pinned jars a Spark of this project loads (the Spark Connect server's own only for a ``server``),
    and our Hudi conflict check (jvm/hudi-fence)."""
    pinned = [jar for jar in jvm_classpath("spark") if server or not jar.name.startswith(SPARK_CONNECT_ARTIFACT)]
    return [*pinned, *jvm_classpath("hudi-fence")]


# Spark's list-valued properties: the user's entries and the project's are joined, not replaced.
SPARK_LIST_PROPERTIES = ("spark.jars", "spark.sql.extensions")


def spark_defaults() -> dict[str, str]:
    """The properties of ``$SPARK_CONF_DIR/spark-defaults.conf``, Spark's own file of defaults: what a Spark
    user sets once for every Spark they start, above all the storage their tables are on
    (``spark.hadoop.fs.s3a.*``). spark-submit reads the file only when no ``--properties-file`` is given, so
    the Spark Connect server make run starts has them merged into its own (``start_spark_connect``); the
    workers read the same file to reach that storage themselves (``workers.storage``)."""
    from connectors.ui.config_text import parse_properties

    conf_dir = os.environ.get("SPARK_CONF_DIR")
    path = Path(conf_dir) / "spark-defaults.conf" if conf_dir else None
    if path is None or not path.is_file():
        return {}
    # (Java properties, as Spark reads the file: the parser that reads connector.properties files.)
    return {key: value.strip() for key, value in parse_properties(path.read_text()).items()}


def with_spark_defaults(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` over the user's ``spark_defaults()``: the project's settings win where both set one (Hudi
    needs Kryo, the sink its catalogs), and list-valued ones (jars, SQL extensions) are joined."""
    defaults = spark_defaults()
    merged = {**defaults, **conf}
    for key in SPARK_LIST_PROPERTIES:
        entries = [e for value in (conf.get(key), defaults.get(key)) if value for e in value.split(",")]
        if entries:
            merged[key] = ",".join(dict.fromkeys(e.strip() for e in entries if e.strip()))
    return merged


def spark_conf(*, server: bool = False) -> dict[str, str]:
    """The Spark configuration of every Spark this project starts (the Spark Connect server, a worker
    process's own session): Iceberg's runtime, Hudi's bundle and the PostgreSQL JDBC driver loaded, their
    SQL extensions on, and Kryo as Hudi asks."""
    return {
        "spark.jars": ",".join(str(path) for path in spark_jars(server=server)),
        "spark.sql.extensions": ",".join(SPARK_SQL_EXTENSIONS),
        # Hudi's writer refuses Java serialization; its registrar registers Hudi's classes with Kryo.
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
        # Hudi's tables by name (spark_catalog); Iceberg's tables live in catalogs of their own
        # (spark.sql.catalog.<name>), and format("iceberg") reads a metadata location without one.
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
    }


# Spark 3.5's Spark Connect server listens on every interface (spark.connect.grpc.binding.address came in
# 4.0), and whoever reaches its port runs code in it. Our interceptor (jvm/connect-guard, built by make
# install into var/jars/connect-guard/) refuses every peer not on a loopback address with PERMISSION_DENIED
# (docs/decisions/003-spark-connect-loopback-guard.md).
CONNECT_GUARD_INTERCEPTOR = "sinkadmin.spark.LoopbackOnlyInterceptor"


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (127.0.0.0/8, ::1); "" and 0.0.0.0 are not."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP) if host else []
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def connect_guard_conf(host: str) -> dict[str, str]:
    """The interceptor that refuses every peer not on a loopback address, for a Spark Connect server asked
    to listen on ``host``; none where ``host`` is not a loopback address: whoever binds elsewhere means to
    be reached from other machines (on Spark 3.5 such a server takes every peer that reaches its port)."""
    if not is_loopback(host):
        return {}
    return {
        "spark.jars": ",".join(str(path) for path in jvm_classpath("connect-guard")),
        "spark.connect.grpc.interceptor.classes": CONNECT_GUARD_INTERCEPTOR,
    }


def start_spark_connect(
    port: int,
    log_dir: Path,
    *,
    master: str = "local[*]",
    driver_memory: str = "2g",
    host: str = "127.0.0.1",
    catalogs: dict[str, str] | None = None,
) -> ManagedProcess:
    """A Spark Connect server from pyspark's own launcher, listening on ``host:port`` (its Python
    workers fork from this project's daemon where ``python_daemon_conf`` says), with the Spark
    configuration of ``catalogs`` (``spark.sql.catalog.<name>.*``: the sink's tables by name).

    Spark 3.5 listens on every interface whatever ``host`` says; for a loopback ``host`` the server
    answers only peers on a loopback address (``connect_guard_conf``), for any other it answers all,
    and a local master's driver binds its own ports to ``host`` too.

    The configuration goes to spark-submit in a properties file only the
    owner reads (a catalog's password would show in the process list)."""
    if not java_available():
        raise ServiceError("Java 17+ is needed for Spark: install a JDK (e.g. apt-get install openjdk-17-jre-headless)")
    if port_open(host, port):
        raise ServiceError(f"port {host}:{port} is already in use; set SINKADMIN_SPARK_CONNECT_PORT to a free port")
    home = spark_home()
    daemon = python_daemon_conf(master)
    conf = {**spark_conf(server=True), **daemon}
    guard = connect_guard_conf(host)
    if guard:
        conf = {**conf, **guard, "spark.jars": ",".join((conf["spark.jars"], guard["spark.jars"]))}
        if master.startswith("local"):
            conf.update({"spark.driver.bindAddress": host, "spark.driver.host": host})
    conf.update(catalogs or {})
    conf = with_spark_defaults(conf)
    properties = log_dir / "spark-connect.properties"
    log_dir.mkdir(parents=True, exist_ok=True)
    properties.touch(mode=0o600)
    properties.chmod(0o600)
    properties.write_text("".join(f"{key} {value}\n" for key, value in conf.items()))
    argv = [
        str(home / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        master,
        "--driver-memory",
        driver_memory,
        "--conf",
        f"spark.connect.grpc.binding.address={host}",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.ui.enabled=false",
        "--properties-file",
        str(properties),
        "spark-internal",
    ]
    # Spark's Python workers (the data plane's decoder) run this interpreter,
    # which has the project's requirements; the code itself comes with each
    # session (workers.spark_writer.code_archive).
    env = {"SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    if daemon:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SPARK_DAEMON_PATH), os.environ.get("PYTHONPATH")) if p)
    # In its log directory: the server keeps its sessions' artifacts (and Spark its
    # spark-warehouse/) under the directory it runs in.
    service = spawn("spark-connect", argv, log_dir, env=env, cwd=log_dir)
    wait_ready(service, host, port, timeout=120)
    return service


def start_spark_standalone(
    log_dir: Path,
    *,
    workers: int = 2,
    port: int = 7177,
    worker_cores: int = 1,
    worker_memory: str = "1g",
    host: str = "127.0.0.1",
    env: dict[str, str] | None = None,
) -> tuple[str, list[ManagedProcess]]:
    """A Spark standalone cluster on this machine, from pyspark's own launcher (``bin/spark-class``):
    a master and ``workers`` workers. Returns the master's URL and the processes, master first.

    Executors run in their worker's process group and environment (``env``
    added), so stopping a worker stops its executors.
    """
    if not java_available():
        raise ServiceError("Java 17+ is needed for Spark: install a JDK (e.g. apt-get install openjdk-17-jre-headless)")
    if port_open(host, port):
        raise ServiceError(f"port {host}:{port} is already in use by something else than a new Spark master")
    home = spark_home()
    spark_class = str(home / "bin" / "spark-class")
    base_env = {"SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable, **(env or {})}
    master_url = f"spark://{host}:{port}"
    master = spawn(
        "spark-master",
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            host,
            "--port",
            str(port),
            "--webui-port",
            "0",
        ],
        log_dir,
        env=base_env,
    )
    started = [master]
    try:
        wait_ready(master, host, port, timeout=120)
        for n in range(workers):
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", host, "--webui-port", "0"]
            argv += ["--cores", str(worker_cores), "--memory", worker_memory, master_url]
            started.append(spawn(f"spark-worker-{n + 1}", argv, log_dir, env=base_env))
        _wait_for_log(started[1:], "Successfully registered with master", timeout=120)
    except BaseException:
        for process in reversed(started):
            process.stop()
        raise
    return master_url, started


def _wait_for_log(services: list[ManagedProcess], line: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(services)
    while waiting and time.monotonic() < deadline:
        for service in list(waiting):
            if service.process.poll() is not None:
                tail = service.log_path.read_text(errors="replace")[-2000:]
                raise ServiceError(f"{service.name} exited with {service.process.returncode}; log tail:\n{tail}")
            if line in service.log_path.read_text(errors="replace"):
                waiting.remove(service)
        time.sleep(0.2)
    if waiting:
        raise ServiceError(f"{', '.join(s.name for s in waiting)}: no {line!r} within {timeout:.0f}s")


def _celery() -> list[str]:
    import sys

    return [sys.executable, "-m", "celery", "-A", "sinkadmin"]


# `make run`'s connectors worker: twenty connectors of two tasks (a
# coordinator and two tasks each, a slot apiece). A slot becomes a pool
# process when a runner needs it (see connector_worker_argv); a runner at
# rest costs its memory and threads and one Postgres connection
# (bench/runner_cost.py; docs/benchmarks.md, "Measurements behind the
# runtime's design").
DEFAULT_WORKER_SLOTS = 64

# Pool processes a connectors worker keeps while no runner needs them.
SLOTS_AT_REST = 2


def connector_worker_argv(hostname: str, slots: int, loglevel: str = "INFO") -> list[str]:
    """A worker for coordinators and tasks.

    Each slot is a process of its own (Celery's prefork pool): a task stages
    and decodes records, CPU-bound Python work, and runners sharing one
    interpreter would share its GIL. The fair scheduling strategy hands a
    message only to a process that is free: slots run for hours.

    The pool grows to ``slots`` as runners are asked for and gives back an
    idle process after Celery's autoscale keep-alive (30 s), down to
    SLOTS_AT_REST. With every slot's process forked at start, idle but for
    the runners of one connector (no CPU, no wake-ups of their own), those
    runners ran slower than the same runners as processes of their own, and
    used more CPU for the same records; with a small pool, or one that grows
    with its runners, they kept pace (bench/sink_throughput.py, make run's
    rate against run_connector's paired by round: "Measurement" in
    docs/decisions/006-worker-pool-grows-with-its-runners.md; docs/spark.md).
    """
    return [
        *_celery(),
        "worker",
        "-Q",
        "connectors",
        "--pool",
        "prefork",
        "-O",
        "fair",
        "--autoscale",
        f"{slots},{min(slots, SLOTS_AT_REST)}",
        "--hostname",
        hostname,
        "--loglevel",
        loglevel,
    ]


def supervisor_worker_argv(hostname: str, loglevel: str = "INFO") -> list[str]:
    """The supervisor's own worker: busy connector slots can never starve it."""
    return [*_celery(), "worker", "-Q", "supervisor", "--pool", "solo", "--hostname", hostname, "--loglevel", loglevel]


def beat_argv(schedule: Path, loglevel: str = "INFO") -> list[str]:
    return [*_celery(), "beat", "--loglevel", loglevel, "--schedule", str(schedule)]
