"""/connector-plugins: the sinks this service runs, their config keys, and config validation."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from connectors.api.entities import config_key_infos, plugin_infos, validation_result
from connectors.api.errors import BadRequest, NotFound
from connectors.api.serializers import ConfigInfosSerializer, ConfigKeyInfoSerializer, PluginInfoSerializer
from connectors.api.views.base import ConnectView, json_object
from connectors.api.views.schema import CONFIG_BODY, error, errors
from connectors.config import PLUGINS, Plugin, resolve_plugin, validate_config

TAG = ["connector-plugins"]
ALIAS_SUFFIX = "Connector"

PLUGIN = OpenApiParameter(
    "plugin",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="Class name, simple class name or alias of the plugin.",
    examples=[OpenApiExample("iceberg", value="IcebergSinkConnector")],
)


def find_plugin(name: str) -> Plugin | None:
    # Connect also knows a plugin by its simple name without "Connector".
    return resolve_plugin(name) or resolve_plugin(name + ALIAS_SUFFIX)


def _normalized(name: str) -> str:
    # Connect's comparison of the path's plugin with the body's connector.class.
    if name.endswith(ALIAS_SUFFIX) and len(name) > len(ALIAS_SUFFIX):
        return name[: -len(ALIAS_SUFFIX)]
    return name


class PluginListView(ConnectView):
    @extend_schema(
        operation_id="listConnectorPlugins",
        summary="List the installed plugins",
        tags=TAG,
        parameters=[
            OpenApiParameter(
                "connectorsOnly",
                OpenApiTypes.BOOL,
                description="List only connectors (default true); false adds the converters.",
            )
        ],
        responses={200: PluginInfoSerializer(many=True), **errors()},
    )
    def get(self, request: Request) -> Response:
        raw = request.query_params.get("connectorsOnly")
        connectors_only = raw is None or raw.strip().lower() == "true"
        return Response(plugin_infos(PLUGINS, connectors_only=connectors_only))


class PluginConfigView(ConnectView):
    @extend_schema(
        operation_id="getConnectorConfigDef",
        summary="The config keys of a plugin",
        tags=TAG,
        parameters=[PLUGIN],
        responses={200: ConfigKeyInfoSerializer(many=True), **errors(), 404: error("Unknown plugin.")},
    )
    def get(self, request: Request, plugin: str) -> Response:
        found = find_plugin(plugin)
        if found is None:
            raise NotFound(f"Unknown plugin {plugin}.")
        return Response(config_key_infos(found))


class PluginValidateView(ConnectView):
    # Validating changes nothing: any logged-in user may.
    required_permissions = {"PUT": ()}

    @extend_schema(
        operation_id="validateConfigs",
        summary="Validate a config",
        description="The same validator as the web form and the admin; errors are reported per key. Without "
        "connector.class in the body, the plugin in the path is used.",
        tags=TAG,
        parameters=[PLUGIN],
        request=CONFIG_BODY,
        responses={200: ConfigInfosSerializer, **errors(400)},
    )
    def put(self, request: Request, plugin: str) -> Response:
        config = json_object(request, "Connector configuration")
        path_plugin = find_plugin(plugin)
        included = config.get("connector.class")
        if included is None:
            config["connector.class"] = path_plugin.class_name if path_plugin else plugin
        else:
            included = str(included)
            same = (path_plugin is not None and resolve_plugin(included) is path_plugin) or _normalized(
                included
            ).endswith(_normalized(plugin))
            if not same:
                raise BadRequest(f"Included connector type {included} does not match request type {plugin}")
        return Response(validation_result(validate_config(config)))
