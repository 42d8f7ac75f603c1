"""/connectors/{name}/tasks...: task configs, task status and task restarts."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from connectors import actions
from connectors.api.entities import task_infos
from connectors.api.errors import NotFound
from connectors.api.serializers import TaskInfoSerializer, TaskStateSerializer
from connectors.api.status import task_status, visible_tasks
from connectors.api.views.base import ConnectView
from connectors.api.views.schema import NAME, TASK, error, errors

TAG = ["tasks"]
TASK_NOT_FOUND = error("Unknown connector or task.")


class TaskListView(ConnectView):
    @extend_schema(
        operation_id="getTaskConfigs",
        summary="List a connector's tasks and their configs",
        description="Secret values are shown as [hidden].",
        tags=TAG,
        parameters=[NAME],
        responses={200: TaskInfoSerializer(many=True), **errors(404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(task_infos(actions.get_connector(name)))


class TaskStatusView(ConnectView):
    @extend_schema(
        operation_id="getTaskStatus",
        summary="Get the status of one task",
        tags=TAG,
        parameters=[NAME, TASK],
        responses={200: TaskStateSerializer, **errors(), 404: TASK_NOT_FOUND},
    )
    def get(self, request: Request, name: str, task: int) -> Response:
        connector = actions.get_connector(name)
        row = next((t for t in visible_tasks(connector) if t.task_index == task), None)
        if row is None:
            raise NotFound(f"No status found for task {name}-{task}")
        return Response(task_status(row).to_connect())


class TaskRestartView(ConnectView):
    @extend_schema(
        operation_id="restartTask",
        summary="Restart one task",
        tags=TAG,
        parameters=[NAME, TASK],
        request=None,
        responses={204: None, **errors(403), 404: TASK_NOT_FOUND},
    )
    def post(self, request: Request, name: str, task: int) -> Response:
        actions.get_connector(name)
        try:
            actions.restart_task(name, task)
        except actions.ConnectorNotFound:
            # The connector exists (checked above), so it is the task that does not.
            raise NotFound(f"Unknown task: {name}-{task}") from None
        return Response(status=status.HTTP_204_NO_CONTENT)
