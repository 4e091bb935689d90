"""Any rank failing ends the job, and the run says which rank and why.

How a failure travels (docs/distributed.md, "Failures"):

* A collective waits at most `--collective-timeout-s` (the process group's timeout), so a lost or
  hung peer ends in an error, not a hang.
* A rank whose step raises writes a one-line report to the **board**, the key-value store torchrun
  already runs for the job (the agent's TCPStore, reachable from every node, alive after a worker
  dies), then exits non-zero. torchrun then stops the other workers of its node with SIGTERM; on
  other nodes, their next collective fails (the peer's sockets close, or the timeout expires).
* SIGTERM cannot wait for Python's main thread, which may sit in a blocking collective or a device
  synchronisation until the timeout. So a watcher thread wakes on it (through
  `signal.set_wakeup_fd`, written by the C-level handler whatever the main thread does), reports
  "terminated" to the board and, on rank 0, ends the run before exiting.
* Rank 0 (the only rank holding the run) names the culprit with `blame`: the earliest rank whose
  own code failed (not a communication error, which is what peers of a failed rank see), else the
  ranks that never reported (killed by a signal: SIGKILL, the OOM killer, a lost node), else the
  earliest communication error (a timeout). Only SIGTERM reports everywhere means the job was
  stopped from outside: KILLED.

`classify` and `blame` are pure; `Board` and `Guard` are the thin edge.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable, Iterator

from common import console
from common.errors import BenchError, one_line

KIND_ERROR = "error"  # the rank's own code failed (out of memory, bad data, a bug)
KIND_COMM = "comm"  # a collective failed: what the peers of a failed or lost rank see
KIND_SIGNAL = "signal"  # the rank was told to stop (torchrun's SIGTERM, a user)

REPORT_WAIT_S = 10.0  # how long rank 0 waits for the other ranks' reports (torchrun kills at 30 s)

_COMM_MARKERS = re.compile(
    r"gloo|nccl|connection (reset|closed|refused)|broken pipe|timed out|timeout|"
    r"socket|process group|collective",
    re.IGNORECASE,
)


def classify(exc: BaseException) -> str:
    """KIND_COMM for a failed collective (torch's DistError, or a backend error such as gloo's
    "Connection reset by peer" or a timeout, anywhere in the exception's chain), else KIND_ERROR."""
    from torch.distributed import DistError

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DistError) or (
            isinstance(exc, RuntimeError) and _COMM_MARKERS.search(str(exc))
        ):
            return KIND_COMM
        exc = exc.__cause__ or exc.__context__
    return KIND_ERROR


@dataclass
class Report:
    rank: int
    kind: str
    reason: str
    t: float
    """time.time() when the rank reported"""


def blame(
    reports: dict[int, Report],
    ranks: list,
    dead: Callable[[object], bool | None],
) -> tuple[str, str]:
    """(status, one-line reason) of a job that failed, from the ranks' reports.

    `ranks` are context.RankInfo by rank; `dead(info)` is True when that rank's process is known
    to be gone, False when known alive, None when unknown (another host).
    """
    errors = sorted((r for r in reports.values() if r.kind == KIND_ERROR), key=lambda r: r.t)
    if errors:
        first = errors[0]
        more = f" ({len(errors) - 1} other rank(s) failed too)" if len(errors) > 1 else ""
        return (
            "FAILED",
            f"rank {first.rank} on {_host(ranks, first.rank)} failed: {first.reason}{more}",
        )
    comm = sorted((r for r in reports.values() if r.kind == KIND_COMM), key=lambda r: r.t)
    silent = [info for info in ranks if info.rank not in reports]
    if silent:
        gone = [i for i in silent if dead(i)]
        if gone:
            return "FAILED", (
                f"{_names(gone)} ended without reporting a reason (killed by a signal: SIGKILL, "
                "the out-of-memory killer?)"
            )
        seen = f"; rank {comm[0].rank} saw: {comm[0].reason[:300]}" if comm else ""
        return "FAILED", (
            f"{_names(silent)} did not report within {REPORT_WAIT_S:.0f} s (hung, or its node "
            f"was lost){seen}"
        )
    if comm:
        first = comm[0]
        return "FAILED", f"rank {first.rank} on {_host(ranks, first.rank)}: {first.reason}"
    signals = sorted({r.reason for r in reports.values()})
    return "KILLED", f"{'; '.join(signals)} (every rank)"


def _host(ranks: list, rank: int) -> str:
    return ranks[rank].host if rank < len(ranks) else "?"


def _names(infos: list) -> str:
    head = "rank" if len(infos) == 1 else "ranks"
    return f"{head} " + ", ".join(f"{i.rank} (pid {i.pid} on {i.host})" for i in infos)


class Board:
    """Failure reports in the job's store, one key per rank. Store errors are swallowed: the board
    is how a reason travels, never a new reason to fail."""

    PREFIX = "roofline_failure/"

    def __init__(self, store, world_size: int) -> None:
        self.store = store
        self.world_size = world_size

    def report(self, rank: int, kind: str, reason: str) -> None:
        payload = json.dumps({"kind": kind, "reason": reason[:2000], "t": time.time()})
        try:
            self.store.set(f"{self.PREFIX}{rank}", payload)
        except Exception:  # noqa: BLE001 - the store is gone (its host died): nothing to tell
            pass

    def reports(self) -> dict[int, Report]:
        out = {}
        for rank in range(self.world_size):
            key = f"{self.PREFIX}{rank}"
            try:
                if not self.store.check([key]):
                    continue
                data = json.loads(self.store.get(key))
            except Exception:  # noqa: BLE001
                continue
            out[rank] = Report(rank, data["kind"], data["reason"], data["t"])
        return out


