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


# Device-side events that are neither work nor copies: kineto's CUDA_SYNC activities.
_SYNC_NAMES = ("Stream Sync", "Event Sync", "Context Sync", "Stream Wait Event", "Device Sync")
_RUNTIME_PREFIXES = ("cuda", "cu", "hip", "xpu", "mtia")


def _kind_without_activity_type(e) -> str | None:
    """The kind of a kineto event on a torch whose `_KinetoEvent` has no `activity_type()` (a
    private method: torch 2.11 lacks it), from what every such event has: `device_type()`
    (torch.autograd.DeviceType), `is_user_annotation()`, the name and the linked correlation id.

    Host events: a runtime or driver call is the one that names a launched correlation id (or is
    called cudaXxx / cuXxx); anything else is an op or a range. Device events: copies and sets are
    named "Memcpy ..." / "Memset ...", device copies of annotations and syncs are left out, the
    rest are kernels.
    """
    on_host = str(e.device_type()).rsplit(".", 1)[-1] == "CPU"
    name = e.name()
    if on_host:
        if e.is_user_annotation():
            return CPU
        linked = int(e.linked_correlation_id()) if hasattr(e, "linked_correlation_id") else 0
        if linked or _looks_like_runtime(name):
            return RUNTIME
        return CPU
    if e.is_user_annotation() or name.startswith(_SYNC_NAMES):
        return None
    lowered = name.lower()
    if lowered.startswith("memcpy"):
        return MEMCPY
    if lowered.startswith("memset"):
        return MEMSET
    return KERNEL


def _looks_like_runtime(name: str) -> bool:
    """cudaLaunchKernel, cuLaunchKernelEx, hipMemcpyAsync: a prefix then a capital letter."""
    for prefix in _RUNTIME_PREFIXES:
        rest = name[len(prefix) :]
        if name.startswith(prefix) and rest[:1].isupper():
            return True
    return False


def event_kind(e) -> str | None:
    """The kind of one `_KinetoEvent` (None: not read), by `activity_type()` where this torch has
    it, else by `_kind_without_activity_type`."""
    activity_type = getattr(e, "activity_type", None)
    if activity_type is None:
        return _kind_without_activity_type(e)
    return _kind(str(activity_type() or ""))


def from_kineto(results) -> list[Ev]:
    """The events of `torch.profiler.profile(...).profiler.kineto_results`, in trace order.

    Asynchronous events (start and end on different threads) and zero-length instants are left
    out: they are neither nested host ranges nor device work.
    """
    out = []
    for e in results.events():
        kind = event_kind(e)
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
