"""The Iceberg sink's Spark data plane: one job per task and commit decodes its staged records into
the tables' data files.

Spark's Python workers run the arrow data plane's writer (``sinks.iceberg.arrow_writer``:
the shared JSON decoder, Iceberg's partition transforms, routing, bad-record
isolation) over each staged file, write zstd Parquet under the table location
and move each file to its immutable name; the job returns only the files'
descriptions, the bad records and the skip counts. So both planes turn the
same records into the same rows and the same bad-record decisions, and bucket
partitions, schema evolution, routing and every column type work on both.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyiceberg.schema import Schema

from connectors.config import SinkConfig
from sinks.iceberg.arrow_writer import ArrowPartitionWriter, publish_decoded
from sinks.iceberg.tables import schema_from_connect
from sinks.iceberg.writes import TargetTable, Unshaped, WritePlan
from workers.events import DataFile
from workers.failpoints import failpoint
from workers.spark_writer import STAGING_DDL, SparkJobs, read_staged_chunks
from workers.staging import StagedPartition
from workers.writes import WriteResult, bad_of_outcome, bad_outcome, uri


class SchemaChanged(Exception):
    """A staged partition's records have fields their table lacks (schema evolution)."""

    def __init__(self, table: str, additions: Schema) -> None:
        super().__init__(f"records for {table} have new fields")
        self.table = table
        self.additions = additions


class TableUnresolved(Exception):
    """Records name a table the job was not given (dynamic routing): the task resolves it first."""


def _schema_changed(table: str, additions: Schema) -> TargetTable:
    raise SchemaChanged(table, additions)


@dataclass(frozen=True)
class StagedDecode:
    """A task's share of one commit, as Spark's Python workers decode it (pickled with the job)."""

    config: SinkConfig
    plan: WritePlan
    commit_id: uuid.UUID
    staging_id: uuid.UUID
    # The job's work: Spark task n decodes staged[n].
    staged: tuple[StagedPartition, ...] = ()

    def table(self, name: str, _samples: object = None) -> TargetTable:
        """The plan's table ``name``; Unshaped if no record could create it, TableUnresolved if not in the plan."""
        if (table := self.plan.table(name)) is not None:
            return table
        if name in self.plan.unshaped:
            raise Unshaped(self.plan.unshaped[name])
        raise TableUnresolved(name)

    def decode(self, staged: StagedPartition) -> dict[str, Any]:
        """Decode one staged partition into data files under their final names; what became of it."""
        assert staged.path is not None
        failpoint("executor.decode")  # (a test's executor dies or stalls here: mid-write)
        sink = ArrowPartitionWriter(
            self.config,
            self.table,
            _schema_changed,
            self.staging_id,
            staged.topic,
            staged.partition,
            staged.start,
            staged.path.parent,
            keep_rejects=False,  # the staged file holds every record, for the dead-letter topic
        )
        try:
            for chunk in read_staged_chunks(staged.path, sink.chunk_bytes):
                sink.write(chunk)
            finished = sink.finish(replace(staged, path=None))
        except SchemaChanged as change:
            sink.discard()
            return {"table": change.table, "additions": change.additions.model_dump_json()}
        except TableUnresolved:
            sink.discard()
            return {"unresolved": self._unresolved(staged.path, sink)}
        except BaseException:
            sink.discard()
            raise
        io_properties = next(iter(self.plan.tables)).io_properties if self.plan.tables else {}
        return {
            "files": [f.as_dict() for f in publish_decoded(self.commit_id, finished, io_properties)],
            "bad": bad_outcome(finished.bad),
            "skipped": finished.skipped,
        }

    def _unresolved(self, path: Path, sink: ArrowPartitionWriter) -> list[str]:
        """Every table the staged records name that the plan lacks: resolved by the task in one round."""
        assert sink.router is not None  # (only routed records name tables)
        named: set[str] = set()
        for chunk in read_staged_chunks(path, sink.chunk_bytes):
            named.update(sink.router.route(chunk.values, chunk.errors).tables)
        return sorted(n for n in named if self.plan.table(n) is None and n not in self.plan.unshaped)


