"""Read an Nsight Compute report (.ncu-rep) with NVIDIA's `ncu_report` package (PyPI `ncu-report`).

The package reads reports on any machine, GPU or not. The result has the same shape as a parsed
CSV (profiling.ncu.parse.NcuReport), so profiling.ncu.totals aggregates both the same way.

Reports made with `ncu --set full` (or `--set detailed`/`roofline`) carry FLOP counts only as rates:
``smsp__sass_thread_inst_executed_op_<op>_pred_on.sum.per_cycle_elapsed``; the count is that rate
times ``smsp__cycles_elapsed.avg``, which is how Nsight Compute's own roofline chart gets it. We copy
the rates and the cycles here and let the counting multiply (profiling.ncu.counting._count).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from common.errors import BenchError, one_line
from profiling.ncu.counting import metrics_capability
from profiling.ncu.messages import messages_reason
from profiling.ncu.names import DEVICE_NAME_METRIC, is_relevant
from profiling.ncu.parse import NcuKernel, NcuReport
from profiling.ncu.units import unit_scale

NCU_REP_SUFFIXES = (".ncu-rep", ".ncu-repz")


def is_ncu_rep(path: str | Path) -> bool:
    return str(path).lower().endswith(NCU_REP_SUFFIXES)


def load_ncu_rep(path: str | Path, keep: Callable[[str], bool] = is_relevant) -> NcuReport:
    """All results (kernels) of a report, with the metrics `keep` selects, in SI units."""
    p = Path(path)
    if not p.exists():
        raise BenchError(f"no such report: {p}")
    try:
        import ncu_report
    except ImportError as exc:
        raise BenchError(
            "reading .ncu-rep needs NVIDIA's ncu-report package: `pip install ncu-report` "
            "(or export a CSV with `ncu --import report.ncu-rep --csv --page raw > report.csv`)"
        ) from exc
    try:
        ctx = ncu_report.load_report(str(p))
    except Exception as exc:  # noqa: BLE001 - the library raises plain exceptions on bad files
        raise BenchError(
            f"cannot read {p.name} as an Nsight Compute report: {one_line(exc)}"
        ) from exc

    report = NcuReport(kernels=[], page="ncu-rep", source=p.name)
    _add_results(ctx, report, keep)
    if not report.kernels:
        raise BenchError(empty_report_reason(p.name, _head(p)))
    return report


REPORT_MAGIC = b"NVR\x00"
"""First bytes of an uncompressed .ncu-rep (seen in the T4 fixture; not a documented format)."""


def empty_report_reason(name: str, head: bytes) -> str:
    """Why a file ncu_report opened without error gave no results (pure, from its first bytes).

    ncu_report.load_report does not raise on garbage: 2000 random bytes load as a report with no
    ranges, and so does a report missing its last bytes. So: text made of ncu's messages gets the
    capture path's one-line reason; a file that starts like a report is a truncated/damaged one
    (or one whose ncu run profiled nothing); anything else is not a readable report.
    """
    text = head.decode("utf-8", errors="strict") if _is_text(head) else ""
    if text:
        reason = messages_reason(
            name, [ln.strip() for ln in text.splitlines() if ln.strip().startswith("==")]
        )
        if reason:
            return reason
    if head.startswith(REPORT_MAGIC):
        return (
            f"{name} starts like an Nsight Compute report but ncu_report reads no profiled kernel from it: the "
            "file is truncated or damaged (copy it again), or the ncu run that wrote it profiled nothing"
        )
    return (
        f"{name} is not a readable Nsight Compute report (ncu_report finds no results in it): copy the "
        "file again, or export a CSV where it was made with `ncu --import report.ncu-rep --csv --page raw`"
    )


def _head(p: Path, n: int = 65536) -> bytes:
    try:
        with open(p, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def _is_text(head: bytes) -> bool:
    if not head or b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _add_results(ctx, report: NcuReport, keep: Callable[[str], bool]) -> None:
    next_id = 0
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            k = NcuKernel(id=_result_id(action, next_id), name=action.name())
            next_id = k.id + 1
            for name in action.metric_names():
                if not keep(name) and name != DEVICE_NAME_METRIC:
                    continue
                _copy_metric(action.metric_by_name(name), name, k, report)
            _copy_launch(action, k)
            pp, se = _nvtx(action)
            k.nvtx_push_pop, k.nvtx_start_end = pp, se
            report.has_nvtx = report.has_nvtx or bool(pp or se)
            report.kernels.append(k)


def _result_id(action, default: int) -> int:
    m = action.metric_by_name("profiler__result_id") if hasattr(action, "metric_by_name") else None
    try:
        return int(m.as_uint64()) if m is not None and m.has_value() else default
    except Exception:  # noqa: BLE001
        return default


def _copy_metric(metric, name: str, k: NcuKernel, report: NcuReport) -> None:
    if metric is None:
        return
    try:
        if not metric.has_value():
            report.na[name] = report.na.get(name, 0) + 1
            k.metrics[name] = math.nan
            return
    except Exception:  # noqa: BLE001 - older reader versions lack has_value
        pass
    value = None
    try:
        value = metric.as_double()
    except Exception:  # noqa: BLE001
        value = None
    text = None
    try:
        text = metric.as_string()
    except Exception:  # noqa: BLE001
        text = None
    if name == DEVICE_NAME_METRIC or (text and not _numeric(text) and not value):
        if text:
            k.texts[name] = text
        return
    if value is None:
        return
    scale, base = unit_scale(metric.unit() or "")
    k.metrics[name] = float(value) * scale
    k.units[name] = base


def _numeric(text: str) -> bool:
    try:
        float(text.replace(",", ""))
        return True
    except ValueError:
        return False


def _copy_launch(action, k: NcuKernel) -> None:
    for attr, metric in (("Block Size", "launch__block_size"), ("Grid Size", "launch__grid_size")):
        m = action.metric_by_name(metric)
        try:
            if m is not None and m.has_value():
                k.attrs[attr] = str(int(m.as_uint64()))
        except Exception:  # noqa: BLE001
            pass
    cap = metrics_capability(k.metrics)
    if cap is not None:
        k.attrs["CC"] = f"{cap[0]}.{cap[1]}"


MAX_NVTX_RANGES = 256
"""Ranges read per domain and kind (a guard against a reader that never returns None)."""


def _nvtx(action) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(push/pop range names in stack order, start/end range names) of the action's NVTX state.

    Written against the ncu_report API (INvtxState.domains, domain_by_id,
    INvtxDomainInfo.push_pop_range(i), start_end_range(i), INvtxRange.name/message). The package
    documents push_pop_range's index as the call-stack order; it documents no order for
    start/end ranges, so the phase is chosen by name (NcuKernel.phase), not by position. Tested
    with stand-in objects: no recorded report with NVTX ranges was available (docs/profiling.md).
    """
    try:
        state = action.nvtx_state()
    except Exception:  # noqa: BLE001
        return (), ()
    if state is None:
        return (), ()
    push_pop: list[str] = []
    start_end: list[str] = []
    try:
        for dom_id in state.domains():
            dom = state.domain_by_id(dom_id)
            for getter, out in ((dom.push_pop_range, push_pop), (dom.start_end_range, start_end)):
                for i in range(MAX_NVTX_RANGES):
                    rng = getter(i)
                    if rng is None:
                        break
                    name = rng.name() or rng.message()
                    if name:
                        out.append(name)
    except Exception:  # noqa: BLE001 - keep the counters even when NVTX cannot be read
        return tuple(push_pop), tuple(start_end)
    return tuple(push_pop), tuple(start_end)
