#!/usr/bin/env python
"""Does a task's write thread wait for the GIL behind the thread that stages records? (docs/spark.md,
"A commit's end leaves little to do...")

A task reads ahead on its main thread while its write thread writes the
commit that ended (``workers.participant``). The write thread mostly waits
on the network (the catalog's database, Spark Connect's gRPC) and needs the
GIL back at every answer; a thread that holds the GIL lets go of it when it
calls into C code that releases it, or else when Python's switch interval
(5 ms) is up. So a write of a hundred round trips could wait hundreds of
milliseconds beside a thread that never lets go.

Measured here, for switch intervals of 5 ms (Python's, the baseline), 1 and
0.5 ms: the wall time of ``--round-trips`` database round trips (``SELECT 1``
to the project's Postgres, as the SQL catalog makes them), the median of
``--rounds``,
- alone;
- beside a thread staging records as a task reads ahead through a backlog:
  fetched batches of 5,000 messages (~1 KB JSON values, the sink
  benchmark's) in runs of 8 partitions, each run a ``RecordChunk`` (the
  accessor calls of ``TaskRunner._chunk_of``) that the partition's
  ``StagingBuffer`` spills to its ``RawStagingFile``, a 1 s commit's worth at
  a time (no broker: the fetch itself is librdkafka's, outside the GIL);
- beside a thread decoding JSON with ``json.loads`` in a loop, which never
  lets go of the GIL on its own (the mechanism, not a task).

Prints the figures with their ratios to the round trips alone at the same
interval and writes them to bench/results/switch_interval.json. Needs the
project's Postgres (``make run``'s or ``scripts/start-services``), nothing else.

    .venv/bin/python bench/switch_interval.py [--round-trips 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import KafkaError
from django.db import connection
from sink_throughput import chunk_of_messages
from spark_decoding import ROOT, values_of  # (the benchmarks' records; sets up Django)

from connectors.config.definitions import SHARED_KEYS
from workers.staging import RawStagingFile, StagingBuffer

INTERVALS_S = (0.005, 0.001, 0.0005)
# A task's fetch (TaskRunner's consume batch), over the partitions of a task
# in the sink benchmark, and a 1 s commit's worth of them there.
BATCH_RECORDS, PARTITIONS, BATCHES_PER_COMMIT = 5_000, 8, 10


def round_trips(count: int) -> float:
    """Seconds for ``count`` database round trips on this thread."""
    began = time.perf_counter()
    with connection.cursor() as cursor:
        for _ in range(count):
            cursor.execute("SELECT 1")
            cursor.fetchone()
    return time.perf_counter() - began


class Message:
    """A fetched record as confluent-kafka hands it over: its fields through methods."""

    __slots__ = ("_key", "_offset", "_partition", "_value")

    def __init__(self, partition: int, offset: int, key: bytes, value: bytes | None) -> None:
        self._partition, self._offset, self._key, self._value = partition, offset, key, value

    def error(self) -> KafkaError | None:
        return None

    def topic(self) -> str:
        return "bench"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)


def staging(stop: threading.Event) -> None:
    """Stage records as a task's main thread does while reading ahead through a backlog, until ``stop``.
    A fetch hands over a batch of messages in runs of one partition
    each; each run becomes a ``RecordChunk`` (the accessor calls of ``TaskRunner._chunk_of``) that the
    partition's ``StagingBuffer`` takes and spills to its ``RawStagingFile`` (at the default
    ``sinkadmin.staging.buffer-bytes``, capped as the product caps it); a commit's worth of batches, then the files are closed."""
    run_records = BATCH_RECORDS // PARTITIONS
    values = values_of(range(BATCH_RECORDS))
    keys = [str(i).encode() for i in range(BATCH_RECORDS)]
    chunk_bytes = int(next(k.default for k in SHARED_KEYS if k.name == "sinkadmin.staging.buffer-bytes") or 0)
    with tempfile.TemporaryDirectory(prefix="switch-interval-") as work:
        offset = 0
        while not stop.is_set():
            buffers = {
                p: StagingBuffer("bench", p, offset, RawStagingFile(Path(work) / f"{p}.parquet", chunk_bytes))
                for p in range(PARTITIONS)
            }
            for _ in range(BATCHES_PER_COMMIT):
                batch = [  # (what consume() returns)
                    Message(i // run_records, offset + i % run_records, keys[i], values[i])
                    for i in range(BATCH_RECORDS)
                ]
                fetched = [m for m in batch if m.error() is None]
                for partition, group in groupby(fetched, key=lambda m: m.partition()):
                    run = list(group)
                    buffers[partition].extend(chunk_of_messages(run[0].topic(), partition, run))
                offset += run_records
            for buffer in buffers.values():
                buffer.finish()


def decoding(stop: threading.Event) -> None:
    """``json.loads`` of one value in a loop, until ``stop``: Python that never lets go of the GIL itself."""
    value = values_of(range(1))[0]
    assert value is not None
    while not stop.is_set():
        for _ in range(100):
            json.loads(value)


def round_trips_beside(busy: Callable[[threading.Event], None], count: int) -> float:
    stop = threading.Event()
    other = threading.Thread(target=busy, args=(stop,))
    other.start()
    time.sleep(0.2)  # (under way)
    try:
        return round_trips(count)
    finally:
        stop.set()
        other.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "switch_interval.json"))
    args = parser.parse_args()

    round_trips(20)  # (connected)
    default = sys.getswitchinterval()
    figures: dict[str, dict[str, float]] = {}
    for interval in INTERVALS_S:
        sys.setswitchinterval(interval)
        alone = statistics.median(round_trips(args.round_trips) for _ in range(args.rounds))
        staged = statistics.median(round_trips_beside(staging, args.round_trips) for _ in range(args.rounds))
        decoded = statistics.median(round_trips_beside(decoding, args.round_trips) for _ in range(args.rounds))
        figures[f"{interval * 1000:g} ms"] = {
            "round_trips_ms_alone": round(alone * 1000, 1),
            "round_trips_ms_beside_staging": round(staged * 1000, 1),
            "round_trips_ms_beside_json_loads": round(decoded * 1000, 1),
            "beside_staging_to_alone": round(staged / alone, 2),
            "beside_json_loads_to_alone": round(decoded / alone, 2),
        }
        print(f"switch interval {interval * 1000:g} ms: {figures[f'{interval * 1000:g} ms']}", flush=True)
    sys.setswitchinterval(default)
    result = {
        "round_trips": args.round_trips,
        "rounds": args.rounds,
        "batch_records": BATCH_RECORDS,
        "partitions": PARTITIONS,
        "cpu_count": os.cpu_count(),
        "by_switch_interval": figures,
    }
    print(json.dumps(result, indent=2))
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
