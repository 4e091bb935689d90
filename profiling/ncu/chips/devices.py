"""Which NVIDIA chip a GPU is.

A device is named three ways: by the name torch reports ("NVIDIA H100 80GB HBM3", "Tesla T4"),
by its compute capability ("9.0"), or by the chip an ncu report records (``device__attribute_chip``,
a number such as 356 = 0x164 = TU104, or a chip name such as "GA102"). `resolve_chip` turns any of
them into a chip name of NVIDIA's metric database. A compute capability can cover several chips
(7.5: TU102/TU104/TU106 with tensor cores and TU116/TU117 without): then a representative chip is
chosen and a note says so; a device name is more precise.

Pure apart from reading the committed table and loading the library (for the list of chips).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from profiling.ncu import nvperf
from profiling.ncu.chips.counters import committed_table

CHIP_IDS = {
    0x162: "TU102",
    0x164: "TU104",
    0x166: "TU106",
    0x167: "TU117",
    0x168: "TU116",
    0x170: "GA100",
    0x172: "GA102",
    0x173: "GA103",
    0x174: "GA104",
    0x176: "GA106",
    0x177: "GA107",
    0x180: "GH100",
    0x192: "AD102",
    0x193: "AD103",
    0x194: "AD104",
    0x196: "AD106",
    0x197: "AD107",
    0x1A0: "GB100",
    0x1A2: "GB102",
    0x1B2: "GB202",
    0x1B3: "GB203",
    0x1B5: "GB205",
    0x1B6: "GB206",
    0x1B7: "GB207",
}
"""``device__attribute_chip`` (an ncu report's chip number) -> chip. The numbers are the chip ids
of the Linux nouveau driver's device table (nvkm/engine/device/base.c: nv164 = TU104, nv1a0 =
GB100, nv1b2 = GB202, ...); the T4 fixture's 356 (0x164, TU104) and the B200 fixture's 416
(0x1A0, GB100) agree. Chips nouveau does not list (GA10B, GB10B, GB110, GB112, GB20B, GB20C,
GR100) are found by name or compute capability instead."""

CC_CHIPS: dict[tuple[int, int], tuple[str, ...]] = {
    (7, 5): ("TU104", "TU102", "TU106", "TU116", "TU117"),
    (8, 0): ("GA100",),
    (8, 6): ("GA102", "GA103", "GA104", "GA106", "GA107"),
    (8, 7): ("GA10B",),
    (8, 9): ("AD102", "AD103", "AD104", "AD106", "AD107"),
    (9, 0): ("GH100",),
    (10, 0): ("GB100", "GB102"),
    (10, 1): ("GB10B",),
    (10, 3): ("GB110", "GB112"),
    (11, 0): ("GB10B",),
    (12, 0): ("GB202", "GB203", "GB205", "GB206", "GB207"),
    (12, 1): ("GB20B", "GB20C"),
}
"""Compute capability -> the chips that report it, representative first (the one a bare
capability resolves to). 10.1/11.0 (Jetson Thor: sm_101 with CUDA 12, sm_110 with CUDA 13) ->
GB10B, 10.3 (B300/GB300) -> GB110/GB112 and 12.1 (DGX Spark GB10) -> GB20B/GB20C are inferred
(docs/profiling.md, "Chips"); GR100 has no capability here."""

DEVICE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("TU102", r"rtx 2080 ti|titan rtx|quadro rtx [68]000"),
    ("TU104", r"\bt4\b|rtx 2080|rtx 2070 super|quadro rtx [45]000"),
    ("TU106", r"rtx 2070|rtx 2060"),
    ("TU116", r"gtx 1660|gtx 1650 super"),
    ("TU117", r"gtx 1650|\bt(400|600|1000|1200)\b|quadro t(400|600|1000|1200|2000)\b"),
    ("GA100", r"\ba100\b|\ba30\b|\ba800\b"),
    ("GA102", r"rtx 3090|rtx 3080|\ba10g?\b|\ba40\b|rtx a(5000|5500|6000)\b"),
    ("GA104", r"rtx 3070|rtx 3060 ti|rtx a4000"),
    ("GA107", r"\ba2\b|\ba16\b|rtx 3050 (laptop|mobile)"),
    ("GA106", r"rtx 3060|rtx 3050|rtx a2000"),
    ("GA10B", r"\borin\b"),
    ("AD103", r"rtx 4080|rtx 4070 ti super"),
    ("AD102", r"rtx 4090|\bl40s?\b|\bl20\b|rtx [56]000 ada"),
    ("AD104", r"\bl4\b|rtx 4070|rtx 4[05]00 ada"),
    ("AD106", r"rtx 4060 ti"),
    ("AD107", r"rtx 4060|rtx 4050|rtx 2000 ada"),
    ("GH100", r"\bg?h100\b|\bg?h200\b|\bh800\b|\bh20\b"),
    ("GB110", r"\bg?b300\b"),
    ("GB100", r"\bg?b200\b|\bb100\b"),
    ("GB10B", r"\bthor\b"),
    ("GB20B", r"\bgb10\b"),
    ("GB202", r"rtx 5090|rtx pro 6000|rtx pro 5000"),
    ("GB203", r"rtx 5080|rtx 5070 ti|rtx pro 4[05]00"),
    ("GB205", r"rtx 5070"),
    ("GB206", r"rtx 5060"),
    ("GB207", r"rtx 5050"),
)
"""Device name (as torch reports it, lower-cased) -> chip, first match wins. Product-to-chip
pairs are NVIDIA's published ones (datasheets); where one product name ships on two chips (some
RTX 3060 on GA104, some GTX 1650 on TU106/TU116) the chips share their counter set (checked by
tests), so the choice does not change a metric list."""


@dataclass(frozen=True)
class ChipChoice:
    """The chip a device resolved to, and how."""

    chip: str | None
    """NVIDIA's chip name (a name of the metric database), None when unknown."""
    how: str
    """"chip", "chip id", "device name", "compute capability" or "unknown"."""
    note: str | None = None
    """a line for the user when the choice is an assumption."""


