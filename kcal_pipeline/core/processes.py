"""Child processes that never outlive the process that started them (a local SPARQL server, the
`dagster dev` of `kcal ui`), even when that process is killed with SIGKILL."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def signal_when_parent_dies(sig: int) -> Callable[[], None] | None:
    """A preexec_fn: the kernel sends the child `sig` when its parent dies, even by SIGKILL (Linux
    prctl PR_SET_PDEATHSIG; elsewhere None). `sig` gets its default disposition, unblocked, in the
    child: one ignored or blocked by the caller (a Dagster run, a test runner, a `cmd &` in a
    script) is inherited and would swallow it. The death signal follows the *thread* that started
    the child, so start it from a thread that lives as long as the parent does."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the death signal was armed
            os.kill(os.getpid(), sig)

    return preexec
