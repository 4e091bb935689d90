"""NVTX ranges in ncu's output -> the training phase each kernel ran in.

`nvtx_ranges` reads one NVTX cell of ncu's CSV; `kernel_phase` picks the phase from a kernel's
open ranges (profiling.ncu.parse.NcuKernel.phase). Pure.
"""

from __future__ import annotations

import re

from train.step import PHASES

PHASE_NAMES = tuple(p for p in PHASES if p != "train_step")
"""The phase ranges `python -m train --profile-steps K` marks inside `train_step`."""
_QUOTED = re.compile(r'"([^"]*)"')


def phase_name(range_name: str) -> str | None:
    """The training phase a range name stands for: a known phase name, bare or as
    ``domain@name``; None for any other range."""
    if range_name in PHASE_NAMES:
        return range_name
    _, at, bare = range_name.partition("@")
    return bare if at and bare in PHASE_NAMES else None


def kernel_phase(start_end: tuple[str, ...], push_pop: tuple[str, ...]) -> str | None:
    """The training phase of a kernel launched while the start/end ranges `start_end` (in start
    order) and the push/pop ranges `push_pop` (outermost first) were open; None without NVTX.

    A known phase name (PHASE_NAMES) among the open ranges wins wherever it sits, so the
    answer does not depend on the order ranges are listed in (for start/end ranges neither
    ncu's CSV nor ncu_report documents one). Start/end ranges are looked at first
    (process-wide, so backward kernels launched from autograd's thread carry them), then
    push/pop ranges, whose order is the stack order (innermost last). A range may carry its
    NVTX domain as ``domain@name`` (ncu's notation; the ``nvtx`` package's ranges can have a
    domain): its name counts. Several known names
    in one kind (only with nested marks of one's own) resolve to the last listed. Without
    a known name: the innermost range as listed (e.g. "loss", "optimizer_step" in the L4
    fixture).
    """
    for ranges in (start_end, push_pop):
        known = [p for p in (phase_name(name) for name in ranges) if p]
        if known:
            return known[-1]
    if start_end:
        return start_end[-1]
    if push_pop:
        return push_pop[-1]
    return None


def nvtx_ranges(cell: str) -> tuple[str, ...]:
    """Range names in one NVTX column cell, outermost (or first started) first.

    ncu writes each open range as ``<domain>:<name>:<PL_Type>:<PL_Value>:<CLR_Type>:<Color>:
    <Msg_Type>:<Msg>`` (start/end ranges prefixed by their numeric id), each in double quotes,
    after the thread id for push/pop ranges, e.g.
    ``3984  "<default domain>:train_step:none:none:none:none:none:none"  "<default domain>:forward:..."``.
    Start/end ranges are ordered by id (their start order).
    """
    cell = (cell or "").strip()
    if not cell:
        return ()
    segments = _QUOTED.findall(cell)
    if not segments:  # unquoted: a single range, or several separated by runs of blanks
        segments = [s for s in re.split(r"\s{2,}", cell) if s.strip()]
    found: list[tuple[int, int, str]] = []
    for pos, seg in enumerate(segments):
        rng = _range_name(seg)
        if rng is not None:
            rid, name = rng
            found.append((rid if rid is not None else -1, pos, name))
    if any(rid >= 0 for rid, _, _ in found):
        found.sort()
    return tuple(name for _, _, name in found)


def _range_name(segment: str) -> tuple[int | None, str] | None:
    parts = segment.strip().split(":")
    if len(parts) < 8:  # not the documented layout: a bare thread id, or a name alone
        text = segment.strip()
        if not text or text.isdigit() or text.lower() == "none":
            return None
        return None, text
    core = parts[:-6]  # drop PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg
    rid = None
    if len(core) >= 3 and core[0].strip().isdigit():
        rid, core = int(core[0].strip()), core[1:]
    name = ":".join(core[1:]).strip()  # core[0] is the domain
    if not name or name.lower() == "none":
        msg = parts[-1].strip()  # some writers put the text in Msg instead
        if not msg or msg.lower() == "none":
            return None
        name = msg
    return rid, name
