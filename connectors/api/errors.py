"""Errors in Kafka Connect's shape: ``{"error_code": <http status>, "message": "..."}``."""

from __future__ import annotations

import logging
from typing import Any

from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from connectors.actions import ActionError

logger = logging.getLogger(__name__)


class ConnectError(APIException):
    """An error whose status and message the view chooses, as Connect's ConnectRestException."""

    def __init__(self, status_code: int, message: str) -> None:
        self.status_code = status_code
        super().__init__(detail=message)


class BadRequest(ConnectError):
    def __init__(self, message: str) -> None:
        super().__init__(status.HTTP_400_BAD_REQUEST, message)


class NotFound(ConnectError):
    def __init__(self, message: str) -> None:
        super().__init__(status.HTTP_404_NOT_FOUND, message)


def error_body(status_code: int, message: str) -> dict[str, Any]:
    return {"error_code": status_code, "message": message}


def _message(detail: Any) -> str:
    """DRF details can be nested lists and dicts (from serializers); Connect has one string."""
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_message(value)}" for key, value in detail.items())
    if isinstance(detail, list):
        return "; ".join(_message(item) for item in detail)
    return str(detail)


def connect_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    if isinstance(exc, ActionError):
        return Response(error_body(exc.status, str(exc)), status=exc.status)
    response = drf_exception_handler(exc, context)
    if response is not None:
        # Keeps the headers DRF chose (WWW-Authenticate on 401, Retry-After on 429).
        data = response.data
        detail = data["detail"] if isinstance(data, dict) and set(data) == {"detail"} else data
        response.data = error_body(response.status_code, _message(detail))
        return response
    # Connect answers anything unexpected with a 500 in its own shape too;
    # the traceback goes to the log, not to the client.
    logger.exception("unhandled error in %s", context.get("view").__class__.__name__)
    return Response(
        error_body(500, f"Internal server error: {exc.__class__.__name__}"),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )
