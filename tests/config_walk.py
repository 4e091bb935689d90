"""`python -m tests.config_walk`: the newcomer's walk of a TrainConfig, counted (docs/architecture.md).

Runs four commands in this process against a temporary sqlite store, each on the tests' tiny
configuration (resnet18, 32 px, batch 2, CPU): `python -m train`, `python -m train.sweep` (two
batch sizes), `python -m profiling --breakdown` and `python -m profiling --import` of the recorded
L4 capture. A profile hook (sys.setprofile) sees every call of a function of the project's
packages that receives the TrainConfig, as an argument or as `self` (its __init__ and
__post_init__ left out; a generator counted when it starts, not when it resumes). A call is one
call site (the project line that made it) and the function it called, counted once however often
it runs. Printed: per command and in all, the calls, the files they land in, and how many of them
go back into a file the walk had already left; then every call, in the order first made.

Slow under the hook (about 5 minutes on a shared 2-core machine); not a pytest file.
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "roofline", "train", "profiling", "analysis", "gpu_check")
TINY = "--model resnet18 --batch 2 --image-size 32 --device cpu --warmup-iters 1 --iters 2"
TINY += " --num-classes 10 --no-progress"
L4 = ROOT / "tests" / "data" / "ncu" / "l4_resnet18_bs64_train_step_details_nvtx.csv"
COMMANDS = (
    ("train", f"{TINY} --no-system-metrics".split()),
    ("train.sweep", "--models resnet18 --batch-sizes 2 3 --image-size 32 --device cpu".split()
     + "--warmup-iters 1 --iters 2 --no-progress".split()),
    ("profiling", ["--breakdown", *TINY.split()]),
    ("profiling", "--model resnet18 --batch 64 --image-size 32 --import".split()
     + [str(L4), "--device-name", "NVIDIA L4"]),
)  # fmt: skip


class Walk:
    """The calls that receive a TrainConfig, in the order first made."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, str, str]] = []
        self.seen: set[tuple] = set()
        self.generators: dict[int, object] = {}
        self.command = ""
        self.config_class = None

    def hook(self, frame, event, arg) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(str(ROOT)):
            return
        code = frame.f_code
        rel = code.co_filename[len(str(ROOT)) + 1 :]
        if rel.split("/")[0] not in PACKAGES or code.co_name in ("__init__", "__post_init__"):
            return
        cls = self.config_class or getattr(sys.modules.get("train.config"), "TrainConfig", None)
        if cls is None or not isinstance(cls, type):
            return
        self.config_class = cls
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if not any(isinstance(frame.f_locals.get(n), cls) for n in names):
            return
        if code.co_flags & 0x20:  # a generator: started once, resumed later
            if id(frame) in self.generators:
                return
            self.generators[id(frame)] = frame
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(str(ROOT)):
            caller = caller.f_back  # the project line that made it (a with statement's too)
        where = caller.f_code.co_filename[len(str(ROOT)) + 1 :] if caller else "?"
        line = caller.f_lineno if caller else 0
        key = (where, line, rel, code.co_qualname)
        if key not in self.seen:
            self.seen.add(key)
            self.calls.append((self.command, where, line, rel, code.co_qualname))


def summary(calls: list[tuple]) -> str:
    back, last, visited = 0, None, set()
    for call in calls:
        if call[3] != last and call[3] in visited:
            back += 1
        visited.add(call[3])
        last = call[3]
    files = len({c[3] for c in calls})
    return f"{len(calls)} calls, {files} files, {back} back into a file already left"


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="config-walk-"))
    os.environ.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{folder / 'mlflow.db'}",
        ROOFLINE_SPOOL_DIR=str(folder / "spool"),
        ROOFLINE_CACHE_DIR=str(folder / "cache"),
        DS_ACCELERATOR="cpu",
    )
    os.chdir(folder)
    sys.path.insert(0, str(ROOT))
    walk = Walk()
    sys.setprofile(walk.hook)
    threading.setprofile(walk.hook)
    try:
        for i, (module, argv) in enumerate(COMMANDS):
            walk.command = f"{i + 1}:{module}"
            sys.argv = [module, *argv]
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as exc:
                if exc.code not in (0, None):
                    print(f"{module} exited {exc.code}", file=sys.stderr)
                    return 1
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    out = [f"all commands: {summary(walk.calls)}"]
    for i, (module, _) in enumerate(COMMANDS):
        tag = f"{i + 1}:{module}"
        out.append(f"{tag}: {summary([c for c in walk.calls if c[0] == tag])}")
    out += [f"  [{c[0]}] {c[1]}:{c[2]} -> {c[3]} {c[4]}" for c in walk.calls]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
