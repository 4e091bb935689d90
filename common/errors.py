"""User-facing errors: one actionable line, never a traceback wall."""

from __future__ import annotations

import re

EXIT_USAGE = 2  # bad input: flags, names, paths
EXIT_FAILURE = 1  # the measurement itself failed (out of memory, corrupt data, ...)


class BenchError(Exception):
    """An error the user can act on. `str(err)` is one line saying what is wrong and what to do."""

    exit_code = EXIT_FAILURE


class UsageError(BenchError):
    """Bad input detected before any measurement (flags, model names, paths)."""

    exit_code = EXIT_USAGE


def one_line(exc: BaseException) -> str:
    """A one-line description of `exc`.

    Multi-line messages (for example an exception re-raised from a DataLoader worker, which carries
    the worker's whole traceback) are reduced to their last non-empty line, which is where Python
    puts the original `Type: message`.
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if len(lines) > 1:
        # A re-raised worker traceback ends with "module.Type: message"; our own errors lose the type.
        last = lines[-1]
        m = _TYPE_PREFIX.match(last)
        return m.group(2) if m and isinstance(exc, BenchError) else last
    return lines[0] if isinstance(exc, BenchError) else f"{type(exc).__name__}: {lines[0]}"


_TYPE_PREFIX = re.compile(r"^([\w.]+(?:Error|Exception)): (.*)$")
