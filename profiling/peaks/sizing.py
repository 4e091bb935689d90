"""How large the STREAM arrays are, and whether the buffers fit. Pure: the caller supplies the facts.

Warnings are returned as text (without the "warning: " prefix common.console.warn adds).
"""

from __future__ import annotations

from typing import Protocol

from common.errors import UsageError

MIB = 2**20
DRAM_MIN_ARRAY_BYTES = 512 * MIB  # automatic STREAM array size: at least this ...
DRAM_LLC_FACTOR = 4  # ... and at least 4x the last-level cache (STREAM's rule) ...
# ... but the three arrays take at most this fraction of available memory
DRAM_MEMORY_FRACTION = 0.5
L2_FILL_FRACTION = 0.5  # the three L2 STREAM arrays together fill this fraction of the L2
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}


class MemoryFacts(Protocol):
    llc_bytes: int | None  # the last-level cache, all instances
    free_bytes: int | None  # memory the measurement may use


def dram_array_bytes(llc_bytes: int | None, available_bytes: int | None) -> tuple[int, str | None]:
    """(bytes per DRAM STREAM array, warning or None): the automatic size, in whole MiB.

    max(DRAM_MIN_ARRAY_BYTES, DRAM_LLC_FACTOR x the last-level cache), so the arrays are "far
    larger than the last-level cache" on any host; capped so the three arrays take at most
    DRAM_MEMORY_FRACTION of the available memory, with a warning saying what the cap costs.
    """
    want = max(DRAM_MIN_ARRAY_BYTES, DRAM_LLC_FACTOR * int(llc_bytes or 0))
    want = -(-want // MIB) * MIB
    if available_bytes:
        cap = max(MIB, int(DRAM_MEMORY_FRACTION * available_bytes / 3) // MIB * MIB)
        if want > cap:
            why = (
                f"4x the {llc_bytes / MIB:.0f} MiB last-level cache"
                if llc_bytes and want > DRAM_MIN_ARRAY_BYTES
                else "the minimum"
            )
            return cap, (
                f"STREAM arrays capped at {cap / MIB:.0f} MiB each instead of {want / MIB:.0f} MiB "
                f"({why}): three arrays may take at most {DRAM_MEMORY_FRACTION:.0%} of the "
                f"{available_bytes / 2**30:.1f} GiB available; the DRAM figure may be partly cache "
                "bandwidth (free memory or set --bandwidth-mib)"
            )
    return want, None


def l2_array_bytes(l2_bytes: int | None) -> int:
    """Bytes per L2 STREAM array: the three together fill L2_FILL_FRACTION of `l2_bytes`, in whole
    4 KiB pages (at least one); 0 (no L2 step) when the L2 size is unknown."""
    if not l2_bytes or l2_bytes <= 0:
        return 0
    return max(4096, int(l2_bytes * L2_FILL_FRACTION / 3) // 4096 * 4096)


def check_sizes(
    array_bytes: int,
    matrix_size: int,
    dtypes: list[str],
    facts: MemoryFacts,
    cache_warning: bool = True,
) -> list[str]:
    """UsageError when the buffers cannot fit; warnings (returned) when STREAM arrays are cache-sized
    (unless cache_warning is false: the automatic size warns about its own cap)."""
    stream_need = 3 * array_bytes
    widest = max((DTYPE_BYTES[d] for d in dtypes), default=4)
    gemm_need = 3 * matrix_size**2 * widest
    if facts.free_bytes is not None:
        for what, need, flag in (
            ("STREAM arrays", stream_need, "--bandwidth-mib"),
            ("matmul operands", gemm_need, "--matrix-size"),
        ):
            if need > 0.9 * facts.free_bytes:
                raise UsageError(
                    f"the {what} need {need / 2**30:.1f} GiB but only "
                    f"{facts.free_bytes / 2**30:.1f} GiB is free; use a smaller {flag}"
                )
    warnings = []
    if cache_warning and facts.llc_bytes and array_bytes < DRAM_LLC_FACTOR * facts.llc_bytes:
        warnings.append(
            f"each STREAM array ({array_bytes / MIB:.0f} MiB) is less than 4x the last-level cache "
            f"({facts.llc_bytes / MIB:.0f} MiB): the bandwidth measured may be partly cache bandwidth"
        )
    return warnings
