"""Named points where a test can make a process die, to prove recovery.

``SINKADMIN_FAILPOINTS=coordinator.after_prepare=kill,participant.before_status=kill``
makes the process SIGKILL itself on reaching those points (``hang`` blocks
forever, ``stop`` freezes it until SIGCONT, ``delay:SECONDS`` sleeps the
first time the point is reached and goes on: a slow moment, not a death).
Unset in production, each point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import time

_ACTIVE: dict[str, str] = {}
_DELAYED: set[str] = set()
for _item in filter(None, os.environ.get("SINKADMIN_FAILPOINTS", "").split(",")):
    _name, _, _action = _item.partition("=")
    _ACTIVE[_name.strip()] = _action.strip() or "kill"


def failpoint(name: str) -> None:
    action = _ACTIVE.get(name)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "hang":
        signal.pause()
    elif action == "stop":
        # Frozen until the test sends SIGCONT: a zombie in the making.
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action is not None and action.startswith("delay:") and name not in _DELAYED:
        _DELAYED.add(name)
        time.sleep(float(action.removeprefix("delay:")))
