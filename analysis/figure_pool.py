"""Figure processes started before the join, and the garbage collector kept out of a short
analysis' way.

`FigurePool` forks one process (fork start method, Linux only) as soon as app.run knows figures
will be drawn (docs/analysis.md, "Overlapping the figures with the rest"). It imports matplotlib
and the figure modules while the main process joins the runs, so that the import (0.27 s of CPU
here) is off the main process' path; given the jobs it draws them in up to `n` processes forked
from itself (the import paid once) while the main process builds the findings. Jobs
(analysis/figures.py) travel pickled: their arguments are the few hundred rows a figure draws,
not the runs. A figure drawn there is byte-identical to one drawn in the main process
(tests/test_analysis_figure_pool.py).

`quiet_gc()`: an analysis makes a few million objects that live until it ends (the imported
modules, the fetched rows); the collector's full passes over them took 0.29-0.48 s of a 10,000-run
repeat here (docs/analysis.md). Inside it the objects that exist are frozen (gc.freeze: never
scanned again; also what keeps forked processes from copying their pages) and young collections
run ten times less often; both are restored on the way out (objects frozen before stay frozen).
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import signal
import sys
import threading
from collections.abc import Callable

from analysis.figures import FigureJob, draw_all, import_drawing


def _serve(conn, n: int) -> None:
    """The pool's first process: wait for "warm" (or the end: nothing to draw), then import the
    figure modules while a thread takes the jobs off the pipe (so that the sender never waits on
    a full pipe), then draw them, in `n` processes forked from this one when there are several
    (matplotlib is imported once, here), and send back (True, paths) or (False, the error)."""
    _quiet_signals()
    if _recv(conn) != "warm":
        return
    box: list = []
    reader = threading.Thread(target=lambda: box.append(_recv(conn)), daemon=True)
    reader.start()
    import_drawing()
    reader.join()
    jobs = box[0]
    if jobs is None:
        return
    try:
        conn.send((True, [str(p) for p in draw_all(jobs, n)]))
    except Exception as exc:  # noqa: BLE001 - sent to the analysis, which raises it
        try:
            conn.send((False, exc))
        except Exception:  # noqa: BLE001 - an error that does not pickle: its text
            conn.send((False, RuntimeError(f"{type(exc).__name__}: {exc}")))


def _quiet_signals() -> None:
    """The forked process inherits the analysis' handlers, which turn SIGTERM and SIGHUP into an
    exception (common.cli): `close` (SIGTERM) then printed a 20-60 line "Process figure-pool:
    Traceback ... terminated by SIGTERM". Here they end it quietly; Ctrl-C (sent to the whole
    terminal's process group) is the analysis' to handle, which then stops this process."""
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _recv(conn):
    try:
        return conn.recv()
    except (EOFError, OSError):  # the analysis ended without sending: nothing to draw
        return None


class FigurePool:
    """A process forked now, while this one is small (the runs it fetches next are then its own
    pages, never copied on write), that imports the figure modules when told to (`warm`) and,
    given the jobs, draws them in up to `n` processes forked from itself."""

    def __init__(self, n: int) -> None:
        self.n = n
        ctx = multiprocessing.get_context("fork")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(theirs, n), name="figure-pool")
        self.proc.start()
        theirs.close()
        self.warmed = self.sent = self.done = False

    @classmethod
    def start(cls, n_jobs: int) -> FigurePool | None:
        """A pool of `n_jobs` processes, or None when that is 1 or fork is not available (not
        Linux): figures.render then draws in this process or forks when it draws."""
        if n_jobs <= 1 or not sys.platform.startswith("linux"):
            return None
        return cls(n_jobs)

    def warm(self) -> None:
        """Start importing the figure modules (figures will be drawn)."""
        if not self.warmed:
            self.warmed = True
            self.conn.send("warm")

    def submit_all(self, jobs: list[FigureJob]) -> Callable[[], list[str]]:
        """Draw figure `jobs` (once per pool); returns what waits for them and gives the paths
        written, in order (re-raising what a drawing raised)."""
        if self.sent:
            raise RuntimeError("a FigurePool draws one list of jobs")
        self.warm()
        self.sent = True
        self.conn.send(jobs)
        return self._wait

    def _wait(self) -> list[str]:
        try:
            ok, out = self.conn.recv()
        except EOFError:
            raise RuntimeError(
                f"the figure process ended without drawing (exit code {self.proc.exitcode})"
            ) from None
        self.done = True
        if not ok:
            raise out
        return out

    def close(self) -> None:
        """Stop the process: at once unless it has sent what it drew (nothing to draw, or the
        analysis failed before it waited for the figures)."""
        if not self.done:
            self.proc.terminate()
        self.conn.close()
        self.proc.join()


@contextlib.contextmanager
def quiet_gc(young_threshold: int = 7000):
    """Freeze the objects made so far and collect young objects every `young_threshold`
    allocations (CPython's default is 700) for the duration; restored after."""
    old, frozen_before = gc.get_threshold(), gc.get_freeze_count()
    gc.freeze()
    gc.set_threshold(young_threshold, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if not frozen_before:  # a caller's own frozen objects stay frozen
            gc.unfreeze()
