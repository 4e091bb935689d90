"""The GPU check's child processes: none outlives the check (standard library only).

Each step runs in a session of its own (its process group: the step and the processes it
starts). `spawn` asks the kernel to send the step SIGINT when the check's process dies, however it
dies (PR_SET_PDEATHSIG; kill -9 included): the step stops as on Ctrl-C (a train run ends KILLED,
profiling stops ncu, which runs in a group of its own). `watch_parent`, run by the step, is the
rest: once its parent is gone it gives the step a grace period, then SIGKILL to the step's whole
group; and a step that ends after its parent is gone takes what is left of its group with it.
`stop_group` is how the check itself stops a step.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time

PR_SET_PDEATHSIG = 1


def _die_with(parent: int, libc):
    """preexec_fn of a step: SIGINT when `parent` dies (Linux; elsewhere nothing)."""

    def preexec() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0)
        if os.getppid() != parent:  # the check died before prctl: no signal would come
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def spawn(argv: list[str], **popen) -> subprocess.Popen:
    """`subprocess.Popen(argv, **popen)` in a new session, told to stop when this process dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # loaded here: nothing is loaded after fork
        getattr(libc, "prctl")
    except (OSError, AttributeError):
        libc = None
    return subprocess.Popen(
        argv, start_new_session=True, preexec_fn=_die_with(os.getpid(), libc), **popen
    )


def run_captured(argv: list[str], timeout: float, **popen) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True, timeout=...) through `spawn`: the
    command's group is stopped when it runs past `timeout` (TimeoutExpired) or the caller is
    interrupted, and it dies with this process."""
    with spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            stop_group(proc, 2.0)
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGINT to the child's process group (as Ctrl-C: ncu writes what it has), SIGKILL later."""
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait_s)
            return
        except (ProcessLookupError, PermissionError):
            return
        except subprocess.TimeoutExpired:
            continue


def parent_gone(parent: int) -> bool:
    return os.getppid() != parent


def watch_parent(parent: int, grace_s: float, every_s: float = 0.5) -> None:
    """In a step: a daemon thread that, once `parent` is gone (the step got SIGINT then), sends
    SIGKILL to this process group `grace_s` later, if this process still runs by then."""

    def watch() -> None:
        while not parent_gone(parent):
            time.sleep(every_s)
        time.sleep(grace_s)
        _signal_group(signal.SIGKILL)

    threading.Thread(target=watch, name="gpu-check-parent-watch", daemon=True).start()


def end_group_if_orphaned(parent: int) -> None:
    """A step ending after its parent is gone: SIGKILL to what is left of its group (itself last)."""
    if parent_gone(parent):
        _signal_group(signal.SIGKILL)


def _signal_group(sig: int) -> None:
    try:
        os.killpg(os.getpgrp(), sig)
    except (ProcessLookupError, PermissionError):
        pass
