"""The project on a torch without the private APIs it prefers (issue 34 item 3).

The GPU machine's torch 2.11 has no `_KinetoEvent.activity_type()`; the breakdown must read its
events anyway. These tests remove the attribute (monkeypatch) and check that:
* the events read without it are the same as with it, on a real profiled training step;
* device events (kernels, copies, sets, syncs, device copies of annotations) and host runtime
  calls get their kinds from `device_type()`, the name and the linked correlation id;
* `python -m profiling --breakdown` runs to a FINISHED run with the attribute absent.
"""

from __future__ import annotations

import contextlib

import mlflow
import pytest
import torch
import torch.nn as nn
from torch._C._autograd import _KinetoEvent

from common import schema
from profiling.breakdown import names
from profiling.breakdown.events import (
    CPU,
    KERNEL,
    MEMCPY,
    MEMSET,
    RUNTIME,
    _kind_without_activity_type,
    event_kind,
    from_kineto,
)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@contextlib.contextmanager
def _tracked_net():
    """`_Net` with a Tracker attached (made here, after any monkeypatch) and one training step
    run, so the optimizer's state exists: (tracker, a function that runs one more step)."""
    from profiling.breakdown.hooks import Tracker
    from train.step import StepParts, train_step

    torch.manual_seed(0)
    model = _Net()
    x, y = torch.randn(2, 2, 4, 4), torch.tensor([0, 2])
    with Tracker(model, "net") as tracker:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        parts = StepParts(model, opt, contextlib.nullcontext, mark=tracker.mark)
        train_step(parts, x, y)
        yield tracker, lambda: train_step(parts, x, y)


def _profiled_results():
    """The kineto results of one profiled training step of `_Net` with module ranges."""
    from torch.profiler import ProfilerActivity, profile

    with _tracked_net() as (tracker, step):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with tracker.span(names.step_range(0)):
                step()
    return prof.profiler.kineto_results


def test_events_without_activity_type_equal_those_with_it(monkeypatch):
    results = _profiled_results()
    with_it = from_kineto(results)
    assert with_it and any(e.name == "module: conv" for e in with_it)
    monkeypatch.delattr(_KinetoEvent, "activity_type")
    assert not hasattr(next(iter(results.events())), "activity_type")
    without = from_kineto(results)
    assert without == with_it


class _Fake:
    """A kineto event as torch 2.11 shows it: no activity_type()."""

    def __init__(self, name, device="CPU", annotation=False, linked=0):
        self._name, self._device, self._ann, self._linked = name, device, annotation, linked

    def name(self):
        return self._name

    def device_type(self):
        return getattr(torch.autograd.DeviceType, self._device)

    def is_user_annotation(self):
        return self._ann

    def linked_correlation_id(self):
        return self._linked


@pytest.mark.parametrize(
    "event, kind",
    [
        (_Fake("aten::addmm"), CPU),
        (_Fake("module: conv", annotation=True), CPU),
        (_Fake("cudaLaunchKernel", linked=7), RUNTIME),
        (_Fake("cuLaunchKernelEx"), RUNTIME),
        (_Fake("cudaStreamSynchronize"), RUNTIME),
        (_Fake("cutlass_80_tensorop_bf16_s16816gemm", "CUDA", linked=7), KERNEL),
        (_Fake("void at::native::vectorized_elementwise_kernel<4>", "CUDA", linked=9), KERNEL),
        (_Fake("Memcpy HtoD (Pageable -> Device)", "CUDA", linked=3), MEMCPY),
        (_Fake("Memset (Device)", "CUDA", linked=4), MEMSET),
        (_Fake("module: conv", "CUDA", annotation=True), None),
        (_Fake("Stream Wait Event", "CUDA"), None),
    ],
)
def test_kinds_from_device_type_name_and_link(event, kind):
    assert _kind_without_activity_type(event) == kind
    assert event_kind(event) == kind  # no activity_type on the fake: the fallback is used


def test_host_op_named_like_cuda_but_lowercase_is_an_op():
    assert _kind_without_activity_type(_Fake("cudnn_convolution")) == CPU


def _without_sequence_numbers(monkeypatch) -> None:
    """A torch without the private autograd calls the Tracker prefers."""
    monkeypatch.delattr(torch._C._autograd, "_get_sequence_nr")
    monkeypatch.delattr(torch._C, "_current_autograd_node")


def test_without_sequence_numbers_backward_work_is_unattributed_not_lost(monkeypatch):
    """Counting pass: forward rows as before; every backward FLOP in (unattributed, backward);
    the total unchanged. No sequence number has an owner."""
    from tests.test_breakdown import count_one

    def counted():
        with _tracked_net() as (tracker, step):
            return count_one(tracker, step, 2), tracker

    with_seq, _ = counted()
    _without_sequence_numbers(monkeypatch)
    without, tracker = counted()
    assert without.train_flops == with_seq.train_flops > 0
    forward = {k: v for k, v in with_seq.flops.items() if k[1] == "forward"}
    assert {k: v for k, v in without.flops.items() if k[1] == "forward"} == forward
    backward = {k for k, v in without.flops.items() if k[1] == "backward" and v}
    assert backward == {(names.UNATTRIBUTED, "backward")}
    assert tracker.owner_of_seq(0) is None and tracker.owner_of_seq(10**6) is None


def test_breakdown_command_runs_without_activity_type(tracking, monkeypatch):
    """... and without the sequence numbers: all three private calls absent."""
    from profiling.cli import main as profiling_main

    monkeypatch.delattr(_KinetoEvent, "activity_type")
    _without_sequence_numbers(monkeypatch)
    argv = ["--breakdown", "--model", "resnet18", "--batch", "2", "--image-size", "32"]
    argv += ["--device", "cpu", "--num-classes", "10", "--warmup-iters", "1", "--iters", "1"]
    assert profiling_main([*argv, "--no-progress"]) == 0
    (run,) = mlflow.search_runs(experiment_ids=["0"], output_format="list")
    assert run.info.status == "FINISHED"
    assert run.data.tags[schema.TAG_RUN_KIND] == "breakdown"
    m = run.data.metrics
    assert m["breakdown_forward_s"] > 0 and m["breakdown_backward_s"] > 0


def _torch_2_11_methods() -> set[str]:
    """The methods of torch 2.11.0's _KinetoEvent, from its own type stub (tests/data/torch_2_11)."""
    import re
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "torch_2_11" / "kineto_event.pyi").read_text()
    block = text.split("class _KinetoEvent:", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"def (\w+)\(", block))


class _As211:
    """A real kineto event that answers only what torch 2.11.0's _KinetoEvent has."""

    def __init__(self, event, methods):
        self._event, self._methods = event, methods

    def __getattr__(self, name):
        if name not in self._methods:
            raise AttributeError(f"torch 2.11 _KinetoEvent has no {name}")
        return getattr(self._event, name)


def test_the_breakdown_reads_events_with_only_torch_2_11_methods():
    methods = _torch_2_11_methods()
    assert "activity_type" not in methods and {"device_type", "is_user_annotation"} <= methods
    results = _profiled_results()
    wrapped = type(
        "Results", (), {"events": lambda self: [_As211(e, methods) for e in results.events()]}
    )
    assert from_kineto(wrapped()) == from_kineto(results)
