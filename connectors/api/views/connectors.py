"""/connectors and /connectors/{name}/...: create, read, configure, control and delete connectors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from connectors import actions
from connectors.api.entities import connector_info, shown_config
from connectors.api.errors import BadRequest, ConnectError
from connectors.api.permissions import ADD, CHANGE, DELETE
from connectors.api.serializers import (
    ActiveTopicsSerializer,
    ConnectorInfoSerializer,
    ConnectorListSerializer,
    ConnectorStateInfoSerializer,
    CreateConnectorRequestSerializer,
)
from connectors.api.status import connector_status, restarting
from connectors.api.views.base import ConnectView, json_object, query_flag
from connectors.api.views.schema import CONFIG_BODY, CONFIG_MAP, CONFIG_PATCH_BODY, NAME, errors
from connectors.config import validate_config
from connectors.models import Connector, DesiredState, PartitionOffset

TAG = ["connectors"]
LOCATION = OpenApiParameter(
    "Location", OpenApiTypes.URI, OpenApiParameter.HEADER, response=[201], description="URL of the new connector."
)


def connector_url(request: Request, name: str) -> str:
    return request.build_absolute_uri(reverse("connect-connector", kwargs={"name": name}))


def reject_unstorable(config: Mapping[str, Any]) -> None:
    """PostgreSQL cannot store NUL characters: report them per key, like any other config error."""
    bad = [k for k, v in config.items() if "\x00" in k or (isinstance(v, str) and "\x00" in v)]
    if bad:
        validation = validate_config({k: v for k, v in config.items() if v is not None})
        for key in bad:
            validation.add(key, "may not contain NUL characters")
        raise actions.InvalidConfig(validation)


def _with_status_rows(name: str) -> Connector:
    """The connector with what its status is derived from, in two queries."""
    connector = Connector.objects.select_related("coordinator").prefetch_related("tasks").filter(name=name).first()
    if connector is None:
        raise actions.ConnectorNotFound(name)
    return connector


class ConnectorListView(ConnectView):
    required_permissions = {"POST": (ADD,)}

    @extend_schema(
        operation_id="listConnectors",
        summary="List connectors",
        description="Names of all connectors; with ?expand=status and/or ?expand=info, an object by name "
        "holding the requested expansions.",
        tags=TAG,
        parameters=[
            OpenApiParameter(
                "expand",
                OpenApiTypes.STR,
                many=True,
                enum=["status", "info"],
                description="Repeat to include both. Unknown values are ignored, as in Connect.",
            )
        ],
        responses={200: ConnectorListSerializer, **errors()},
    )
    def get(self, request: Request) -> Response:
        if "expand" not in request.query_params:
            return Response(list(Connector.objects.order_by("name").values_list("name", flat=True)))
        expand = set(request.query_params.getlist("expand"))
        connectors = Connector.objects.order_by("name").select_related("coordinator").prefetch_related("tasks")
        now = timezone.now()
        body: dict[str, dict[str, Any]] = {}
        for connector in connectors:
            entry: dict[str, Any] = {}
            if "status" in expand:
                entry["status"] = connector_status(connector, now=now).to_connect()
            if "info" in expand:
                entry["info"] = connector_info(connector)
            body[connector.name] = entry
        return Response(body)

    @extend_schema(
        operation_id="createConnector",
        summary="Create a connector",
        tags=TAG,
        request=CreateConnectorRequestSerializer,
        parameters=[LOCATION],
        responses={201: ConnectorInfoSerializer, **errors(400, 403, 409)},
    )
    def post(self, request: Request) -> Response:
        body = json_object(request, "The request body")
        name = body.get("name")
        if name is None:
            name = ""
        if not isinstance(name, str):
            raise BadRequest("Connector name must be a string")
        # As Connect: surrounding whitespace is not part of the name.
        name = name.strip()
        config = body.get("config")
        if not isinstance(config, dict):
            raise BadRequest("Connector config must be a JSON object")
        initial_state = body.get("initial_state")
        if initial_state is None:
            initial_state = DesiredState.RUNNING
        elif isinstance(initial_state, str):
            initial_state = initial_state.upper()
        reject_unstorable(config)
        connector = actions.create_connector(name, config, initial_state)
        return Response(
            connector_info(connector),
            status=status.HTTP_201_CREATED,
            headers={"Location": connector_url(request, name)},
        )


class ConnectorView(ConnectView):
    required_permissions = {"DELETE": (DELETE,)}

    @extend_schema(
        operation_id="getConnector",
        summary="Get a connector",
        tags=TAG,
        parameters=[NAME],
        responses={200: ConnectorInfoSerializer, **errors(404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(connector_info(actions.get_connector(name)))

    @extend_schema(
        operation_id="deleteConnector",
        summary="Delete a connector",
        description="Its tables and its commit ledger stay.",
        tags=TAG,
        parameters=[NAME],
        responses={204: None, **errors(403, 404)},
    )
    def delete(self, request: Request, name: str) -> Response:
        actions.delete_connector(name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConnectorConfigView(ConnectView):
    required_permissions = {"PUT": (CHANGE,), "PATCH": (CHANGE,)}

    @extend_schema(
        operation_id="getConnectorConfig",
        summary="Get a connector's config",
        description="Secret values are shown as [hidden].",
        tags=TAG,
        parameters=[NAME],
        responses={200: OpenApiResponse(CONFIG_MAP), **errors(404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(shown_config(actions.get_connector(name)))

    @extend_schema(
        operation_id="putConnectorConfig",
        summary="Create a connector or replace its config",
        description="A secret sent back as [hidden] keeps its stored value.",
        tags=TAG,
        parameters=[NAME, LOCATION],
        request=CONFIG_BODY,
        responses={200: ConnectorInfoSerializer, 201: ConnectorInfoSerializer, **errors(400, 403)},
    )
    def put(self, request: Request, name: str) -> Response:
        config = json_object(request, "Connector configuration")
        reject_unstorable(config)
        if not Connector.objects.filter(name=name).exists() and not request.user.has_perm(ADD):
            raise ConnectError(status.HTTP_403_FORBIDDEN, "You do not have permission to create connectors.")
        connector, created = actions.update_config(name, config)
        if created:
            return Response(
                connector_info(connector),
                status=status.HTTP_201_CREATED,
                headers={"Location": connector_url(request, name)},
            )
        return Response(connector_info(connector))

    @extend_schema(
        operation_id="patchConnectorConfig",
        summary="Change some keys of a connector's config",
        description="Keys with a value are set, keys with null are removed.",
        tags=TAG,
        parameters=[NAME],
        request=CONFIG_PATCH_BODY,
        responses={200: ConnectorInfoSerializer, **errors(400, 403, 404)},
    )
    def patch(self, request: Request, name: str) -> Response:
        changes = json_object(request, "Connector configuration patch")
        reject_unstorable(changes)
        return Response(connector_info(actions.patch_config(name, changes)))


class ConnectorStatusView(ConnectView):
    @extend_schema(
        operation_id="getConnectorStatus",
        summary="Get the status of a connector and its tasks",
        tags=TAG,
        parameters=[NAME],
        responses={200: ConnectorStateInfoSerializer, **errors(404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(connector_status(_with_status_rows(name)).to_connect())


class ConnectorTopicsView(ConnectView):
    @extend_schema(
        operation_id="getConnectorActiveTopics",
        summary="Topics the connector has read",
        description="The topics of the partitions the commit ledger has offsets for.",
        tags=TAG,
        parameters=[NAME],
        responses={200: ActiveTopicsSerializer, **errors(404)},
    )
    def get(self, request: Request, name: str) -> Response:
        connector = actions.get_connector(name)
        topics = (
            PartitionOffset.objects.filter(connector=connector)
            .order_by("topic")
            .values_list("topic", flat=True)
            .distinct()
        )
        return Response({connector.name: {"connector": connector.name, "topics": list(topics)}})


class ConnectorTopicsResetView(ConnectView):
    @extend_schema(
        operation_id="resetConnectorActiveTopics",
        summary="Reset the active topics (disabled)",
        description="Always 403: the active topics come from the commit ledger, which only offset resets change.",
        tags=TAG,
        parameters=[NAME],
        request=None,
        responses=errors(403),
    )
    def put(self, request: Request, name: str) -> Response:
        raise ConnectError(status.HTTP_403_FORBIDDEN, "Topic tracking reset is disabled.")


class _TargetStateView(ConnectView):
    """PUT /pause, /resume, /stop: record the wanted state; workers follow it."""

    change_state = staticmethod(actions.pause_connector)
    success = status.HTTP_202_ACCEPTED

    def put(self, request: Request, name: str) -> Response:
        self.change_state(name)
        return Response(status=self.success)


def _target_state_schema(operation_id: str, summary: str, code: int) -> Any:
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        tags=TAG,
        parameters=[NAME],
        request=None,
        responses={code: None, **errors(403, 404)},
    )


class ConnectorPauseView(_TargetStateView):
    change_state = staticmethod(actions.pause_connector)

    @_target_state_schema("pauseConnector", "Pause a connector and its tasks", 202)
    def put(self, request: Request, name: str) -> Response:
        return super().put(request, name)


class ConnectorResumeView(_TargetStateView):
    change_state = staticmethod(actions.resume_connector)

    @_target_state_schema("resumeConnector", "Resume a paused or stopped connector", 202)
    def put(self, request: Request, name: str) -> Response:
        return super().put(request, name)


class ConnectorStopView(_TargetStateView):
    change_state = staticmethod(actions.stop_connector)
    # Connect answers a stop with 204, unlike pause and resume (KIP-875).
    success = status.HTTP_204_NO_CONTENT

    @_target_state_schema("stopConnector", "Stop a connector and shut down its tasks", 204)
    def put(self, request: Request, name: str) -> Response:
        return super().put(request, name)


class ConnectorRestartView(ConnectView):
    @extend_schema(
        operation_id="restartConnector",
        summary="Restart a connector, and optionally its tasks",
        description="Without includeTasks and onlyFailed: 204, as Connect's original restart. With either: 202 "
        "and the status, where what is being restarted shows RESTARTING.",
        tags=TAG,
        parameters=[
            NAME,
            OpenApiParameter("includeTasks", OpenApiTypes.BOOL, description="Also restart the tasks."),
            OpenApiParameter("onlyFailed", OpenApiTypes.BOOL, description="Restart only what has FAILED."),
        ],
        request=None,
        responses={202: ConnectorStateInfoSerializer, 204: None, **errors(403, 404)},
    )
    def post(self, request: Request, name: str) -> Response:
        include_tasks = query_flag(request, "includeTasks")
        only_failed = query_flag(request, "onlyFailed")
        restarted = actions.restart(name, include_tasks=include_tasks, only_failed=only_failed)
        if not include_tasks and not only_failed:
            return Response(status=status.HTTP_204_NO_CONTENT)
        # As Kafka Connect answers: what is being restarted is RESTARTING, the rest as it is.
        answer = restarting(
            connector_status(_with_status_rows(name)),
            connector=restarted.restarted_connector,
            tasks=restarted.restarted_tasks,
        )
        return Response(answer.to_connect(), status=status.HTTP_202_ACCEPTED)
