"""`kcal ui` (and `make ui`): `dagster dev` on the store, and a stop that leaves no process behind.

Why not `dagster dev` alone: it stops its webserver, daemon and code server only when it gets
SIGINT itself, and it sets SIGTERM to whatever SIGINT does. Started from a script in the
background (`cmd &` without job control, as CI and nohup launches do), it inherits SIGINT
*ignored*: Python then installs no KeyboardInterrupt handler, so `kill -INT` and `kill -TERM` both
do nothing, and SIGKILL leaves the webserver, the daemon and the code server orphaned. Inside kcal
the same happens with SIGINT *blocked* (kcal's Ctrl-C handling blocks it, and children inherit
the mask).

So the launcher runs `dagster dev` in a session and process group of its own, with SIGINT
unblocked and at its default (exec resets a handled signal to the default), and takes Ctrl-C,
SIGTERM and SIGHUP itself: it sends SIGINT to the whole group (what a terminal's Ctrl-C does), waits
`grace` seconds, then SIGTERM, then SIGKILL. Whatever is still in the group when `dagster dev` has
exited (a run worker) is ended the same way. A second Ctrl-C kills the group at once. Should the
launcher itself be killed (SIGKILL), the kernel sends `dagster dev` SIGINT (Linux parent-death
signal), so it still stops its services; and since a killed launcher cannot escalate when one of
them hangs (Dagster's daemon has, now and then), a reaper process (core/processes.py GroupReaper)
that outlives it ends what is left of the group after `grace`.

Beside the UI, the launcher serves KCAL_HOME/reports over http (kcal_pipeline/core/report_server.py),
in a thread of its own process: started once `dagster dev` is (no fork while it runs) and stopped
when `dagster dev` has stopped; a killed launcher takes the thread, and its port, with it.

`dagster dev` warns that `dg dev` supersedes it. `dg dev` needs another package (dagster-dg-cli,
not installed with dagster 1.13) and a dg project layout (pyproject's [tool.dg], a `defs` module)
where kcal has a workspace.yaml and one Definitions object. So kcal keeps `dagster dev`, and the
launcher silences that one warning (-W matching its message: a category given to -W is imported at
interpreter start-up, which fails for Dagster's).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from kcal_pipeline.core.processes import (
    end_group,
    signal_group,
    signal_when_parent_dies,
    start_group_reaper,
)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 30.0  # dagster dev itself waits up to 60 s per service; a loaded 2-CPU machine needs ~5
WORKSPACE = Path(__file__).resolve().parents[1] / "workspace.yaml"
# dagster dev's SupersessionWarning (a FutureWarning), matched by the start of its message
NO_SUPERSESSION_WARNING = "ignore:Function `dev_command` is superseded:FutureWarning"


def dagster_dev(workspace: Path = WORKSPACE, host: str = "127.0.0.1", port: int | None = None) -> list[str]:
    """The `dagster dev` command line, run by this interpreter (the venv that has kcal)."""
    command = [sys.executable, "-W", NO_SUPERSESSION_WARNING, "-m", "dagster", "dev", "-w", str(workspace)]
    command += ["--host", host]
    return command + (["--port", str(port)] if port else [])


def serve(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    grace: float = GRACE_S,
    log: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    alongside: Sequence[AbstractContextManager] = (),
) -> int:
    """Run `command` (dagster dev) until it exits or a stop signal comes; returns its exit code, or
    130 when it was stopped. No process of its group outlives this call. `alongside` (the report
    server) are entered once the command has started and exited after its group has ended."""
    requests: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: requests.append(signum)) for s in STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # the child inherits the mask
    leader = reaper = None
    companions = contextlib.ExitStack()
    try:
        env = None if env is None else dict(env)
        leader = subprocess.Popen(
            list(command), env=env, start_new_session=True, preexec_fn=signal_when_parent_dies(signal.SIGINT)
        )
        reaper = start_group_reaper(leader.pid, grace)
        for companion in alongside:
            companions.enter_context(companion)
        stopping_since = None
        while leader.poll() is None:
            if requests and stopping_since is None:
                log("kcal: stopping the Dagster UI (Ctrl-C again to kill it at once)")
                signal_group(leader.pid, signal.SIGINT)
                stopping_since = time.monotonic()
            elif stopping_since is not None and len(requests) > 1:
                log("kcal: killing the Dagster UI")
                signal_group(leader.pid, signal.SIGKILL)
            elif stopping_since is not None and time.monotonic() - stopping_since > grace:
                log(f"kcal: the Dagster UI did not stop within {grace:.0f} s; ending its processes")
                break
            time.sleep(0.1)
        return 130 if requests else leader.returncode if leader.returncode is not None else 1
    finally:
        if leader is not None:
            end_group(leader.pid, leader)
            leader.wait()
        if reaper is not None:
            reaper.release()
        companions.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
