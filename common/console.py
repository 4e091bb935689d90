"""The one way commands tell the user things.

* `result(text)`: the line a command exists to print (a summary, a table): stdout, always.
* `info(text)`: progress and what is being done ("importing x ..."): stderr, unless quiet.
* `note(text)`: "note: ..." on stderr, unless quiet: something the user may want to know.
* `warn(text)`: "warning: ..." on stderr, always: a number may be wrong or incomplete.
* `error(text)`: "error: ..." on stderr, always (used by the CLI wrapper, common.cli.cli_entry).

Every line goes through common.server.redact first: a URI with a password in it is never printed.

`quiet()` is a context manager that silences info and note inside it (a sweep's children, a test);
it nests and is per process. No `say=` callables and `quiet=` flags: callers that want to
capture messages use pytest's capsys/capfd, as users see them.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from common.server import redact

_quiet_depth = 0


def result(text: str) -> None:
    print(redact(text), file=sys.stdout, flush=True)


def info(text: str) -> None:
    if not _quiet_depth:
        print(redact(text), file=sys.stderr, flush=True)


def note(text: str) -> None:
    info(f"note: {text}")


def warn(text: str) -> None:
    print(redact(f"warning: {text}"), file=sys.stderr, flush=True)


def error(text: str) -> None:
    print(redact(f"error: {text}"), file=sys.stderr, flush=True)


def is_quiet() -> bool:
    return bool(_quiet_depth)


@contextlib.contextmanager
def quiet(enabled: bool = True) -> Iterator[None]:
    """Silence info() and note() inside the block (when `enabled`); warnings still print."""
    global _quiet_depth
    _quiet_depth += int(bool(enabled))
    try:
        yield
    finally:
        _quiet_depth -= int(bool(enabled))
