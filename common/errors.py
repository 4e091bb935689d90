"""User-facing errors: one actionable line, never a traceback wall."""

from __future__ import annotations

import re
import signal

EXIT_USAGE = 2  # bad input: flags, names, paths
EXIT_FAILURE = 1  # the measurement itself failed (out of memory, corrupt data, ...)


class BenchError(Exception):
    """An error the user can act on. `str(err)` is one line saying what is wrong and what to do."""

    exit_code = EXIT_FAILURE


class UsageError(BenchError):
    """Bad input detected before any measurement (flags, model names, paths)."""

    exit_code = EXIT_USAGE


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by a signal other than Ctrl-C (SIGTERM: `timeout`, systemd,
    Kubernetes, Slurm; SIGHUP: the terminal closed). An interrupt like Ctrl-C's, so that the same code
    ends runs KILLED and keeps what was measured; common.cli installs the handlers that raise it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")


def one_line(exc: BaseException) -> str:
    """A one-line description of `exc`, from the meaningful part of its message.

    Multi-line messages come in two shapes. An exception re-raised from a DataLoader worker carries
    the worker's whole traceback and ends with the original `module.Type: message`: that last line
    is the one. Others put the reason first and context after it (SQLAlchemy adds the SQL, its
    parameters and "(Background on this error at: https://sqlalche.me/...)"; MLflow's HTTP errors
    add the response body, an HTML page from a server that is not MLflow): the first line that is
    not such context is the one.
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if len(lines) > 1:
        last = lines[-1]
        m = _TYPE_PREFIX.match(last)
        if m:  # a re-raised traceback; our own errors lose the type
            return m.group(2) if isinstance(exc, BenchError) else last
        lines = [ln for ln in lines if not ln.startswith(_CONTEXT_LINES)] or lines
    return lines[0] if isinstance(exc, BenchError) else f"{type(exc).__name__}: {lines[0]}"


_TYPE_PREFIX = re.compile(r"^([\w.]+(?:Error|Exception)): (.*)$")
# lines that give context to a message rather than say what went wrong (SQLAlchemy's)
_CONTEXT_LINES = (
    "(Background on this error at:",
    "[SQL:",
    "[parameters:",
    "(raised as a result of",
)
