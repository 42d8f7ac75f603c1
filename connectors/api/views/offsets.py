"""/connectors/{name}/offsets (KIP-875): the ledger's next offset per partition.

For a sink, a partition is ``{"kafka_topic", "kafka_partition"}`` and an
offset ``{"kafka_offset"}``: the next offset the connector reads, which is
where the next commit starts.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from connectors import actions
from connectors.api.entities import KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC, connector_offsets
from connectors.api.errors import BadRequest
from connectors.api.serializers import ConnectorOffsetsSerializer, MessageSerializer
from connectors.api.views.base import ConnectView, json_object
from connectors.api.views.schema import NAME, error, errors
from connectors.config.validation import TOPIC_NAME

TAG = ["offsets"]
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1
_INTEGER = re.compile(r"[+-]?\d+")

ALTERED = "The offsets for this connector have been altered successfully"
RESET = "The offsets for this connector have been reset successfully"
NOT_STOPPED_OR_INVALID = error(
    "Invalid offsets, offsets of a partition the cluster does not have, or the connector is not STOPPED."
)


def _integer(value: Any) -> int | None:
    """Connect parses String.valueOf(value): 10 and "10" are fine, 10.0 and true are not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        try:
            return int(value)
        except ValueError:  # more digits than Python converts
            return None
    return None


def _shown(value: Any) -> str:
    # As Java prints it in Connect's messages.
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_sink_offsets(body: dict[str, Any]) -> list[tuple[str, int, int | None]]:
    """The (topic, partition, next offset or None) of a PATCH body, with Connect's messages."""
    entries = body.get("offsets")
    if not isinstance(entries, list) or not entries:
        raise BadRequest("Partitions / offsets need to be provided for an alter offsets request")
    parsed: dict[tuple[str, int], int | None] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise BadRequest("Each element of 'offsets' must be an object with 'partition' and 'offset'")
        partition = entry.get("partition")
        if partition is None:
            raise BadRequest("The partition for a sink connector offset cannot be null or missing")
        if not isinstance(partition, dict) or KAFKA_TOPIC not in partition or KAFKA_PARTITION not in partition:
            raise BadRequest(
                f"The partition for a sink connector offset must contain the keys '{KAFKA_TOPIC}' and '{KAFKA_PARTITION}'"
            )
        topic = partition[KAFKA_TOPIC]
        if not isinstance(topic, str) or not TOPIC_NAME.match(topic):
            raise BadRequest(f"'{_shown(topic)}' is not a valid Kafka topic name")
        number = _integer(partition[KAFKA_PARTITION])
        if number is None:
            raise BadRequest(
                "Failed to parse the following Kafka partition value in the provided offsets: "
                f"'{_shown(partition[KAFKA_PARTITION])}'. Partition values for sink connectors need to be integers."
            )
        if not 0 <= number <= MAX_PARTITION:
            raise BadRequest(f"Kafka partition {number} is out of range: partitions are 0 to {MAX_PARTITION}")
        offset = entry.get("offset")
        if offset is None:
            parsed[(topic, number)] = None
            continue
        if not isinstance(offset, dict) or KAFKA_OFFSET not in offset:
            raise BadRequest(
                f"The offset for a sink connector should either be null or contain the key '{KAFKA_OFFSET}'"
            )
        value = _integer(offset[KAFKA_OFFSET])
        if value is None:
            raise BadRequest(
                "Failed to parse the following Kafka offset value in the provided offsets: "
                f"'{_shown(offset[KAFKA_OFFSET])}'. Offset values for sink connectors need to be integers."
            )
        if not 0 <= value <= MAX_OFFSET:
            raise BadRequest(f"Kafka offset {value} is out of range: offsets are 0 to {MAX_OFFSET}")
        parsed[(topic, number)] = value
    return [(topic, number, value) for (topic, number), value in parsed.items()]


class OffsetsView(ConnectView):
    @extend_schema(
        operation_id="getOffsets",
        summary="Get the connector's offsets",
        description="The next offset to read per partition, from the commit ledger (the Kafka mirror: from its "
        "consumer group on the target cluster, where its tasks resume).",
        tags=TAG,
        parameters=[NAME],
        responses={200: ConnectorOffsetsSerializer, **errors(404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(connector_offsets(actions.stored_offsets(actions.get_connector(name))))

    @extend_schema(
        operation_id="alterOffsets",
        summary="Set where the connector reads next (connector must be STOPPED)",
        description="Writes the offsets into the ledger, so the next commit starts there. A null offset "
        "forgets the partition: it starts again as consumer.auto.offset.reset says.",
        tags=TAG,
        parameters=[NAME],
        request=ConnectorOffsetsSerializer,
        responses={200: MessageSerializer, **errors(403, 404), 400: NOT_STOPPED_OR_INVALID},
    )
    def patch(self, request: Request, name: str) -> Response:
        offsets = parse_sink_offsets(json_object(request, "The request body"))
        actions.alter_offsets(name, offsets)
        return Response({"message": ALTERED})

    @extend_schema(
        operation_id="resetOffsets",
        summary="Forget all the connector's offsets (connector must be STOPPED)",
        tags=TAG,
        parameters=[NAME],
        responses={200: MessageSerializer, **errors(403, 404), 400: error("The connector is not STOPPED.")},
    )
    def delete(self, request: Request, name: str) -> Response:
        actions.reset_offsets(name)
        return Response({"message": RESET})


class TranslatedOffsetsView(ConnectView):
    @extend_schema(
        operation_id="getTranslatedOffsets",
        summary="A consumer group's offsets on the Kafka mirror's target cluster",
        description="From the mirror's latest checkpoints (emit.checkpoints.enabled), as MirrorMaker 2's "
        "RemoteClusterUtils.translateOffsets gives them: per replica partition, the offset a consumer of the "
        "group resumes at on the target (kafka_offset), and the group's committed offset on the source "
        "(source_offset). A partition the mirror has copied nothing of up to the group's offset is absent.",
        tags=TAG,
        parameters=[NAME],
        responses={200: ConnectorOffsetsSerializer, **errors(404)},
    )
    def get(self, request: Request, name: str, group: str) -> Response:
        translated = actions.translated_offsets(name, group)
        return Response(
            {
                "group": group,
                "offsets": [
                    {
                        "partition": {KAFKA_TOPIC: t.topic, KAFKA_PARTITION: t.partition},
                        "offset": {KAFKA_OFFSET: t.downstream, "source_offset": t.upstream},
                    }
                    for t in translated
                ],
            }
        )
