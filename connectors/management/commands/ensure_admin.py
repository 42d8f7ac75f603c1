from __future__ import annotations

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create or update the admin user from SINKADMIN_ADMIN_USER / SINKADMIN_ADMIN_PASSWORD."

    def handle(self, *args: Any, **options: Any) -> None:
        username = os.environ.get("SINKADMIN_ADMIN_USER") or "admin"
        password = os.environ.get("SINKADMIN_ADMIN_PASSWORD")
        User = get_user_model()
        user, created = User.objects.get_or_create(username=username, defaults={"is_staff": True, "is_superuser": True})
        if password:
            user.set_password(password)
            self.stdout.write(f"admin user {username!r}: password set from SINKADMIN_ADMIN_PASSWORD")
        elif created or not user.has_usable_password():
            password = secrets.token_urlsafe(12)
            user.set_password(password)
            self.stdout.write(f"admin user {username!r} created with generated password: {password}")
        else:
            self.stdout.write(f"admin user {username!r} exists; password unchanged")
        user.is_staff = True
        user.is_superuser = True
        user.save()
