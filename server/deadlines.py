"""The deadline of the RPC being served, carried to the code that waits on its behalf.

The servicer knows each call's deadline (``context.time_remaining()``); the GPU worker pool, deep
below the core, is where a call waits longest (for an idle worker). A context variable set around
the work in its executor thread carries the deadline down without threading it through every
signature; code that may wait asks :func:`remaining` and gives up with
:class:`~.errors.DeadlineExceeded` rather than run work whose caller has gone.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

from .errors import DeadlineExceeded

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("tiledispatch_deadline", default=None)


def current() -> float | None:
    """The ``time.monotonic()`` instant the current call must be answered by; ``None``: no deadline."""
    return _DEADLINE.get()


def remaining() -> float | None:
    """Seconds left before the current call's deadline (may be negative); ``None``: no deadline."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


def check(waiting_for: str) -> None:
    """Raise :class:`DeadlineExceeded` if the current call's deadline has passed."""
    left = remaining()
    if left is not None and left <= 0:
        raise DeadlineExceeded(f"the call's deadline passed while it waited for {waiting_for}; it did not run")


@contextlib.contextmanager
def scope(deadline: float | None) -> Iterator[None]:
    """Make ``deadline`` the current call's deadline inside the block (in this thread)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
