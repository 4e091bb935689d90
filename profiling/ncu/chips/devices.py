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
from profiling.ncu.chips.counters import committed_table, table_version
from profiling.ncu.counting import tensor_inst_flops

CHIP_IDS = {
    0x140: "GV100",
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
    (7, 0): ("GV100",),
    (7, 2): ("GV11B",),
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

LAPTOP = r" (laptop|mobile|max-q)"
"""How a laptop GPU's name goes on ("NVIDIA GeForce RTX 4090 Laptop GPU"): laptop parts of one
product name are often another chip than the desktop part."""

DEVICE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("GV100", r"\bv100s?\b|titan v\b|\bgv100\b|cmp 100-2[01]0"),
    ("GV11B", r"\bxavier\b"),
    # laptops first: their names begin like the desktop parts of other chips
    ("TU104", rf"rtx 2080( super)?{LAPTOP}|rtx 2070 super{LAPTOP}|quadro rtx [45]000{LAPTOP}"),
    ("TU106", rf"rtx 20[67]0{LAPTOP}|quadro rtx 3000"),
    ("TU116", rf"gtx 1660 ti{LAPTOP}"),
    ("TU117", rf"gtx 1650( ti)?{LAPTOP}|\bmx[45]50\b|\bt(500|550|600|1000|1200|2000){LAPTOP}"),
    ("GA103", rf"rtx 3080 ti{LAPTOP}|rtx a5500{LAPTOP}"),
    (
        "GA104",
        rf"rtx 3080{LAPTOP}|rtx 3070( ti)?{LAPTOP}|rtx a(3000|4000|4500|5000)( 12gb)?{LAPTOP}",
    ),
    ("GA106", rf"rtx 3060{LAPTOP}"),
    (
        "GA107",
        rf"rtx 3050( ti| [468]gb)?{LAPTOP}|rtx 2050|\bmx570|rtx a(500|1000|2000)( [68]gb)?{LAPTOP}",
    ),
    ("AD103", rf"rtx 4090{LAPTOP}|rtx 5000 ada generation{LAPTOP}"),
    ("AD104", rf"rtx 4080{LAPTOP}|rtx (3500|4000) ada generation{LAPTOP}"),
    ("AD106", rf"rtx 4070{LAPTOP}|rtx 3000 ada generation{LAPTOP}"),
    (
        "AD107",
        rf"rtx 40[56]0{LAPTOP}|rtx 3050 a{LAPTOP}|rtx (500|1000|2000) ada generation{LAPTOP}",
    ),
    ("GB203", rf"rtx 50[89]0{LAPTOP}|rtx pro [45]000 blackwell generation{LAPTOP}"),
    ("GB205", rf"rtx 5070 ti{LAPTOP}|rtx pro 3000 blackwell generation{LAPTOP}"),
    ("GB206", rf"rtx 50[67]0{LAPTOP}|rtx pro 2000 blackwell generation{LAPTOP}"),
    ("GB207", rf"rtx 5050{LAPTOP}|rtx pro (500|1000) blackwell generation{LAPTOP}"),
    # desktop and data-center parts
    ("TU102", r"rtx 2080 ti|titan rtx|quadro rtx [68]000"),
    ("TU104", r"\bt4\b|rtx 2080|rtx 2070 super|quadro rtx [45]000"),
    ("TU106", r"rtx 2070|rtx 2060"),
    ("TU116", r"gtx 1660|gtx 1650 super"),
    ("TU117", r"gtx 1650|gtx 1630|\bt(400|600|1000|1200)\b|quadro t(400|600|1000|1200|2000)\b"),
    ("GA100", r"\ba100\b|\ba30\b|\ba800\b|\bax800\b"),
    ("GA102", r"rtx 3090|rtx 3080|\ba10g?\b|\ba40\b|rtx a(4500|5000|5500|6000)\b"),
    ("GA104", r"rtx 3070|rtx 3060 ti|rtx a4000"),
    ("GA107", r"\ba2\b|\ba16\b|rtx a(400|1000)\b"),
    ("GA106", r"rtx 3060|rtx 3050|rtx a2000"),
    ("GA10B", r"\borin\b"),
    ("AD103", r"rtx 4080|rtx 4070 ti super"),
    ("AD102", r"rtx 4090|titan ada|\bl40s?\b|\bl20\b|rtx (5000|5880|6000) ada"),
    ("AD104", r"\bl4\b|rtx 4070|rtx 4[05]00 ada|rtx 4000 sff ada"),
    ("AD106", r"rtx 4060 ti"),
    ("AD107", r"rtx 4060|rtx 4050|rtx 2000e? ada"),
    ("GH100", r"\bg?h100\b|\bg?h200\b|\bh800l?\b|\bh20\b"),
    ("GB110", r"\bg?b300\b"),
    ("GB100", r"\bg?b200\b|\bb100\b"),
    ("GB10B", r"\bthor\b"),
    ("GB20B", r"\bgb10\b|dgx spark|rtx spark"),
    ("GB202", r"rtx 5090|rtx pro 6000|rtx pro 5000|rtx 6000d"),
    ("GB203", r"rtx 5080|rtx 5070 ti|rtx pro 4[05]00"),
    ("GB205", r"rtx 5070"),
    ("GB206", r"rtx 5060|rtx pro 2000"),
    ("GB207", r"rtx 5050|rtx pro (500|1000)\b"),
)
"""Device name (as torch reports it, lower-cased) -> chip, first match wins. Product-to-chip
pairs are the PCI ID database's (pciutils/pciids, which names the chip of every NVIDIA device id,
e.g. 2460 = "GA103M [GeForce RTX 3080 Ti Laptop GPU]", 2b85 = "GB202 [GeForce RTX 5090]",
2e12 = "GB20B [GB10]"); laptop parts (`LAPTOP`) come first, since "RTX 4090 Laptop GPU" is an
AD103 and "RTX 3080 Ti Laptop GPU" a GA103, not the desktop parts' chips. Where one product
name ships on two chips (some RTX 3060 on GA104, some GTX 1650 on TU106/TU116, some RTX 5060 on
GB205) the chips share their counter set (checked by tests), so the choice does not change a
metric list."""

