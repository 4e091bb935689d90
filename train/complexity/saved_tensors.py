"""What autograd saves for backward during a step, recorded per storage and attributed to the module
that saved it (`torch.autograd.graph.saved_tensors_hooks` plus forward hooks). Used by
train/complexity/footprint.py for the activation part of the memory model.

Pure measurement: no MLflow, no files.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

from train.step import logits_of

LOSS_ROW = "(loss)"  # saved tensors packed outside the model's forward (cross-entropy)
MODEL_ROW = "(model)"  # work done in the top-level module's own forward (e.g. torch.flatten)


def storage_key(t):
    """(key, bytes) identifying the storage behind `t`; tensors without one count their own bytes."""
    try:
        s = t.untyped_storage()
        return ("ptr", str(t.device), s.data_ptr()), int(s.nbytes())
    except (RuntimeError, NotImplementedError, TypeError):  # e.g. opaque mkldnn tensors
        return ("id", id(t)), int(t.numel() * t.element_size())


def unique_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        key, nbytes = storage_key(t)
        if key not in seen:
            seen.add(key)
            total += nbytes
    return total


@dataclass
class SavedTensors:
    """What autograd saved for backward during one step (each storage once)."""

    batch_size: int
    total_bytes: int
    by_module: dict[str, int]
    weight_bytes: int  # saved storages that are parameters or buffers (not counted in total_bytes)
    output_shapes: dict[str, tuple]  # module name -> output shape of its last call


class SavedTensorRecorder:
    """Context manager recording the storages autograd saves for backward while it is open.

    Each storage is counted once (keyed by device and data pointer; the recorder keeps a reference
    to every storage it saw until it closes, so a pointer cannot be reused by another storage in the
    meantime). Storages of the model's parameters and buffers are weights and are reported apart.
    A storage is attributed to the innermost module whose forward was running when it was first
    saved (forward pre/post hooks on every module); storages saved outside the model's forward are
    attributed to LOSS_ROW, those saved by the top-level module itself to MODEL_ROW.
    """

    def __init__(self, model, batch_size: int) -> None:
        self.model = model
        self.batch_size = batch_size
        self._stack: list[str] = []
        self._seen: dict[tuple, str] = {}
        self._keep: list = []
        self._handles: list = []
        self._ctx = None
        self.by_module: dict[str, int] = {}
        self.weight_bytes = 0
        self.output_shapes: dict[str, tuple] = {}
        self._weights: set[tuple] = set()

    def __enter__(self) -> "SavedTensorRecorder":
        import torch

        self._weights = {
            storage_key(t)[0] for t in chain(self.model.parameters(), self.model.buffers())
        }
        for name, module in self.model.named_modules():
            label = name or MODEL_ROW
            self._handles.append(module.register_forward_pre_hook(self._pre(label)))
            self._handles.append(module.register_forward_hook(self._post(label), always_call=True))
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self._ctx.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._keep.clear()
        return False

    def _pre(self, label: str):
        def hook(_module, _inputs):
            self._stack.append(label)

        return hook

    def _post(self, label: str):
        def hook(_module, _inputs, output):
            if self._stack and self._stack[-1] == label:
                self._stack.pop()
            shape = _first_tensor_shape(output)
            if shape is not None:
                self.output_shapes[label] = shape

        return hook

    def _pack(self, t):
        key, nbytes = storage_key(t)
        if nbytes == 0 or key in self._seen:
            return t
        self._seen[key] = owner = self._stack[-1] if self._stack else LOSS_ROW
        self._keep.append(t)
        if key in self._weights:
            self.weight_bytes += nbytes
        else:
            self.by_module[owner] = self.by_module.get(owner, 0) + nbytes
        return t

    def result(self) -> SavedTensors:
        return SavedTensors(
            self.batch_size,
            sum(self.by_module.values()),
            dict(self.by_module),
            self.weight_bytes,
            dict(self.output_shapes),
        )


def _first_tensor_shape(output):
    import torch

    output = logits_of(output)
    if isinstance(output, torch.Tensor):
        return tuple(output.shape)
    if isinstance(output, (tuple, list)):
        for o in output:
            if isinstance(o, torch.Tensor):
                return tuple(o.shape)
    return None
