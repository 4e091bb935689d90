"""Facts about the device that decide what is measured and how large: compute capability, native
bf16, free memory, cache sizes (CUDA: the L2; CPU: sysfs), the CPU's matrix instruction flags."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


@dataclass(frozen=True)
class DeviceFacts:
    capability: tuple[int, int] | None = None
    bf16_supported: bool = False
    llc_bytes: int | None = None  # CPU last-level caches (all instances) or GPU L2
    free_bytes: int | None = None  # memory the measurement may use
    l2_bytes: int | None = None  # L2 the measuring threads use (CPU: per-core L2s) or GPU L2


def device_facts(device: str) -> DeviceFacts:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        free, _total = torch.cuda.mem_get_info(dev)
        l2 = int(getattr(props, "L2_cache_size", 0)) or None
        return DeviceFacts(
            (props.major, props.minor),
            bool(torch.cuda.is_bf16_supported(including_emulation=False)),
            l2,
            int(free),
            l2,
        )
    if dev.type == "mps":
        return DeviceFacts(
            None, bool(torch.backends.mps.is_macos_or_newer(14, 0)), None, _available_ram()
        )
    threads = min(torch.get_num_threads(), _usable_cpus())
    return DeviceFacts(
        None, True, cpu_last_level_cache_bytes(), _available_ram(), cpu_cache_bytes(2, cpus=threads)
    )


def _available_ram() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - optional fact
        return None


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _count_cpus(cpu_list: str) -> int:
    """'0-3,8,10-11' -> 7 (sysfs shared_cpu_list)."""
    count = 0
    for part in cpu_list.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            count += int(hi) - int(lo) + 1
        elif part.strip():
            count += 1
    return count


@dataclass(frozen=True)
class CacheInfo:
    level: int
    size_bytes: int  # one instance
    cpus_sharing: int  # CPUs sharing one instance; 0 when sysfs does not say


def cpu_caches(root: str = SYSFS_CACHE) -> list[CacheInfo]:
    """cpu0's data and unified caches from sysfs (Linux), e.g. level 3, 491520K shared by CPUs 0-1."""
    out = []
    for index in sorted(Path(root).glob("index*")):
        try:
            level = int((index / "level").read_text().strip())
            size_text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        try:
            if (index / "type").read_text().strip().lower() == "instruction":
                continue
        except OSError:
            pass
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size_text[-1:], 1)
        digits = size_text.rstrip("KMG")
        if not digits.isdigit():
            continue
        try:
            sharing = _count_cpus((index / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            sharing = 0
        out.append(CacheInfo(level, int(digits) * scale, sharing))
    return out


def cpu_cache_bytes(level: int, root: str = SYSFS_CACHE, cpus: int | None = None) -> int | None:
    """Total size of the level-`level` caches that `cpus` CPUs (default: all) use: one instance's
    size times ceil(cpus / CPUs sharing one instance); one instance when sysfs does not say."""
    found = [c for c in cpu_caches(root) if c.level == level]
    if not found:
        return None
    cache = max(found, key=lambda c: c.size_bytes)
    cpus = cpus or os.cpu_count() or 1
    instances = math.ceil(cpus / cache.cpus_sharing) if cache.cpus_sharing else 1
    return cache.size_bytes * instances


def cpu_last_level_cache_bytes(root: str = SYSFS_CACHE, cpus: int | None = None) -> int | None:
    """Total size of the highest cache level (all its instances), e.g. one 491520K L3 -> 503316480."""
    caches = cpu_caches(root)
    return cpu_cache_bytes(max(c.level for c in caches), root, cpus) if caches else None


def cpu_matrix_flags(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's matrix/low-precision flags (AMX, AVX512-BF16/FP16, AVX-VNNI) from /proc/cpuinfo."""
    wanted = (
        "amx_bf16",
        "amx_fp16",
        "amx_tile",
        "avx512_bf16",
        "avx512_fp16",
        "avx_vnni",
        "avx512f",
        "avx2",
    )
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return " ".join(f for f in wanted if f in have) or "none"
    except OSError:
        pass
    return "unknown"
