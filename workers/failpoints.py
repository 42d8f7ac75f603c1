"""Named points where a test can make a process die, to prove recovery.

``SINKADMIN_FAILPOINTS=coordinator.after_prepare=kill,participant.before_status=kill``
makes the process SIGKILL itself on reaching those points (``hang`` blocks
forever, ``stop`` freezes it until SIGCONT, ``delay:SECONDS`` sleeps the
first time the point is reached and goes on: a slow moment, not a death).
Unset in production, each point costs one dict lookup.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

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


@contextlib.contextmanager
def failpoint_while(name: str, after_s: float = 1.0) -> Iterator[None]:
    """The point ``name``, reached ``after_s`` into the block by a thread of its own: a death while the
    block waits on another process (Spark running a job). Nothing when the point is not set."""
    if name not in _ACTIVE:
        yield
        return
    timer = threading.Timer(after_s, failpoint, (name,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
