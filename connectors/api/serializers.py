"""Shapes of the Connect API's bodies for the OpenAPI document.

Component names follow Kafka Connect's entity classes (ConnectorInfo,
ConnectorStateInfo, ConfigInfos...), so the document reads like Connect's own.
The views build bodies with ``connectors.api.entities``; schemathesis checks
in the tests that these shapes and the bodies agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from connectors.api.status import State
from connectors.config.validation import TOPIC_NAME
from connectors.models import CommitEnd, CommitState, DesiredState, MaintenanceOutcome

CONFIG_VALUE = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}


@extend_schema_field(CONFIG_VALUE)
class ConfigValueField(serializers.Field):  # type: ignore[type-arg]
    """A config value in a request: strings, and numbers or booleans that are kept as their string."""


@extend_schema_field({**CONFIG_VALUE, "nullable": True})
class NullableConfigValueField(serializers.Field):  # type: ignore[type-arg]
    """A config value in a PATCH: null removes the key."""


class EnumField(serializers.CharField):
    """A string from a named set: documented as its own enum component (see EnumSchema)."""

    def __init__(self, enum_name: str, values: Iterable[str], **kwargs: Any) -> None:
        self.enum_name = enum_name
        self.enum_values = list(values)
        super().__init__(**kwargs)


class EnumSchema(OpenApiSerializerFieldExtension):
    # Named here because Connect's "state" and "type" mean different sets in
    # different bodies, which drf-spectacular's automatic enum names cannot tell apart.
    target_class = EnumField

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        field = self.target
        component = ResolvedComponent(
            name=field.enum_name,
            type=ResolvedComponent.SCHEMA,
            object=field.enum_name,
            schema={"type": "string", "enum": field.enum_values},
        )
        auto_schema.registry.register_on_missing(component)
        return component.ref


class ByNameSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """An object keyed by connector name whose values are ``value`` (see ByNameSchema)."""

    value: ClassVar[type[serializers.Serializer]]  # type: ignore[type-arg]


class ByNameSchema(OpenApiSerializerExtension):
    target_class = ByNameSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        value = auto_schema.resolve_serializer(self.target.value, direction)
        return {"type": "object", "additionalProperties": value.ref}


def _config_map(**kwargs: Any) -> serializers.DictField:
    return serializers.DictField(child=serializers.CharField(), **kwargs)


class ErrorMessageSerializer(serializers.Serializer):  # type: ignore[type-arg]
    error_code = serializers.IntegerField(help_text="The HTTP status code.")
    message = serializers.CharField()


class MessageSerializer(serializers.Serializer):  # type: ignore[type-arg]
    message = serializers.CharField()


class ServerInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    version = serializers.CharField(help_text="Kafka Connect version this API matches, with sinkadmin's as qualifier.")
    commit = serializers.CharField(help_text="Source commit of the running sinkadmin.")
    kafka_cluster_id = serializers.CharField(
        allow_null=True, help_text="Id of the Kafka cluster; null while the cluster cannot be reached."
    )


class ConnectorTaskIdSerializer(serializers.Serializer):  # type: ignore[type-arg]
    connector = serializers.CharField()
    task = serializers.IntegerField(min_value=0)


class ConnectorInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField()
    config = _config_map(help_text="Connector config; secret values are shown as [hidden].")
    tasks = ConnectorTaskIdSerializer(many=True)
    type = EnumField("ConnectorType", ["sink"])
    notes = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Not in Kafka Connect's shape: the config's keys that are accepted and ignored, each with why "
        "(ignoring it changes nothing written), as config/validate's notes beside each key. Empty when none is.",
    )


class CreateConnectorRequestSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.RegexField(
        r"^[^/\x00-\x1f\x7f-\x9f]*\S[^/\x00-\x1f\x7f-\x9f]*$",
        max_length=255,
        help_text="Not blank, no '/' or control characters; leading and trailing whitespace is removed.",
    )
    config = serializers.DictField(child=ConfigValueField())
    initial_state = EnumField(
        "InitialState", DesiredState.values, required=False, allow_null=True, help_text="Defaults to RUNNING."
    )


class ConnectorStateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    state = EnumField("State", State)
    worker_id = serializers.CharField(allow_null=True, help_text="Worker that runs it; null when none does.")
    trace = serializers.CharField(required=False, help_text="Why it failed; present only for FAILED.")


class TaskStateSerializer(ConnectorStateSerializer):
    id = serializers.IntegerField(min_value=0)


class ConnectorStateInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField()
    connector = ConnectorStateSerializer()
    tasks = TaskStateSerializer(many=True)
    type = EnumField("ConnectorType", ["sink"])


class ExpandedConnectorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    status = ConnectorStateInfoSerializer(required=False)
    info = ConnectorInfoSerializer(required=False)


class ExpandedConnectorsSerializer(ByNameSerializer):
    value = ExpandedConnectorSerializer


class ConnectorListSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Connector names without ?expand; ExpandedConnectors with it."""


