"""User-facing errors: one actionable line, never a traceback wall."""

from __future__ import annotations

import functools
import re
import sys
from typing import Callable

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


def cli_entry(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a CLI `main(argv) -> exit code` so a BenchError prints `error: <line>` and exits non-zero.

    Anything else propagates: a bug should show its traceback. Under `mlflow run` the run exists
    before the script starts; if the error came before a RunSession took that run over, it is ended
    FAILED here with the reason.
    """

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except BenchError as err:
            print(f"error: {one_line(err)}", file=sys.stderr)
            _fail_pending_run(one_line(err))
            return err.exit_code
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130

    return wrapped


def _fail_pending_run(message: str) -> None:
    import os

    if os.environ.get("MLFLOW_RUN_ID"):  # RunSession removes it when it takes the run over
        from common.tracking import fail_pending_run

        fail_pending_run(message)