def pid_gone(info, host: str | None = None) -> bool | None:
    """Whether the process of a rank (context.RankInfo) has ended: known only on this host."""
    if info.host != (host or socket.gethostname()):
        return None
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Guard:
    """This rank's failure handling for the body of a distributed run (a context manager).

    Inside it, SIGTERM is caught by a watcher thread (see the module docstring). Rank 0 gives the
    guard what ends its record (`hold(end)`, around the run): `end(status, reason)` ends the run
    (or writes a sweep child's result file). The main thread holds the guard's lock around every
    write to that record except while measuring (`released()`); the watcher ends the record only
    under the lock, so the two never write at once and the record is ended once.
    """

    def __init__(self, ctx, board: Board | None = None, wait_s: float = REPORT_WAIT_S) -> None:
        self.ctx = ctx
        self.board = board if board is not None else Board(_default_store(), ctx.world_size)
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._end: Callable[[str, str], None] | None = None
        self._done = False
        self._previous = None
        self._pipe: tuple[int, int] | None = None

    # ------------------------------------------------------------------ the body's errors
    def blamed(self, body: Callable[[], object]):
        """Run `body`; if it raises, report this rank's failure. Rank 0 raises a BenchError that
        names the rank to blame (it waits for the others' reports if it only saw a failed
        collective); other ranks re-raise with their rank in the message."""
        try:
            return body()
        except KeyboardInterrupt:
            self.board.report(self.ctx.rank, KIND_SIGNAL, "interrupted")
            raise
        except BaseException as exc:
            kind = classify(exc)
            self.board.report(self.ctx.rank, kind, one_line(exc))
            if self.ctx.rank != 0:
                raise BenchError(f"rank {self.ctx.rank}: {one_line(exc)}") from exc
            _status, reason = self.verdict(wait=kind == KIND_COMM)
            raise BenchError(reason) from exc

    def verdict(self, wait: bool = True) -> tuple[str, str]:
        """(status, reason) from the board, after waiting (up to wait_s) until every rank has
        reported or is known to be gone."""
        deadline = time.monotonic() + (self.wait_s if wait else 0.0)
        while True:
            reports = self.board.reports()
            pending = [i for i in self.ctx.ranks if i.rank not in reports and not pid_gone(i)]
            if not pending or time.monotonic() >= deadline:
                return blame(reports, self.ctx.ranks, pid_gone)
            time.sleep(0.1)

    # ------------------------------------------------------------------ the record and the lock
    @contextmanager
    def hold(self, end: Callable[[str, str], None]) -> Iterator[None]:
        """Around rank 0's record (open to end): the watcher may end it with `end(status, reason)`
        while it is not ended yet and the main thread is measuring."""
        with self._lock:
            self._end = end
            try:
                yield
            finally:
                self._done = True

    @contextmanager
    def released(self) -> Iterator[None]:
        """Inside `hold`: the main thread does not write the record here (it measures)."""
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()

    # ------------------------------------------------------------------ SIGTERM
    def __enter__(self) -> "Guard":
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._previous = (
            signal.signal(signal.SIGTERM, _ignore),
            signal.set_wakeup_fd(w),
        )
        global _fork_hook
        if not _fork_hook:
            os.register_at_fork(after_in_child=_forget_in_child)
            _fork_hook = True
        threading.Thread(target=self._watch, name="sigterm-watcher", daemon=True).start()
        return self

    def __exit__(self, *exc) -> bool:
        handler, fd = self._previous
        signal.set_wakeup_fd(fd)
        signal.signal(signal.SIGTERM, handler)
        os.close(self._pipe[1])  # the watcher reads end-of-file and returns
        return False

    def _watch(self) -> None:
        r = self._pipe[0]
        while True:
            data = os.read(r, 1)
            if not data:
                return  # the pipe was closed (the guard is gone)
            if data[0] == signal.SIGTERM:
                break
        self.board.report(self.ctx.rank, KIND_SIGNAL, "terminated by SIGTERM")
        if self.ctx.rank == 0:
            with self._lock:  # the main thread is measuring, or done with the record
                if self._end is not None and not self._done:
                    status, reason = self.verdict()
                    try:
                        self._end(status, reason)
                    finally:
                        self._done = True
                        console.error(reason)
                elif self._done:
                    return  # the main thread ended the record and is exiting on its own
        os._exit(128 + signal.SIGTERM)


class NoGuard:
    """The guard of a run without ranks: holds nothing."""

    def hold(self, end) -> nullcontext:
        return nullcontext()

    def released(self) -> nullcontext:
        return nullcontext()


_fork_hook = False


def _ignore(signum, frame) -> None:
    """SIGTERM's Python-level handler: nothing (the watcher thread acts; see Guard)."""


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) must not wake its parent's watcher with its signals."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # forked from a thread other than the main one
        pass


def _default_store():
    import torch.distributed as dist

    return dist.distributed_c10d._get_default_store()
