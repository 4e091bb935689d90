"""Which NVIDIA chip a GPU is, and which Nsight Compute counters that chip has.

A device is named three ways: by the name torch reports ("NVIDIA H100 80GB HBM3", "Tesla T4"),
by its compute capability ("9.0"), or by the chip an ncu report records (``device__attribute_chip``,
a number such as 356 = 0x164 = TU104, or a chip name such as "GA102"). `resolve_chip` turns any of
them into a chip name of NVIDIA's metric database. A compute capability can cover several chips
(7.5: TU102/TU104/TU106 with tensor cores and TU116/TU117 without): then a representative chip is
chosen and a note says so; a device name is more precise.

`counters_for(chip)` says which of the counters this project reads exist on the chip, and how the
floating-point tensor-core counters nest: for every ``sm__ops_path_tensor_*`` counter, the raw
hardware counters it is computed from (NVPW_MetricsEvaluator_GetMetricRawDependencies). An
aggregate such as ``src_fp16`` on GH100 depends on the raw counters of its parts
(``op_hgmma_src_fp16`` and ``op_hmma_src_fp16``); `ChipCounters.tensor_sum` picks counters whose
raw dependencies are pairwise disjoint and together cover every floating-point tensor raw counter,
so each tensor op is counted exactly once. The facts come from libnvperf_host.so when it loads
(profiling.nvperf), else from the table generated from it and committed next to this module
(ncu_chips.json, stamped with the ncu-report version that made it; `python -m profiling.chips
--write` regenerates it, tests/test_ncu_chips.py checks it against the live database).

Pure apart from reading that table and loading the library: no mlflow, no file writes (except
`--write`, the table's generator).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from profiling import nvperf

TABLE_FILE = Path(__file__).with_name("ncu_chips.json")

TENSOR_PREFIX = "sm__ops_path_tensor_"
OPS = ("dadd", "dmul", "dfma", "fadd", "fmul", "ffma", "hadd", "hmul", "hfma")
OP_COUNTERS = tuple(f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in OPS)
DRAM_CHOICES = (
    ("dram__bytes_read.sum", "dram__bytes_write.sum"),
    ("dram__bytes_op_read.sum", "dram__bytes_op_write.sum"),
    ("dram__bytes.sum",),
)
"""DRAM byte counters in order of preference: read + write, else op_read + op_write (GB20x,
GR100), else the total; chips with none (GA10B, GB10B, GB20B, GB20C: memory shared with the CPU)
get no DRAM counter."""
L2_CHOICES = ("lts__t_bytes.sum", "lts__t_sectors.sum")
L1_CHOICES = ("l1tex__t_bytes.sum", "l1tex__t_sectors.sum")
TIME = "gpu__time_duration.sum"
TENSOR_INST = "sm__inst_executed_pipe_tensor.sum"
PCIE = ("pcie__read_bytes.sum", "pcie__write_bytes.sum")
CYCLES = ("sm__cycles_elapsed.avg", "smsp__cycles_elapsed.avg")
CANDIDATES = tuple(
    dict.fromkeys(
        [
            *OP_COUNTERS,
            *(n for choice in DRAM_CHOICES for n in choice),
            *L2_CHOICES,
            *L1_CHOICES,
            TIME,
            TENSOR_INST,
            *PCIE,
            *CYCLES,
        ]
    )
)
"""Every counter name (besides the tensor ops counters) a metric set of this project may ask for."""

# ------------------------------------------------------------------------------------ devices
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
    return db.chips if db is not None else tuple(_table()["chips"])


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


# ------------------------------------------------------------------------------------ counters
@dataclass(frozen=True)
class ChipCounters:
    """The counters of one chip that matter here."""

    chip: str
    present: frozenset[str]
    """names of CANDIDATES that exist on the chip."""
    tensor: dict[str, frozenset[int]] = field(default_factory=dict)
    """floating-point ``sm__ops_path_tensor_*.sum`` counters -> ids of the raw counters each is
    computed from (ids number the chip's tensor raw counters)."""
    source: str = ""
    """where the facts come from (library and version, or the table)."""

    def has(self, name: str) -> bool:
        return name in self.present or name in self.tensor

    def first(self, *choices: tuple[str, ...]) -> tuple[str, ...]:
        """The first choice whose names all exist, else ()."""
        for choice in choices:
            if all(self.has(n) for n in choice):
                return choice
        return ()

    @property
    def dram(self) -> tuple[str, ...]:
        return self.first(*DRAM_CHOICES)

    def covers(self, a: str, b: str) -> bool:
        """True when tensor counter `a` counts every op `b` counts: `b`'s raw dependencies lie
        inside `a`'s, or `b`'s name makes it a part of `a` (same source type; `a` names no
        instruction, destination or sparsity, or the same as `b`). Both are needed: on GH100
        ``src_fp16`` holds ``op_hgmma_src_fp16`` by raw dependencies only, while on GB20x
        ``src_fp4_dst_fp32`` and its ``_sparsity_on/off`` parts read three different raw counters."""
        if self.tensor[b] <= self.tensor[a]:
            return True
        pa, pb = parse_tensor_name(a), parse_tensor_name(b)
        return (
            pa is not None
            and pb is not None
            and pa.src == pb.src
            and all(
                x is None or x == y for x, y in zip((pa.op, pa.dst, pa.sp), (pb.op, pb.dst, pb.sp))
            )
        )

    def tensor_sum(self, names=None) -> tuple[str, ...]:
        """Of the tensor counters `names` (default: all of the chip's), those to add up so that each
        op is counted once: counters that cover each other are one counter (the generic name wins
        over an instruction-specific ``op_*`` one), and a counter another one covers is a part of
        that aggregate (see `covers`). The result's counters share no raw dependency (checked:
        ValueError otherwise); sorted by name."""
        pool = sorted({n for n in (self.tensor if names is None else names) if n in self.tensor})
        classes: list[str] = []
        for n in sorted(pool, key=_generic_first):
            if not any(self.covers(n, c) and self.covers(c, n) for c in classes):
                classes.append(n)
        tops = sorted(
            n
            for n in classes
            if not any(o != n and self.covers(o, n) and not self.covers(n, o) for o in classes)
        )
        for i, a in enumerate(tops):
            for b in tops[i + 1 :]:
                if self.tensor[a] & self.tensor[b]:
                    raise ValueError(
                        f"{self.chip}: {a} and {b} share raw counters without one covering the "
                        "other: their sum would count some tensor ops twice"
                    )
        return tuple(tops)

    def tensor_parts(self, aggregate: str) -> tuple[str, ...]:
        """The tensor counters `aggregate` covers, but not the other way round (its parts)."""
        return tuple(
            sorted(
                n
                for n in self.tensor
                if n != aggregate and self.covers(aggregate, n) and not self.covers(n, aggregate)
            )
        )


def _generic_first(name: str) -> tuple[int, int, str]:
    return ("_op_" in name.replace(TENSOR_PREFIX, "_"), len(name), name)


@dataclass(frozen=True)
class TensorName:
    """The parts of an ``sm__ops_path_tensor_[op_<op>_]src_<src>[_dst_<dst>][_sparsity_<sp>].sum`` name."""

    op: str | None
    src: str
    dst: str | None
    sp: str | None


_TENSOR_NAME = re.compile(
    rf"^{TENSOR_PREFIX}(?:op_(?P<op>[a-z0-9]+)_)?src_(?P<src>[a-z0-9_]+?)"
    r"(?:_dst_(?P<dst>[a-z0-9_]+?))?(?:_sparsity_(?P<sp>on|off))?\.sum$"
)


def parse_tensor_name(name: str) -> TensorName | None:
    """The parts of a tensor ops counter name (``.sum``), None for another name."""
    g = _TENSOR_NAME.match(name)
    return TensorName(g["op"], g["src"], g["dst"], g["sp"]) if g else None


_FLOAT_TENSOR = re.compile(rf"^{TENSOR_PREFIX}(?:op_[a-z0-9]+_)?src_(?!int|b1)[a-z0-9_]+$")


def is_float_tensor_counter(base: str) -> bool:
    """True for ``sm__ops_path_tensor_[op_X_]src_<float type>...`` base names (not integer
    sources, not ``_realtime`` variants)."""
    return bool(_FLOAT_TENSOR.match(base)) and not base.endswith("_realtime")


def _facts_from_database(chip: "nvperf.ChipMetrics") -> tuple[list[str], dict[str, list[str]]]:
    """(candidate names present, float tensor counter -> raw dependency names) of one chip."""
    present = [n for n in CANDIDATES if chip.has(n)]
    bases = sorted(
        b
        for b in (n.rsplit(".", 1)[-1] for n in chip.base_names("counter"))
        if is_float_tensor_counter(b)
    )
    tensor = {f"{b}.sum": list(chip.raw_dependencies(f"{b}.sum")) for b in bases}
    return present, tensor


def _numbered(tensor: dict[str, list[str]]) -> dict[str, list[int]]:
    """Raw dependency names -> small ids (the names are opaque hashes; only identity matters)."""
    ids = {r: i for i, r in enumerate(sorted({r for deps in tensor.values() for r in deps}))}
    return {n: sorted(ids[r] for r in deps) for n, deps in tensor.items()}


def build_table(db: "nvperf.MetricDatabase") -> dict:
    """The committed table's content, generated from the live database."""
    chips = {}
    for name in db.chips:
        with db.chip(name) as chip:
            present, tensor = _facts_from_database(chip)
        chips[name] = {"counters": present, "tensor": _numbered(tensor)}
    return {
        "generated_by": "python -m profiling.chips --write",
        "ncu_report": nvperf.ncu_report_version(),
        "library": nvperf.LIBRARY_NAME,
        "chips": chips,
    }


def table_text(table: dict) -> str:
    """The table as committed: JSON, one counter per line, raw-dependency lists on one line."""
    text = json.dumps(table, indent=1, sort_keys=True)
    return (
        re.sub(r"\[\s*([\d,\s]*?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m[1]) + "]", text)
        + "\n"
    )


@lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(TABLE_FILE.read_text(encoding="utf-8"))


def table_version() -> str:
    return str(_table().get("ncu_report"))


_NOTES: list[str] = []


@lru_cache(maxsize=None)
def counters_for(chip: str) -> ChipCounters | None:
    """The counters of `chip`: from libnvperf_host.so when it loads and knows the chip, else from
    the committed table (then `source_note()` says why); None for a chip neither knows."""
    db = nvperf.open_database()
    if db is not None and chip in db.chips:
        with db.chip(chip) as c:
            present, tensor = _facts_from_database(c)
        return ChipCounters(
            chip,
            frozenset(present),
            {n: frozenset(r) for n, r in _numbered(tensor).items()},
            f"{nvperf.LIBRARY_NAME} from ncu-report {nvperf.ncu_report_version()}",
        )
    entry = _table()["chips"].get(chip)
    if entry is None:
        return None
    why = (
        nvperf.load_error()
        if db is None
        else f"the installed {nvperf.LIBRARY_NAME} does not know {chip}"
    )
    _NOTES.append(f"{why}: using {TABLE_FILE.name}, generated from ncu-report {table_version()}")
    return ChipCounters(
        chip,
        frozenset(entry["counters"]),
        {n: frozenset(r) for n, r in entry["tensor"].items()},
        f"{TABLE_FILE.name} (ncu-report {table_version()})",
    )


def source_note() -> str | None:
    """Why the committed table was used instead of the library (after counters_for), else None."""
    return _NOTES[-1] if _NOTES else None


# ------------------------------------------------------------------------------------ names
NCU_SIDE_PREFIXES = (
    "device__",
    "launch__",
    "profiler__",
    "numa__",
    "nvlink__",
    "sass__",
    "inst_executed",
)
"""Metrics ncu computes itself (launch configuration, device attributes, SASS source counters):
not in the Perfworks database, so they are not checked against it."""


def check_metric_names(chip: str, names) -> tuple[list[str], str | None]:
    """Problems with user-given metric names on `chip`, one line each with the nearest valid
    names, and a note when the names could not be checked (no live database, regex/group syntax)."""
    db = nvperf.open_database()
    if db is None or chip not in db.chips:
        why = nvperf.load_error() if db is None else f"{nvperf.LIBRARY_NAME} does not know {chip}"
        return [], f"--metrics names are not checked ({why}); ncu will reject unknown ones"
    problems = []
    with db.chip(chip) as c:
        bases: list[str] | None = None
        for name in names:
            if ":" in name or name.startswith(NCU_SIDE_PREFIXES) or c.has(name):
                continue
            if bases is None:
                bases = sorted(
                    {
                        b.rsplit(".", 1)[-1]
                        for kind in nvperf.METRIC_TYPES
                        for b in c.base_names(kind)
                    }
                )
            problems.append(f"{chip} has no metric {name}{_nearest(c, name, bases)}")
    return problems, None


def _nearest(chip: "nvperf.ChipMetrics", name: str, bases: list[str]) -> str:
    base, dot, suffix = name.partition(".")
    if base in bases:  # a known counter with an unknown rollup or submetric
        valid = [f"{base}.{r}" for r in ("sum", "avg", "max", "min") if chip.has(f"{base}.{r}")]
        options = valid or [base]
    else:
        close = difflib.get_close_matches(base, bases, n=3, cutoff=0.6)
        options = [f"{b}{dot}{suffix}" if chip.has(f"{b}{dot}{suffix}") else b for b in close]
    return f" (nearest: {', '.join(options)})" if options else " (no similar name)"


# ------------------------------------------------------------------------------------ the table, by hand
def markdown() -> str:
    """Per chip (chips with the same counters share a row): example GPUs, compute capability, DRAM
    counters, tensor counters summed, what is missing. The table in docs/profiling.md."""
    from profiling import ncu_metrics

    rows: dict[tuple, list[str]] = {}
    for chip in known_chips():
        c = counters_for(chip)
        cc = ", ".join(cc_text(k) for k, v in CC_CHIPS.items() if chip in v) or "?"
        dram = " + ".join(f"`{n}`" for n in c.dram) or "**none**"
        tensor = ", ".join(_short(n) for n in c.tensor_sum()) or "none"
        missing = ", ".join(ncu_metrics.plan_metrics("roofline", "auto", (), c).missing) or "—"
        rows.setdefault((cc, dram, tensor, missing), []).append(chip)
    lines = [
        "| chips | example GPUs | CC | DRAM counters | tensor counters summed (`sm__ops_path_tensor_…`) | missing |",
        "|---|---|---|---|---|---|",
    ]
    for (cc, dram, tensor, missing), names in rows.items():
        examples = "; ".join(EXAMPLES[n] for n in names if EXAMPLES.get(n))
        lines.append(f"| {', '.join(names)} | {examples} | {cc} | {dram} | {tensor} | {missing} |")
    return "\n".join(lines)


def aggregates_markdown() -> str:
    """Per chip group: each summed tensor counter and the counters directly inside it (by raw
    dependencies or by name), i.e. what adding them as well would count twice."""
    groups: dict[tuple, list[str]] = {}
    for chip in known_chips():
        c = counters_for(chip)
        lines = []
        for top in c.tensor_sum():
            parts = c.tensor_parts(top)
            direct = [
                p
                for p in parts
                if not any(q != p and c.covers(q, p) and not c.covers(p, q) for q in parts)
            ]
            if direct:
                lines.append(f"`{_short(top)}` = {' + '.join(f'`{_short(p)}`' for p in direct)}")
        groups.setdefault(tuple(lines), []).append(chip)
    out = ["| chips | summed counter = the counters it covers (not added again) |", "|---|---|"]
    for lines, names in groups.items():
        out.append(f"| {', '.join(names)} | {'; '.join(lines) or '—'} |")
    return "\n".join(out)


def _short(name: str) -> str:
    return name[len(TENSOR_PREFIX) : -len(".sum")]


EXAMPLES = {
    "TU102": "RTX 2080 Ti, Titan RTX",
    "TU104": "Tesla T4, RTX 2080",
    "TU106": "RTX 2070, RTX 2060",
    "TU116": "GTX 1660",
    "TU117": "GTX 1650, T1000",
    "GA100": "A100, A30",
    "GA102": "RTX 3090, A10, A40",
    "GA103": "RTX 3080 Ti laptop",
    "GA104": "RTX 3070, A4000",
    "GA106": "RTX 3060",
    "GA107": "RTX 3050 laptop, A2, A16",
    "GA10B": "Jetson Orin",
    "GH100": "H100, H200, GH200",
    "AD102": "RTX 4090, L40S",
    "AD103": "RTX 4080",
    "AD104": "L4, RTX 4070",
    "AD106": "RTX 4060 Ti",
    "AD107": "RTX 4060",
    "GB100": "B200, GB200",
    "GB102": "",
    "GB110": "B300, GB300 (inferred)",
    "GB112": "",
    "GB10B": "Jetson Thor (inferred)",
    "GB202": "RTX 5090, RTX PRO 6000",
    "GB203": "RTX 5080, RTX 5070 Ti",
    "GB205": "RTX 5070",
    "GB206": "RTX 5060",
    "GB207": "RTX 5050",
    "GB20B": "DGX Spark GB10 (inferred)",
    "GB20C": "",
    "GR100": "",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m profiling.chips",
        description="NVIDIA's metric database as this project uses it: regenerate the committed "
        "table, or print the per-chip counter table of docs/profiling.md",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help=f"regenerate {TABLE_FILE.name} from {nvperf.LIBRARY_NAME}",
    )
    args = p.parse_args(argv)
    if args.write:
        db = nvperf.open_database()
        if db is None:
            print(f"error: {nvperf.load_error()}", file=sys.stderr)
            return 1
        TABLE_FILE.write_text(table_text(build_table(db)), encoding="utf-8")
        print(
            f"wrote {TABLE_FILE} ({len(db.chips)} chips, ncu-report {nvperf.ncu_report_version()})"
        )
        return 0
    print(markdown())
    print()
    print(aggregates_markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