class ConnectorListSchema(OpenApiSerializerExtension):
    target_class = ConnectorListSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        expanded = auto_schema.resolve_serializer(ExpandedConnectorsSerializer, direction)
        return {"oneOf": [{"type": "array", "items": {"type": "string"}}, expanded.ref]}


class TaskInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = ConnectorTaskIdSerializer()
    config = _config_map()


class ActiveTopicsInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    connector = serializers.CharField()
    topics = serializers.ListField(child=serializers.CharField())


class ActiveTopicsSerializer(ByNameSerializer):
    value = ActiveTopicsInfoSerializer


class SinkPartitionSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kafka_topic = serializers.RegexField(TOPIC_NAME.pattern)
    kafka_partition = serializers.IntegerField(min_value=0)


class SinkOffsetSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kafka_offset = serializers.IntegerField(min_value=0, help_text="The next offset to read.")


class ConnectorOffsetSerializer(serializers.Serializer):  # type: ignore[type-arg]
    partition = SinkPartitionSerializer()
    offset = SinkOffsetSerializer(allow_null=True, help_text="null (in PATCH) forgets the partition's offset.")


class ConnectorOffsetsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    offsets = ConnectorOffsetSerializer(many=True)


# "class" is a Python keyword, so this one is built instead of declared.
PluginInfoSerializer = type(
    "PluginInfoSerializer",
    (serializers.Serializer,),
    {
        "class": serializers.CharField(),
        "type": EnumField("PluginType", ["sink", "converter"]),
        "version": serializers.CharField(),
    },
)


class ConfigKeyInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField()
    type = serializers.CharField()
    required = serializers.BooleanField()
    default_value = serializers.CharField(allow_null=True)
    importance = serializers.CharField()
    documentation = serializers.CharField(allow_blank=True)
    group = serializers.CharField(allow_null=True)
    width = serializers.CharField()
    display_name = serializers.CharField()
    dependents = serializers.ListField(child=serializers.CharField())
    order = serializers.IntegerField()


class ConfigValueInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField()
    value = serializers.CharField(allow_null=True)
    recommended_values = serializers.ListField(child=serializers.CharField())
    errors = serializers.ListField(child=serializers.CharField())
    visible = serializers.BooleanField()
    notes = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Not in Kafka Connect's shape: why a key of the replaced connector is accepted and ignored "
        "(ignoring it changes nothing that is written). Present only for such keys.",
    )


class ConfigInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    definition = ConfigKeyInfoSerializer()
    value = ConfigValueInfoSerializer()


class ConfigInfosSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField()
    error_count = serializers.IntegerField(min_value=0)
    groups = serializers.ListField(child=serializers.CharField())
    configs = ConfigInfoSerializer(many=True)


_SKIPPED = (
    "Offsets passed over without a record written: tombstones and records the transforms dropped, or, in an "
    "entry whose ended_by is 'skipped', offsets whose records retention deleted before they were committed "
    "(sinkadmin.offsets.out-of-range=skip)."
)


class CommitRangeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    start_offset = serializers.IntegerField(help_text="First offset in the commit.")
    end_offset = serializers.IntegerField(help_text="One past the last offset in the commit.")
    records = serializers.IntegerField()
    dead_lettered = serializers.IntegerField()
    skipped = serializers.IntegerField(help_text=_SKIPPED)


