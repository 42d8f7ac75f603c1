"""Who may do what through the API: any logged-in user may read; writes need
the same Django model permissions the admin asks for."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

ADD = "connectors.add_connector"
CHANGE = "connectors.change_connector"
DELETE = "connectors.delete_connector"


class ConnectPermission(BasePermission):
    """Reads need a login; a write needs the view's ``required_permissions[method]`` (default: change)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        needed = getattr(view, "required_permissions", {}).get(request.method)
        if needed is None:
            needed = () if request.method in SAFE_METHODS else (CHANGE,)
        return bool(user.has_perms(needed))