def cc_text(capability: tuple[int, int] | None) -> str:
    return f"{capability[0]}.{capability[1]}" if capability else "unknown"


def parse_capability(text: str) -> tuple[int, int]:
    """ "8.6" -> (8, 6); ValueError for anything else (argparse turns it into a usage error)."""
    m = re.fullmatch(r"\s*(\d{1,2})\.(\d)\s*", str(text))
    if not m:
        raise ValueError(f"expected a compute capability such as 8.6, got {text!r}")
    return int(m[1]), int(m[2])


def known_chips() -> tuple[str, ...]:
    """Chips of the metric database (the live one, else the committed table)."""
    db = nvperf.open_database()
    return db.chips if db is not None else tuple(committed_table()["chips"])


def resolve_chip(
    device_name: str | None = None,
    capability: tuple[int, int] | None = None,
    chip_id: int | None = None,
) -> ChipChoice:
    """The chip of a device given by any of: its name (torch's, or a chip name such as "GA102"),
    its compute capability, the chip number an ncu report carries. Most precise first: chip
    name or number, then device name, then capability."""
    chips = known_chips()
    name = (device_name or "").strip()
    if name.upper() in chips:
        return ChipChoice(name.upper(), "chip")
    if chip_id is not None and chip_id in CHIP_IDS:
        return ChipChoice(CHIP_IDS[chip_id], "chip id")
    low = name.lower()
    for chip, pattern in DEVICE_PATTERNS:
        if low and re.search(pattern, low):
            return ChipChoice(chip, "device name")
    if capability is not None and tuple(capability) in CC_CHIPS:
        options = CC_CHIPS[tuple(capability)]
        chip = options[0]
        note = None
        if len(options) > 1:
            note = (
                f"compute capability {cc_text(capability)} covers {'/'.join(sorted(options))}: "
                f"using {chip}'s counters"
                + (
                    " (TU116/TU117, GTX 16xx, have no tensor-core counters: pass --device-name for them)"
                    if tuple(capability) == (7, 5)
                    else " (they have the same counter set)"
                )
            )
        if name:
            note = f"{name!r} is not a GPU this project knows by name: by its " + (
                note or f"compute capability {cc_text(capability)}, {chip}"
            )
        return ChipChoice(chip, "compute capability", note)
    what = f"{name!r}" if name else f"compute capability {cc_text(capability)}"
    return ChipChoice(
        None,
        "unknown",
        f"{what} does not map to a chip of NVIDIA's metric database: metric names are not checked",
    )