class CommitSummarySerializer(serializers.Serializer):  # type: ignore[type-arg]
    commit_id = serializers.UUIDField()
    connector = serializers.CharField()
    state = EnumField("CommitState", CommitState.values)
    epoch = serializers.IntegerField(help_text="Coordinator epoch that made the commit.")
    started_at = serializers.DateTimeField()
    prepared_at = serializers.DateTimeField(allow_null=True)
    committed_at = serializers.DateTimeField(allow_null=True)
    records = serializers.IntegerField()
    bytes = serializers.IntegerField()
    files_count = serializers.IntegerField()
    dead_lettered = serializers.IntegerField()
    skipped = serializers.IntegerField(help_text=_SKIPPED)
    watermark = serializers.DateTimeField(
        allow_null=True, help_text="Every record with an earlier timestamp is committed."
    )
    complete = serializers.BooleanField(help_text="False when a timeout left some partitions to the next commit.")
    ended_by = EnumField(
        "CommitEnd",
        CommitEnd.values,
        help_text="What ended the commit's staging: its interval, or earlier sinkadmin.commit.max-records "
        "staged records, a partition's full staging (sinkadmin.staging.max-bytes), a task that staged "
        "what it writes in sinkadmin.commit.write-target-ms, or, after a commit that one of the last two "
        "ended (a backlog), every partition read to its log end ('caught-up'); 'skipped' marks an entry "
        "that moved partitions past offsets below their log start.",
    )
    error = serializers.CharField(allow_blank=True)
    offsets = CommitRangeSerializer(many=True)


class CommitFileSerializer(serializers.Serializer):  # type: ignore[type-arg]
    table = serializers.CharField(required=False)
    path = serializers.CharField(required=False)
    topic = serializers.CharField(required=False)
    partition = serializers.IntegerField(required=False)
    records = serializers.IntegerField(required=False)
    bytes = serializers.IntegerField(required=False)


class CommitDetailSerializer(CommitSummarySerializer):
    files = CommitFileSerializer(many=True)
    snapshot_ids = serializers.DictField(child=serializers.IntegerField(), help_text="Snapshot id per table.")


class CommitPageSerializer(serializers.Serializer):  # type: ignore[type-arg]
    commits = CommitSummarySerializer(many=True)
    next = serializers.URLField(allow_null=True, help_text="The next (older) page.")
    previous = serializers.URLField(allow_null=True, help_text="The previous (newer) page.")


class WorkerSerializer(serializers.Serializer):  # type: ignore[type-arg]
    worker_id = serializers.CharField(help_text="Celery node name, as tasks' worker_id begins.")
    host = serializers.CharField()
    slots = serializers.IntegerField(help_text="Runners (coordinators and tasks) it can host: its pool processes.")
    used = serializers.IntegerField(help_text="Runners it hosts now.")
    free = serializers.IntegerField()
    heartbeat_at = serializers.DateTimeField()


class WorkersSerializer(serializers.Serializer):  # type: ignore[type-arg]
    workers = WorkerSerializer(many=True)
    slots = serializers.IntegerField(help_text="Slots of all live workers.")
    held = serializers.IntegerField(
        help_text="Runners running on a live worker or asked to start (a request holds a slot); runners started "
        "by hand (manage.py run_connector) hold none."
    )
    free = serializers.IntegerField()


class MaintenanceRunSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.IntegerField()
    connector = serializers.CharField()
    table = serializers.CharField()
    epoch = serializers.IntegerField(help_text="Coordinator epoch that ran it.")
    outcome = EnumField(
        "MaintenanceOutcome",
        MaintenanceOutcome.values,
        help_text="INTERRUPTED: its coordinator stopped or died before it ended; what it committed stands.",
    )
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    rewritten_files = serializers.IntegerField(help_text="Small files compaction replaced.")
    rewritten_bytes = serializers.IntegerField()
    added_files = serializers.IntegerField(help_text="Files compaction wrote in their place.")
    added_bytes = serializers.IntegerField()
    replace_snapshot_id = serializers.IntegerField(allow_null=True, help_text="The compaction's REPLACE snapshot.")
    rewritten_manifests = serializers.IntegerField(help_text="Manifests rewritten into fewer (Iceberg).")
    added_manifests = serializers.IntegerField(help_text="Manifests written in their place.")
    expired_snapshots = serializers.IntegerField()
    expired_files = serializers.IntegerField(
        help_text="Files no retained snapshot reads, deleted: of expired snapshots (Iceberg), old file slices "
        "cleaned (Hudi).",
    )
    orphan_files = serializers.IntegerField(help_text="Unreferenced files older than the window, deleted.")
    removed_bytes = serializers.IntegerField(
        help_text="Bytes of the deleted files whose size is known: orphans, and Hudi's cleaned files (Iceberg's "
        "expiry reports a count of files, not their size).",
    )
    error = serializers.CharField(allow_blank=True)


class MaintenanceRunsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    runs = MaintenanceRunSerializer(many=True)