def route_text(config: SinkConfig) -> Any:
    """A Spark expression of each staged record's route field as text (``iceberg.tables.route-field``; None
    without one), as the JSON decoder's routing reads it (``sinks.iceberg.routing``): any field, nested or
    not, in the payload of Kafka Connect's envelope."""
    from pyspark.sql import functions as F

    field = config.settings.route_field
    if not field:
        return None
    envelope = config.value_converter == "json" and config.schemas_enable
    return F.get_json_object(F.col("value").cast("string"), ("$.payload." if envelope else "$.") + field)


class SparkWriter(SparkJobs):
    """Decodes and writes the Iceberg tables' data files of a task's share of a commit."""

    def __init__(self, config: SinkConfig, session: Any = None) -> None:
        super().__init__(session, decoder_modules=("sinks.iceberg.arrow_writer",))
        self.config = config

    # Rounds of schema evolution one commit may take before giving up.
    MAX_SCHEMA_ROUNDS = 8

    def write(
        self,
        commit_id: uuid.UUID,
        staging_id: uuid.UUID,
        staged: Sequence[StagedPartition],
        plan: WritePlan,
        evolve: Callable[[WritePlan, str, Schema], WritePlan] | None = None,
        resolve: Callable[[WritePlan, Sequence[str]], WritePlan] | None = None,
    ) -> WriteResult:
        """One Spark job decodes every staged partition into data files under their final names.

        A partition whose records have fields their table lacks (schema evolution) comes back with those
        fields instead of files; they are added (``evolve``) and that partition decoded again. So does one
        whose records name tables the plan lacks (dynamic routing): they are resolved (``resolve``), created
        if missing, and it is decoded again.
        """
        with_data = [s for s in staged if s.path is not None and s.records > 0]
        if not with_data:
            return WriteResult()
        result = WriteResult()
        pending, current = with_data, plan
        for _ in range(self.MAX_SCHEMA_ROUNDS):
            outcomes = self.run(StagedDecode(self.config, current, commit_id, staging_id, tuple(pending)))
            changed: list[StagedPartition] = []
            unresolved: set[str] = set()
            for s in pending:
                outcome = outcomes[(s.topic, s.partition)]
                if "additions" in outcome:
                    if evolve is None:
                        raise ValueError(f"records of {s.topic}/{s.partition} have fields the tables lack")
                    current = evolve(current, outcome["table"], Schema.model_validate_json(outcome["additions"]))
                    changed.append(s)
                    continue
                if "unresolved" in outcome:
                    if resolve is None:
                        raise ValueError(f"records of {s.topic}/{s.partition} name tables the plan lacks")
                    unresolved.update(outcome["unresolved"])
                    changed.append(s)
                    continue
                result.files.extend(DataFile(**f) for f in outcome["files"])
                result.bad.extend(bad_of_outcome(s.topic, s.partition, outcome["bad"]))
                if outcome["skipped"]:
                    result.skipped[(s.topic, s.partition)] = outcome["skipped"]
            if unresolved:
                assert resolve is not None
                current = resolve(current, sorted(unresolved))
            if not changed:
                return result
            pending = changed
        raise RuntimeError(f"the tables changed {self.MAX_SCHEMA_ROUNDS} times while writing one commit")

    def envelope_schemas(self, staged: Sequence[StagedPartition]) -> list[tuple[str | None, Schema]]:
        """The distinct record schemas of the staged Kafka Connect envelopes, as table schemas, each with
        the text of its records' route field (``iceberg.tables.route-field``; None without one): schema
        evolution, each table by its own records' schemas. One extra pass over the records, in the JVM. A
        schema that is not a struct is left out: its records are bad records when decoded."""
        from pyspark.sql import functions as F

        paths = [uri(str(s.path)) for s in staged if s.path is not None and s.records > 0]
        if not paths:
            return []
        raw = self.spark.read.schema(STAGING_DDL).parquet(*paths)
        route = route_text(self.config)
        schema = F.get_json_object(F.col("value").cast("string"), "$.schema")
        texts = raw.select(schema.alias("schema"), (route if route is not None else F.lit(None)).alias("route"))
        schemas = []
        for row in texts.where(F.col("schema").isNotNull()).distinct().collect():
            try:
                schemas.append((row["route"], schema_from_connect(json.loads(row["schema"]))))
            except ValueError:
                continue
        return schemas
