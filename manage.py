#!/usr/bin/env python
"""Django's command-line utility for sinkadmin."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sinkadmin.settings")
    from django.core.management import execute_from_command_line

    from sinkadmin.env import SettingError

    try:
        execute_from_command_line(sys.argv)
    except SettingError as exc:
        # A bad setting is the operator's to fix: say which one, skip the traceback.
        sys.exit(f"sinkadmin: configuration error: {exc}")


if __name__ == "__main__":
    main()
