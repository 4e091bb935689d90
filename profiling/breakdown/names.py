"""The names of the profiler ranges the breakdown writes (hooks) and reads (attribute, ncu).

One range per module call, named by the module's full path (`module: layer4.1.conv2`; the model
itself is named by the model, `module: resnet18`); one per phase of `train_step` (`phase: forward`,
`phase: backward`, `phase: optimizer`, `phase: train_step`) and of the loop around it (`phase:
data`); one per recorded step (`step: 3`); and inside every AccumulateGrad of a parameter, a marker
naming the module that owns it (`grad: layer4.1.conv2`); on the CPU, about once a millisecond
and at every phase's and step's edge, a marker holding the thread's CPU clock (`cpu: 81234567`).

Rows of the breakdown that are not modules have the fixed names below.
"""

from __future__ import annotations

MODULE = "module: "
PHASE = "phase: "
GRAD = "grad: "
STEP = "step: "
CPU_CLOCK = "cpu: "  # the thread's CPU clock in ns at this instant (hooks.Tracker's cpu_clock)

# rows that are not modules
LOSS = "loss"  # the loss function: forward ops outside the model, and their backward
OPTIMIZER = "optimizer"  # the optimizer step
ZERO_GRAD = "zero_grad"
DATA = "data"  # fetching the next batch (DataLoader wait and host-to-device copies)
COMM = "communication"  # collectives (DDP, DeepSpeed), their waits, DDP's bucket copies: exposed
UNATTRIBUTED = "unattributed"  # what no module or named part owns
IDLE = "device idle"  # CUDA: the device had nothing to run (host overhead, waits)
SPECIAL_ROWS = (LOSS, OPTIMIZER, ZERO_GRAD, DATA, COMM, UNATTRIBUTED, IDLE)

# the phase column of a row
PHASES = ("forward", "backward", "optimizer", "data", "other")
SHORT_PHASE = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


SHORT_CLOCKS = {
    "the main thread's CPU clock": "CPU clock",
    "the wall clock": "wall clock",
    "kernel time on the device": "kernel time",
}
"""the clock a breakdown's shares are by (table.share_clock_name), where a short name fits"""


def row_label(module: str, phase: str) -> str:
    """A row as the figures, tags and the report name it: `layer4.1.conv1 bwd`, `optimizer` (its
    phase not said twice), `zero_grad other`."""
    return module if phase == module else f"{module} {SHORT_PHASE.get(phase, phase)}"


# the parts of the whole step (metrics breakdown_<part>_s), in the stacked bar's order
PARTS = (
    "data_wait",
    "h2d_copy",
    "forward",
    "backward",
    "optimizer",
    "exposed_comm",
    "host_overhead",
)

ZERO_GRAD_PREFIX = "Optimizer.zero_grad#"  # torch's own range around optimizer.zero_grad()
EVALUATE = "autograd::engine::evaluate_function: "
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


def module_range(path: str) -> str:
    return MODULE + path


def phase_range(phase: str) -> str:
    return PHASE + phase


def step_range(index: int) -> str:
    return f"{STEP}{index}"


def module_depth(path: str, root: str) -> int:
    """0 for the model itself, 1 for its children (`layer1`), 2 for theirs (`layer1.0`)..."""
    if path == root:
        return 0
    return path.count(".") + 1


def is_inside(path: str, ancestor: str, root: str) -> bool:
    """Whether module `path` is `ancestor` or one of its descendants (the model holds them all)."""
    if ancestor == root or path == ancestor:
        return path not in SPECIAL_ROWS
    return path.startswith(ancestor + ".")
