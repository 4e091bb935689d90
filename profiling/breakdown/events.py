"""A profiler event as plain data, made from torch's kineto results or by a test.

`Ev` holds what the attribution needs and nothing torch-specific: the name, start and end in
nanoseconds on one clock, the thread (kineto's small thread ids, the same for every event of a
thread), the autograd sequence number and forward thread of an op or a backward node, the
correlation ids that tie a device kernel (or a runtime call such as cudaLaunchKernel) to the CPU
op that launched it, and the kind of event.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU = "cpu"  # ops and ranges on a host thread
KERNEL = "kernel"  # a device kernel
MEMCPY = "memcpy"  # a device copy (name says the direction: "Memcpy HtoD ...")
MEMSET = "memset"
RUNTIME = "runtime"  # cudaLaunchKernel and friends, on a host thread
DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)


@dataclass(frozen=True)
class Ev:
    name: str
    start_ns: int
    end_ns: int
    thread: int = 1
    seq: int = -1
    """autograd sequence number (forward ops, and backward nodes: the node's), -1 when none"""
    fwd_thread: int = 0
    """backward nodes: the thread that ran the forward op that made them (0: unknown)"""
    corr: int = 0
    """correlation id of a CPU op"""
    linked_corr: int = 0
    """device events and runtime calls: the correlation id of the CPU op that launched them"""
    kind: str = CPU

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def on_device(self) -> bool:
        return self.kind in DEVICE_KINDS


_KINDS = {
    "cpu_op": CPU,
    "user_annotation": CPU,
    "python_function": CPU,
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "gpu_memset": MEMSET,
}


def _kind(activity: str) -> str | None:
    """The kind of a kineto activity type (its ActivityType's name); None for the ones the
    breakdown does not read (device-side copies of annotations, instants, overhead, syncs)."""
    activity = activity.lower()
    if activity in _KINDS:
        return _KINDS[activity]
    if activity.endswith("_runtime") or activity.endswith("_driver"):
        return RUNTIME
    return None


def from_kineto(results) -> list[Ev]:
    """The events of `torch.profiler.profile(...).profiler.kineto_results`, in trace order.

    Asynchronous events (start and end on different threads) and zero-length instants are left
    out: they are neither nested host ranges nor device work.
    """
    out = []
    for e in results.events():
        kind = _kind(str(e.activity_type() or ""))
        if kind is None:
            continue
        if kind == CPU and (e.is_async() or e.start_thread_id() != e.end_thread_id()):
            continue
        start = int(e.start_ns())
        end = int(e.end_ns()) if hasattr(e, "end_ns") else start + int(e.duration_ns())
        out.append(
            Ev(
                name=e.name(),
                start_ns=start,
                end_ns=max(start, end),
                thread=int(e.start_thread_id()) if kind in (CPU, RUNTIME) else -1,
                seq=int(e.sequence_nr()),
                fwd_thread=int(e.fwd_thread_id()),
                corr=int(e.correlation_id()),
                linked_corr=int(e.linked_correlation_id()),
                kind=kind,
            )
        )
    return out
