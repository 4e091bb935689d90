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
    """A one-line description of `exc`, from the meaningful part of its message.

    Multi-line messages are reduced to one line: an exception re-raised from a DataLoader worker
    carries the worker's whole traceback, which ends with the original `Type: message`; a
    SQLAlchemy error names its DB-API error on a line of its own, `(sqlite3.OperationalError)
    attempt to write a readonly database`, among lines of SQL and a help link; an MLflow REST error
    appends the page the server answered (`Response body: '<!DOCTYPE HTML>...`). Otherwise the
    first line says what happened.
    """
    text = str(exc).split(" Response body:", 1)[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not _NOISE.match(ln.strip())]
    if not lines:
        return type(exc).__name__
    dbapi = next((m for m in map(_DBAPI.match, lines) if m), None)
    if dbapi:
        return f"{dbapi.group(1)}: {dbapi.group(2)}"
    if len(lines) > 1:
        # A re-raised worker traceback ends with "module.Type: message"; our own errors lose the type.
        m = _TYPE_PREFIX.match(lines[-1])
        if m:
            return m.group(2) if isinstance(exc, BenchError) else lines[-1]
    return lines[0] if isinstance(exc, BenchError) else f"{type(exc).__name__}: {lines[0]}"


_TYPE_PREFIX = re.compile(r"^([\w.]+(?:Error|Exception)): (.*)$")
_DBAPI = re.compile(r"^\(([\w.]+(?:Error|Exception))\) (.+)$")
# lines that never say what went wrong: SQLAlchemy's statement, parameters, help link and
# autoflush remark; a source excerpt's caret line
_NOISE = re.compile(
    r"^(\[SQL: |\[parameters: |\(Background on this error at: |\(raised as a result of )|^[\s^~]*$"
)
