"""Command-line plumbing shared by every entry point."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import signal
import threading
from typing import Callable, Iterator

from common import console
from common.errors import BenchError, Terminated, UsageError, one_line
from common.runs import fail_pending_run


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage and exiting,
    so a bad flag under `mlflow run` still ends that run FAILED with the reason (see cli_entry)."""

    def error(self, message: str):  # noqa: D102 - argparse API
        raise UsageError(f"{message} (see {self.prog} --help)")


def split_words(values) -> list[str]:
    """`--models a b`, `--models a,b` and MLproject's single quoted "a b" all mean [a, b]."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [t for v in values for t in re.split(r"[\s,]+", str(v)) if t]


def str_bool(text: str | bool) -> bool:
    """Parse MLproject-style booleans ("true"/"false"/"1"/"0"/"yes"/"no")."""
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def optional(convert: Callable | None = None) -> Callable:
    """An argparse `type` that maps "" (and "none") to None, else `convert(text)`: MLproject
    passes an empty string for a parameter the user left unset."""

    def parse(text):
        if text is None or str(text).strip().lower() in ("", "none"):
            return None
        return convert(str(text).strip()) if convert is not None else str(text).strip()

    parse.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its errors
    return parse


STOP_SIGNALS = (
    "SIGTERM",
    "SIGHUP",
)  # what timeout, systemd, Kubernetes, Slurm and a closed terminal send


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP raise `Terminated` (a KeyboardInterrupt) in the main
    thread, as Ctrl-C raises KeyboardInterrupt: runs end KILLED with the signal's name as their
    `error` and keep what was measured. Only the first such signal interrupts; later ones are
    ignored so that the run can be recorded. Outside the main thread, nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum, frame):
        if not received:
            received.append(signum)
            raise Terminated(signum)

    signums = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]
    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def cli_entry(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a CLI `main(argv) -> exit code` so a BenchError prints `error: <line>` and exits non-zero,
    and SIGTERM/SIGHUP stop it as Ctrl-C does (`stop_signals_interrupt`; exit code 128 + signal).

    Anything else propagates: a bug should show its traceback. Under `mlflow run` the run exists
    before the script starts; if the error came before a RunSession took that run over, it is ended
    FAILED here with the reason.
    """

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        try:
            with stop_signals_interrupt():
                return main(argv)
        except BenchError as err:
            console.error(one_line(err))
            if os.environ.get("MLFLOW_RUN_ID"):  # RunSession removes it when it takes the run over
                fail_pending_run(one_line(err))
            return err.exit_code
        except Terminated as exc:
            console.error(str(exc))
            return 128 + exc.signum
        except KeyboardInterrupt:
            console.error("interrupted")
            return 130

    return wrapped
