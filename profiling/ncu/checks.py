"""What an ncu report must hold before its counters are summed into a profile run.

A CSV can be edited, damaged or made by something other than Nsight Compute, and an imported one
can say anything: negative DRAM bytes (-1.95e11), a negative kernel time (-9.5 ms), a
unit nobody knows (`furlong`, read as bytes: intensity 48.1 for a true 6.94), a value of 1e300
(intensity 2.8e291). `check_values` (before the counters are summed) and `check_rates` (each kernel's
summed work) refuse, naming the kernel and the metric:

* a unit that is not the one ncu writes for that counter (bytes in byte/Kbyte/Mbyte/..., times in
  second/msecond/usecond/nsecond, instruction counts in inst, ...): a unit outside this vocabulary
  cannot be scaled, and a known unit on the wrong counter means the columns are not what they say;
* a negative or non-finite value (counters count up from zero; `n/a` is handled by the summary),
  a clock rate of 0, a value no kernel of a year on the fastest device reaches (1e308 cycles made
  a kernel time of 7.7e298 s), and a kernel lacking a counter the other kernels of its file have
  (an empty value left that kernel's bytes out of a total called complete);
* a kernel that would do more FLOPs, or move more bytes, in its measured time than any GPU can:
  above common.bounds (10 EFLOP/s, 100 TB/s of DRAM, 10 PB/s of cache bandwidth; each at least 10x
  the fastest figure of the vendor table, roofline.datasheets).

Only the counters the summary reads are checked (profiling.ncu.names.is_relevant): a `--set full`
export has hundreds of others, in units this project never reads. Pure: no mlflow, no files.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from common import bounds
from common.errors import BenchError
from profiling.ncu.names import CYCLE_RATE, TIME_METRIC, is_relevant
from profiling.ncu.parse import NcuKernel, NcuReport

if TYPE_CHECKING:  # a type only: pandas costs seconds at startup
    import pandas as pd

COUNT_UNITS = ("inst", "op", "ops", "flop", "warp", "thread", "request", "transaction", "block")
"""Units ncu writes for event counts (tensor ops counters among them)."""


def expected_units(name: str) -> tuple[set[str], str]:
    """(base units metric `name` may carry after ncu's prefixes are scaled away, what ncu writes)."""
    if name == TIME_METRIC:
        return {"second"}, "second, msecond, usecond or nsecond"
    if name == CYCLE_RATE:
        return {"cycle/second", "hz"}, "cycle/second, cycle/nsecond, hz, Mhz or Ghz"
    if name.endswith(".per_cycle_elapsed"):
        return {f"{u}/cycle" for u in COUNT_UNITS}, "inst/cycle"
    if "bytes" in name:
        return {"byte"}, "byte, Kbyte, Mbyte, Gbyte or Tbyte"
    if "sectors" in name:
        return {"sector"}, "sector"
    if "cycles_elapsed" in name:
        return {"cycle"}, "cycle"
    if "inst_executed" in name:
        return {"inst"}, "inst"
    return set(COUNT_UNITS), "a count (inst, op, ...)"


def _checked(name: str) -> bool:
    return is_relevant(name) and not name.startswith("device__")


def _kernel(k: NcuKernel | dict, source: str) -> str:
    kid, name = (k.id, k.name) if isinstance(k, NcuKernel) else (k["id"], k["kernel"])
    short = name if len(name) <= 80 else name[:77] + "..."
    return f"{source}: kernel {kid} ({short})"


def _fix(source: str, in_set: bool = False) -> str:
    if in_set:  # one file of a capture set: that file, not the set, is the one to replace
        return (
            f"this is not what Nsight Compute writes (an edited or damaged file?): export {source} "
            "again from its capture, or leave it out of the set"
        )
    return (
        "this is not what Nsight Compute writes (an edited or damaged file?): export the report "
        f"again (`ncu --import report.ncu-rep --csv --page raw > {source}`) or import the .ncu-rep"
    )


def _most(name: str, unit: str) -> tuple[float, float, str]:
    """(the least and the most counter `name` (base unit `unit`) can read for one kernel, what
    the most is): a kernel of a year (bounds.MAX_STEP_S) on the fastest device."""
    year = bounds.MAX_STEP_S
    if name == CYCLE_RATE:
        return 0.0, bounds.MAX_CLOCK_HZ, f"{bounds.MAX_CLOCK_HZ:.0e} cycles per second"
    if unit == "second":
        return -1.0, year, "a year"
    if unit == "cycle":
        return -1.0, year * bounds.MAX_CLOCK_HZ, "a year of cycles at the fastest clock"
    if unit == "%" or unit.endswith("/cycle"):
        return -1.0, math.inf, ""
    return -1.0, year * bounds.MAX_FLOPS_PER_S, "a year of the fastest device's work"


def check_values(report: NcuReport, in_set: bool = False) -> None:
    """BenchError naming the first kernel and counter with a unit ncu does not write for it, a
    value that is negative, not finite, a zero clock rate or more than a kernel of a year can
    count, or a kernel lacking a counter others of the file have (check_same_metrics). `in_set`:
    the report is one file of a capture set (the advice names that file)."""
    src = report.source or "the ncu output"
    for k in report.kernels:
        for name, value in k.metrics.items():
            if not _checked(name):
                continue
            unit = k.units.get(name, "")
            allowed, written = expected_units(name)
            if unit and unit not in allowed:
                raise BenchError(
                    f"{_kernel(k, src)}: metric {name} has unit {unit!r}, where ncu writes "
                    f"{written}; {_fix(src)}"
                )
            if math.isnan(value):
                continue  # n/a: the summary refuses it where it matters
            if math.isinf(value) or value < 0:
                what = "is not finite" if math.isinf(value) else "is negative"
                raise BenchError(
                    f"{_kernel(k, src)}: metric {name} = {value:g} {what}; a counter counts up "
                    f"from 0 and a time is positive; {_fix(src, in_set)}"
                )
            low, high, most = _most(name, unit)
            if value <= low or value > high:
                what = "is no clock rate" if value <= low else f"is more than {most}"
                raise BenchError(
                    f"{_kernel(k, src)}: metric {name} = {value:g} {what}; {_fix(src, in_set)}"
                )
    if not report.truncated:  # a cut file's last result lacks counters: refuse_truncated says so
        check_same_metrics(report, in_set)


def check_same_metrics(report: NcuReport, in_set: bool = False) -> None:
    """BenchError naming the first kernel that lacks a counter (a metric the summary reads) that
    another kernel of the same file has: ncu writes every metric it collected for every result
    (`n/a` where a value is unavailable), so a gap is an edited or damaged file, and it would
    leave that kernel out of a total."""
    src = report.source or "the ncu output"
    names = {n for k in report.kernels for n in k.metrics if _checked(n)}
    for k in report.kernels:
        lacking = sorted(n for n in names - k.metrics.keys())
        if lacking:
            others = sum(1 for j in report.kernels if lacking[0] in j.metrics)
            raise BenchError(
                f"{_kernel(k, src)}: no value of {lacking[0]}"
                + (f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else "")
                + f", which {others} other kernels of the file have (an empty cell?); "
                + _fix(src, in_set)
            )


RATES = (
    ("flops_total", "FLOPs", bounds.MAX_FLOPS_PER_S, "FLOP/s"),
    ("dram_bytes", "DRAM bytes", bounds.MAX_DRAM_BYTES_PER_S, "byte/s of DRAM bandwidth"),
    ("l2_bytes", "L2 bytes", bounds.MAX_CACHE_BYTES_PER_S, "byte/s of cache bandwidth"),
    ("l1_bytes", "L1 bytes", bounds.MAX_CACHE_BYTES_PER_S, "byte/s of cache bandwidth"),
)
"""(kernel column, what it counts, highest rate any GPU reaches, unit): common/bounds.py."""


def _fix_set(source: str) -> str:
    return (
        "this is not what Nsight Compute writes (an edited or damaged file, or files of different "
        f"captures?): export the files of {source} that hold these counters again from their capture"
    )


def check_rates(kernels: pd.DataFrame, source: str, in_set: bool = False) -> None:
    """BenchError naming the first kernel (a row of NcuSummary.kernels) that does more work in its
    measured time than any GPU can, or runs longer than a year (a time from cycles: 1e308 cycles
    made 7.7e298 s). `in_set`: `source` names a capture set (its kernels merged from files)."""
    if "time_s" not in kernels:
        return
    fix = _fix_set(source) if in_set else _fix(source or "report.csv")
    for row in kernels.to_dict("records"):
        t = row.get("time_s")
        if t is None or not (t > 0):
            continue
        if t > bounds.MAX_STEP_S:
            raise BenchError(
                f"{_kernel(row, source or 'the ncu output')}: a kernel time of {t:.3g} s is more "
                f"than a year (common/bounds.py); {fix}"
            )
        for col, what, high, unit in RATES:
            v = row.get(col)
            if v is None or not math.isfinite(v) or v / t <= high:
                continue
            raise BenchError(
                f"{_kernel(row, source or 'the ncu output')}: {v:.3g} {what} in {t * 1e6:.4g} us is "
                f"{v / t:.3g} {unit}, above the {high:.0e} no GPU reaches (common/bounds.py: at "
                f"least 10x the fastest figure of the vendor table); {fix}"
            )
