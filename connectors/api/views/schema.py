"""OpenAPI pieces the views share."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse

from connectors.api.serializers import CONFIG_VALUE, ErrorMessageSerializer

# The connector the documentation's examples (and schemathesis' explicit
# phase) use, so that generated calls reach a real connector too.
EXAMPLE_CONNECTOR = "orders-sink"

NAME = OpenApiParameter(
    "name",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The connector's name.",
    examples=[OpenApiExample("connector", value=EXAMPLE_CONNECTOR)],
)
TASK = OpenApiParameter(
    "task",
    OpenApiTypes.INT,
    OpenApiParameter.PATH,
    description="The task's id (0, 1, ...).",
    examples=[OpenApiExample("first task", value=0)],
)


# Config bodies: values may be strings, numbers or booleans (kept as their
# string, as Connect's JSON mapping does); responses always hold strings.
CONFIG_BODY = {"application/json": {"type": "object", "additionalProperties": CONFIG_VALUE}}
CONFIG_PATCH_BODY = {"application/json": {"type": "object", "additionalProperties": {**CONFIG_VALUE, "nullable": True}}}
CONFIG_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorMessageSerializer, description=description)


NOT_FOUND = error("Unknown connector.")
BAD_REQUEST = error("The request is malformed or the configuration is invalid.")
FORBIDDEN = error("The user may not make this change.")


def errors(*codes: int) -> dict[int | str, Any]:
    """The error responses of an endpoint: the listed codes plus those any endpoint can give."""
    by_code = {400: BAD_REQUEST, 403: FORBIDDEN, 404: NOT_FOUND, 409: error("The connector already exists.")}
    responses: dict[int | str, Any] = {
        401: error("No valid credentials (HTTP basic or token)."),
        405: error("The method is not allowed on this path."),
        415: error("The body is not JSON."),
        500: error("An unexpected server error."),
    }
    responses.update({code: by_code[code] for code in codes})
    return responses
