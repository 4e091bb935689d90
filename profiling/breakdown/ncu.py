"""An Nsight Compute capture with module NVTX ranges -> the breakdown's rows, measured.

Profile mode with `--nvtx-modules` (train.profile_mode.profile_steps) pushes one NVTX range per module
call, named as the breakdown's profiler ranges (`module: layer4.1.conv2`), on the thread that runs
forward, and wraps the steps in torch.autograd.profiler.emit_nvtx, which names every op's range
`<op>, seq = <n>` and every backward node's with the number of the forward op that made it. Each kernel
row of such a capture is attributed to a module:

* forward: the innermost `module: ...` range open on the launching thread;
* backward, an AccumulateGrad: the module owning its parameter, from the `grad: <owner>` range the
  Tracker opens around every parameter's AccumulateGrad under NVTX;
* backward (autograd's thread, where no module range is open): the sequence number of the
  node's range, the outermost on that thread (torch 2.14 writes `<Node>, seq = n`; its docs say
  `stashed seq=n`: both are read), matched to the forward op `<op>, seq = n` that ran inside a
  module range (or outside the model in forward: the loss) in the same capture; when that op
  launched no kernel of its own (a view), the nearest lower sequence number seen;
* otherwise by the kernel's phase (profiling.ncu.nvtx.kernel_phase): the loss, the optimizer, or
  `unattributed`.

The rows then hold ncu's measured FLOPs and DRAM bytes (`bytes_source` = measured) and ncu's
kernel time (`time_source` = ncu: replayed with locked clocks and flushed caches, not training
time; the shares of a `breakdown` run of the same config on the GPU are the unperturbed ones).
Pure: kernels in, rows out.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

from common.stats import as_float
from profiling.breakdown import names
from profiling.breakdown.attribute import Attribution, Key
from profiling.breakdown.owners import SeqOwners, backward_owner
from profiling.breakdown.roof import Ceilings
from profiling.breakdown.table import ModuleTree, rows

_SEQ = re.compile(r"\bseq\s*=\s*(\d+)")  # `<op>, seq = n`; torch's docs also write `stashed seq=n`
_FORWARD_PHASES = ("forward", "loss")
_PHASE_ROW = {
    "forward": (names.LOSS, "forward"),
    "loss": (names.LOSS, "forward"),
    "backward": (names.UNATTRIBUTED, "backward"),
    "optimizer": (names.OPTIMIZER, "optimizer"),
    "optimizer_step": (names.OPTIMIZER, "optimizer"),
}


def has_module_ranges(kernels) -> bool:
    """Whether a capture carries module ranges (NcuKernel list)."""
    return any(r.startswith(names.MODULE) for k in kernels for r in k.nvtx_push_pop)


def _innermost_module(ranges: tuple[str, ...]) -> str | None:
    for r in reversed(ranges):
        if r.startswith(names.MODULE):
            return r[len(names.MODULE) :]
    return None


def seq_map(kernels) -> dict[int, str]:
    """Forward sequence number -> the module whose range was innermost around the op (the loss
    for forward ops outside the model)."""
    out: dict[int, str] = {}
    for k in kernels:
        if k.phase not in _FORWARD_PHASES and _innermost_module(k.nvtx_push_pop) is None:
            continue
        stack = k.nvtx_push_pop
        for i, r in enumerate(stack):
            m = _SEQ.search(r)
            if m and not r.startswith(names.MODULE):
                out[int(m.group(1))] = _innermost_module(stack[:i]) or names.LOSS
    return out


def kernel_owner(k, seqs: SeqOwners) -> Key:
    """(row, phase) of one kernel (see the module docstring; backward by owners.backward_owner)."""
    module = _innermost_module(k.nvtx_push_pop)
    if module is not None:
        return module, "forward"
    if k.phase == "backward":
        for r in k.nvtx_push_pop:  # an AccumulateGrad inside the Tracker's `grad: <owner>`
            if r.startswith(names.GRAD):
                return backward_owner(accumulate_grad=True, param_owner=r[len(names.GRAD) :]), (
                    "backward"
                )
        for r in k.nvtx_push_pop:  # the node's range is the outermost on autograd's thread
            m = _SEQ.search(r)
            if m:
                return backward_owner(seq=int(m.group(1)), owner_of_seq=seqs), "backward"
    return _PHASE_ROW.get(k.phase or "", (names.UNATTRIBUTED, "other"))


def tree_of(root: str, paths) -> ModuleTree:
    """The module tree the ranges name: `root` is the model (the outermost module range); every
    dotted prefix of a path is a module too."""
    known = {root}
    for p in paths:
        if p and p != root:
            parts = p.split(".")
            known.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    ordered = sorted(known, key=lambda p: (p != root, p))
    leaves = {p for p in ordered if p != root and not any(q.startswith(p + ".") for q in known)}
    return ModuleTree(root, ordered, leaves)


def outermost_module(kernels) -> str:
    """The model's name: the outermost module range of the capture."""
    for k in kernels:
        for r in k.nvtx_push_pop:
            if r.startswith(names.MODULE):
                return r[len(names.MODULE) :]
    raise ValueError("no module ranges in the capture (profile with --nvtx-modules)")


def ncu_rows(kernels, per_kernel: list[dict], ceilings: Ceilings) -> tuple[list[dict], list[Key]]:
    """layers.csv rows from a capture's kernels (NcuKernel list) and their measured quantities
    (profiling.ncu.totals's kernel rows, same order: time_s, flops_total, dram_bytes). Returns
    the rows and each kernel's (row, phase)."""
    seqs = SeqOwners(seq_map(kernels).items())
    owners = [kernel_owner(k, seqs) for k in kernels]
    self_s: dict[Key, float] = defaultdict(float)
    calls: dict[Key, float] = defaultdict(float)
    flops: dict[Key, float] = defaultdict(float)
    dram: dict[Key, float] = defaultdict(float)
    for key, q in zip(owners, per_kernel):
        self_s[key] += as_float(q.get("time_s")) or 0.0  # a kernel missing a count adds none
        calls[key] += 1
        flops[key] += as_float(q.get("flops_total")) or 0.0
        dram[key] += as_float(q.get("dram_bytes")) or 0.0
    tree = tree_of(
        outermost_module(kernels), {k[0] for k in owners if k[0] not in names.SPECIAL_ROWS}
    )
    att = Attribution(steps=1, time_source="ncu", self_s=dict(self_s), calls=dict(calls))
    total = sum(self_s.values())
    return rows(tree, att, dict(flops), dict(dram), total, ceilings, "measured"), owners


def kernel_points(per_kernel: list[dict], owners: list[Key], total_s: float) -> list[dict]:
    """One figure point per kernel (profiling.breakdown.figures.layer_roofline's row format)."""
    out = []
    for q, (module, phase) in zip(per_kernel, owners):
        t, f, b = (as_float(q.get(k)) or 0.0 for k in ("time_s", "flops_total", "dram_bytes"))
        out.append(
            {
                "module": f"{module} {str(q.get('kernel', ''))[:24]}",
                "phase": phase,
                "kind": "module",
                "leaf": True,
                "time_s": t,
                "share": t / total_s if total_s > 0 else math.nan,
                "flops": f,
                "intensity_flops_per_byte": f / b if b > 0 else math.nan,
                "achieved_flops_per_s": f / t if t > 0 else math.nan,
            }
        )
    return out