NOT_IN_DATABASE = ("GV100", "GV11B")
"""Chips a device can be but NVIDIA's shipped metric database does not know (Volta): planned with
generic names, unchecked, and with VOLTA_NOTE."""
LAST_VOLTA_NCU = "2025.3.1"
"""The newest ncu-report whose metric database still lists GV100/GV11B (checked: 2025.3.1 has
them, 2026.2.0 and 2026.3.x do not); NVIDIA's current GPU support table says Volta: No."""


def volta_note(chip: str) -> str:
    """The one line said whenever a plan or an import is for a Volta chip."""
    cc = chip_capability(chip)
    return (
        f"{chip} (Volta) is not in NVIDIA's metric database of ncu-report {database_version()}: "
        f"the newest Nsight Compute known to profile it is {LAST_VOLTA_NCU} (its ncu-report "
        "database has GV100/GV11B; 2026.2.0's has none), so capture with ncu "
        f"{LAST_VOLTA_NCU} or older (and a PyTorch build with sm_{cc[0]}{cc[1]} kernels); this "
        "project plans "
        "generic metric names there, unchecked, and counts tensor FLOPs as "
        f"sm__inst_executed_pipe_tensor.sum x {tensor_inst_flops(cc)}"
    )


def database_version() -> str:
    """The ncu-report version of the metric database in use (the live one, else the table's)."""
    return (nvperf.ncu_report_version() if nvperf.open_database() else None) or table_version()


@dataclass(frozen=True)
class ChipChoice:
    """The chip a device resolved to, and how."""

    chip: str | None
    """NVIDIA's chip name (a name of the metric database, or of NOT_IN_DATABASE), None when
    unknown."""
    how: str
    """"chip", "chip id", "device name", "compute capability" or "unknown"."""
    note: str | None = None
    """a line for the user when the choice is an assumption."""


def chip_capability(chip: str | None) -> tuple[int, int] | None:
    """The compute capability of `chip` (the first CC_CHIPS lists it under), None when unknown."""
    return next((cc for cc, chips in CC_CHIPS.items() if chip in chips), None)


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
    name or number, then device name, then capability. A Volta chip comes with volta_note."""
    choice = _resolve(device_name, capability, chip_id)
    if choice.chip in NOT_IN_DATABASE:
        return ChipChoice(choice.chip, choice.how, volta_note(choice.chip))
    return choice


def _resolve(
    device_name: str | None, capability: tuple[int, int] | None, chip_id: int | None
) -> ChipChoice:
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
