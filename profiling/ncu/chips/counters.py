"""Which Nsight Compute counters a chip has, and how its tensor-core counters nest.

`counters_for(chip)` says which of the counters this project reads exist on the chip, and how the
floating-point tensor-core counters nest: for every ``sm__ops_path_tensor_*`` counter, the raw
hardware counters it is computed from (NVPW_MetricsEvaluator_GetMetricRawDependencies). An
aggregate such as ``src_fp16`` on GH100 depends on the raw counters of its parts
(``op_hgmma_src_fp16`` and ``op_hmma_src_fp16``); `ChipCounters.tensor_sum` picks counters whose
raw dependencies are pairwise disjoint and together cover every floating-point tensor raw counter,
so each tensor op is counted exactly once. The facts come from libnvperf_host.so when it loads
(profiling.ncu.nvperf), else from the table generated from it and committed next to this module
(ncu_chips.json, stamped with the ncu-report version that made it; `python -m profiling.ncu.chips
--write` regenerates it, tests/test_ncu_chips.py checks it against the live database).
`check_metric_names` checks user-given ``--metrics`` names against the live database.

Pure apart from reading that table and loading the library: no mlflow, no file writes.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from profiling.ncu import nvperf
from profiling.ncu.names import (
    CYCLES,
    DRAM_CHOICES,
    L1_CHOICES,
    L2_CHOICES,
    OP_COUNTERS,
    PACKED_OP_COUNTERS,
    PCIE,
    TENSOR_INST,
    TENSOR_PREFIX,
    TIME_METRIC,
    is_float_tensor_counter,
    parse_tensor_name,
)

TABLE_FILE = Path(__file__).with_name("ncu_chips.json")

CANDIDATES = tuple(
    dict.fromkeys(
        [
            *OP_COUNTERS,
            *PACKED_OP_COUNTERS,
            *(n for choice in DRAM_CHOICES for n in choice),
            *L2_CHOICES,
            *L1_CHOICES,
            TIME_METRIC,
            TENSOR_INST[0],
            *PCIE,
            *CYCLES.values(),
        ]
    )
)
"""Every counter name (besides the tensor ops counters) a metric set of this project may ask for."""


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


def database_facts(chip: "nvperf.ChipMetrics") -> tuple[list[str], dict[str, list[int]]]:
    """(candidate names present, float tensor counter -> ids of its raw dependencies) of one chip
    of the live database: what the committed table holds per chip."""
    present = [n for n in CANDIDATES if chip.has(n)]
    bases = sorted(
        b
        for b in (n.rsplit(".", 1)[-1] for n in chip.base_names("counter"))
        if is_float_tensor_counter(b)
    )
    tensor = {f"{b}.sum": list(chip.raw_dependencies(f"{b}.sum")) for b in bases}
    return present, _numbered(tensor)


def _numbered(tensor: dict[str, list[str]]) -> dict[str, list[int]]:
    """Raw dependency names -> small ids (the names are opaque hashes; only identity matters)."""
    ids = {r: i for i, r in enumerate(sorted({r for deps in tensor.values() for r in deps}))}
    return {n: sorted(ids[r] for r in deps) for n, deps in tensor.items()}


@lru_cache(maxsize=1)
def committed_table() -> dict:
    """The committed table (ncu_chips.json) as read."""
    return json.loads(TABLE_FILE.read_text(encoding="utf-8"))


def table_version() -> str:
    return str(committed_table().get("ncu_report"))


_NOTES: list[str] = []


@lru_cache(maxsize=None)
def counters_for(chip: str) -> ChipCounters | None:
    """The counters of `chip`: from libnvperf_host.so when it loads and knows the chip, else from
    the committed table (then `source_note()` says why); None for a chip neither knows."""
    db = nvperf.open_database()
    if db is not None and chip in db.chips:
        with db.chip(chip) as c:
            present, tensor = database_facts(c)
        return ChipCounters(
            chip,
            frozenset(present),
            {n: frozenset(r) for n, r in tensor.items()},
            f"{nvperf.LIBRARY_NAME} from ncu-report {nvperf.ncu_report_version()}",
        )
    entry = committed_table()["chips"].get(chip)
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
