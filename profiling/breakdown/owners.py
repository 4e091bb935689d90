"""Who owns backward work: the one rule, for host attribution, counting and ncu kernels alike.

* A backward node belongs to the module that made it: the module innermost when autograd gave
  the node its sequence number in forward (the loss between the model's output and `backward`).
  An in-place ReLU's node is made inside the ReLU, so its backward is the ReLU's; a residual
  add's node is its block's.
* An AccumulateGrad (it has no sequence number) belongs to the module that owns its parameter.
* Anything else in backward (the engine between nodes, a node made on another thread or outside
  the model) is `unattributed`.

`SeqOwners` is the map from sequence numbers to modules: the owner of a number is the owner of the
greatest start at or below it. The Tracker (hooks.py) fills it at every module entry and exit
(every number from that instant on is that module's, until the next); ncu.py fills it from the
forward ops seen inside module ranges (a number whose op launched no kernel takes the nearest
lower one's). `backward_owner` applies the rule; hooks.Tracker.current (counting FLOPs and
bytes), attribute (host time) and ncu (kernels) call it.
"""

from __future__ import annotations

import bisect
from typing import Callable, Iterable

from profiling.breakdown import names


class SeqOwners:
    """Sequence-number starts (ascending) and the module each start opens."""

    def __init__(self, pairs: Iterable[tuple[int, str | None]] = ()) -> None:
        ordered = sorted(pairs, key=lambda p: p[0])
        self.starts: list[int] = [s for s, _ in ordered]
        self.owners: list[str | None] = [o for _, o in ordered]

    def note(self, start: int, owner: str | None) -> None:
        """From `start` on (not below any start noted before), numbers are `owner`'s."""
        self.starts.append(start)
        self.owners.append(owner)

    def __call__(self, seq: int) -> str | None:
        """The owner of node number `seq`; None before the first start (made outside)."""
        i = bisect.bisect_right(self.starts, seq) - 1
        return self.owners[i] if i >= 0 else None

    def clear(self) -> None:
        self.starts.clear()
        self.owners.clear()


def backward_owner(
    *,
    seq: int = -1,
    accumulate_grad: bool = False,
    param_owner: str | None = None,
    owner_of_seq: Callable[[int], str | None] | None = None,
) -> str:
    """The row that owns one piece of backward work (see the module doc): an AccumulateGrad its
    parameter's module, a node with a sequence number the module that made it, else
    `unattributed`."""
    if accumulate_grad:
        return param_owner or names.UNATTRIBUTED
    if seq >= 0 and owner_of_seq is not None:
        return owner_of_seq(seq) or names.UNATTRIBUTED
    return names.UNATTRIBUTED
