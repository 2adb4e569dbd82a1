"""Run a command as a child subreaper: every orphan below it is reaped when it dies.

Patroni starts PostgreSQL the way ``pg_ctl`` does: the postmaster is orphaned
at once and left to the init process. A container's first process often does
not reap, so a postmaster killed with SIGKILL would stay a zombie, which
Patroni takes for a live server. Started as ``python subreaper.py COMMAND...``,
this process adopts those orphans (``PR_SET_CHILD_SUBREAPER``) and reaps them
as init would, forwards SIGTERM and SIGINT to the command, and exits with the
command's status once it and every process it left behind have ended.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    """Start ``argv``, reap every process below this one until none is left; its status."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    child = subprocess.Popen(argv)

    def forward(signum: int, _frame: object) -> None:
        if child.returncode is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = None
    while True:
        try:
            pid, code = os.waitpid(-1, 0)
        except ChildProcessError:
            break  # nothing left to reap
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(code)
            status = child.returncode
    return 1 if status is None else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
