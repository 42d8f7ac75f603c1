"""The REST API: Kafka Connect's under /api/connect/, and the OpenAPI document and docs page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, include, path, re_path, resolve
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from connectors.api.views import commits, connectors, health, maintenance, offsets, plugins, root, tasks, workers
from connectors.api.views.base import UnknownRouteView

_unknown_route_view = UnknownRouteView.as_view()


@csrf_exempt
def unknown_route(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Connect (JAX-RS) also serves its paths with a trailing slash; anything else is a 404 in Connect's shape."""
    trimmed = request.path_info.rstrip("/")
    if trimmed != request.path_info:
        try:
            match = resolve(trimmed)
        except Resolver404:
            match = None
        if match is not None and match.func is not unknown_route:
            response: HttpResponse = match.func(request, *match.args, **match.kwargs)
            return response
    response = _unknown_route_view(request)
    return response


connect_urls = [
    path("", root.ServerInfoView.as_view(), name="connect-root"),
    path("health", health.HealthView.as_view(), name="connect-health"),
    path("connectors", connectors.ConnectorListView.as_view(), name="connect-connectors"),
    path("connectors/<str:name>", connectors.ConnectorView.as_view(), name="connect-connector"),
    path("connectors/<str:name>/config", connectors.ConnectorConfigView.as_view(), name="connect-config"),
    path("connectors/<str:name>/status", connectors.ConnectorStatusView.as_view(), name="connect-status"),
    path("connectors/<str:name>/topics", connectors.ConnectorTopicsView.as_view(), name="connect-topics"),
    path(
        "connectors/<str:name>/topics/reset",
        connectors.ConnectorTopicsResetView.as_view(),
        name="connect-topics-reset",
    ),
    path("connectors/<str:name>/pause", connectors.ConnectorPauseView.as_view(), name="connect-pause"),
    path("connectors/<str:name>/resume", connectors.ConnectorResumeView.as_view(), name="connect-resume"),
    path("connectors/<str:name>/stop", connectors.ConnectorStopView.as_view(), name="connect-stop"),
    path("connectors/<str:name>/restart", connectors.ConnectorRestartView.as_view(), name="connect-restart"),
    path("connectors/<str:name>/tasks", tasks.TaskListView.as_view(), name="connect-tasks"),
    path("connectors/<str:name>/tasks/<int:task>/status", tasks.TaskStatusView.as_view(), name="connect-task-status"),
    path(
        "connectors/<str:name>/tasks/<int:task>/restart", tasks.TaskRestartView.as_view(), name="connect-task-restart"
    ),
    path("connectors/<str:name>/offsets", offsets.OffsetsView.as_view(), name="connect-offsets"),
    path(
        "connectors/<str:name>/groups/<str:group>/translated",
        offsets.TranslatedOffsetsView.as_view(),
        name="connect-translated-offsets",
    ),
    path("connectors/<str:name>/commits", commits.CommitListView.as_view(), name="connect-commits"),
    path("connectors/<str:name>/commits/<uuid:commit_id>", commits.CommitView.as_view(), name="connect-commit"),
    path(
        "connectors/<str:name>/commits/<uuid:commit_id>/abandon",
        commits.CommitAbandonView.as_view(),
        name="connect-commit-abandon",
    ),
    path(
        "connectors/<str:name>/maintenance",
        maintenance.MaintenanceRunListView.as_view(),
        name="connect-maintenance",
    ),
    path("connector-plugins", plugins.PluginListView.as_view(), name="connect-plugins"),
    path("connector-plugins/<str:plugin>/config", plugins.PluginConfigView.as_view(), name="connect-plugin-config"),
    path(
        "connector-plugins/<str:plugin>/config/validate",
        plugins.PluginValidateView.as_view(),
        name="connect-plugin-validate",
    ),
    path("workers", workers.WorkerListView.as_view(), name="connect-workers"),
    # [\s\S], not ".": a path may hold an encoded newline.
    re_path(r"^[\s\S]*$", unknown_route, name="connect-unknown"),
]

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("connect", root.ServerInfoWithoutSlashView.as_view(), name="connect-base"),
    path("connect/", include(connect_urls)),
]
