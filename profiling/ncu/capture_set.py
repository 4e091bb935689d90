"""A capture set: several ncu outputs of one program read as one profile.

Studies such as NERSC's DeepCAM rooflines run one ncu process per metric (``--metrics <ONE>``), so
a profile is a folder of files, one metric each, whose launches are the same launches of the same
program in different processes; phases are often captured apart (forward, backward, optimizer).
`read_capture_set` reads files, gzipped files and folders (in any layout profiling.ncu.parse
reads, or .ncu-rep), merges the files of one phase launch by launch (key: the launch ID within
its file's process, in the order processes appear in the file), checks that every file of a phase
holds the same launches under the same kernel names (a mismatch is refused naming the file and
the launch), and puts the phases side by side, each kernel labelled with its phase
(NcuKernel.phase_label), so that phases captured apart add up to a step.

Pure apart from reading the files; no mlflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common import console
from common.errors import BenchError, UsageError
from profiling.ncu.names import is_relevant
from profiling.ncu.parse import NcuKernel, NcuParseError, NcuReport, read_ncu_csv, refuse_truncated
from profiling.ncu.report_import import is_ncu_rep, load_ncu_rep

PHASE_LABELS = ("forward", "backward", "optimizer", "step")
"""What --phase says a file holds; `step` (the whole step) leaves NVTX phases, if any, as they are."""
MAX_SET_FILES = 256
"""The most files one import reads (NERSC's captures are 12 to 20 files of one metric each)."""


@dataclass
class ImportOptions:
    """What an imported capture set (--import PATH ...) is: the workload it profiled and the
    training phase each PATH holds."""

    workload: str | None = None
    """name of a profiled program that is not a torchvision model (e.g. deepcam), logged as the
    run's model; its capture is not checked against counted training FLOPs (only torchvision
    models can be counted), and the import says so."""
    phase: tuple[str, ...] = field(default=(), metadata={"metavar": "PHASE"})
    """the training phase the imported files hold: forward, backward, optimizer or step (the
    whole step), one for every PATH or one per PATH in order; the files of one phase are merged
    launch by launch, phases add up to a step."""

    def __post_init__(self) -> None:
        self.workload = (self.workload or "").strip() or None
        self.phase = tuple(p.strip().lower() for p in self.phase if p and p.strip())
        bad = [p for p in self.phase if p not in PHASE_LABELS]
        if bad:
            raise ValueError(
                f"phase must be among {', '.join(PHASE_LABELS)}, got {', '.join(map(repr, bad))}"
            )


def phases_of(paths: list[str], phases: tuple[str, ...]) -> list[str | None]:
    """The phase of each PATH: none given -> None each, one -> that one for all, else one each
    (UsageError when the numbers differ)."""
    if not phases:
        return [None] * len(paths)
    if len(phases) == 1:
        return [phases[0]] * len(paths)
    if len(phases) != len(paths):
        raise UsageError(
            f"--phase gives {len(phases)} phases for {len(paths)} --import paths: give one phase "
            "for all of them or one per path, in the same order"
        )
    return list(phases)


def check_import_paths(paths: list[str], max_bytes: int) -> None:
    """UsageError, before any run exists, for a PATH that is neither a file nor a folder, an empty
    folder, too many files, or a file larger than `max_bytes`."""
    for name in paths:
        files = _files(Path(name))
        if not files:
            raise UsageError(f"--import {name}: an empty folder (no file in it to read)")
        if len(files) > MAX_SET_FILES:
            raise UsageError(
                f"--import {name} holds {len(files)} files, more than the {MAX_SET_FILES} of one "
                "capture set: pass the folder of one profile"
            )
        for f in files:
            size = f.stat().st_size
            if size > max_bytes:
                raise UsageError(
                    f"--import {f} is {size / 1024**3:.3g} GiB, more than the "
                    f"{max_bytes / 1024**3:.3g} GiB an ncu CSV or .ncu-rep of a profiled training step "
                    "holds: export only the profiled step (ncu --launch-skip/--launch-count, "
                    "--metrics) or check that it is the right file"
                )


def _files(path: Path) -> list[Path]:
    """The file itself, or a folder's visible files sorted by name (UsageError: no such path)."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    if path.is_file():
        return [path]
    raise UsageError(f"--import {path}: no such file or folder")


@dataclass
class SetFile:
    """One file of a capture set, read."""

    path: Path
    phase: str | None
    report: NcuReport


def read_files(
    paths: list[str],
    phases: list[str | None],
    allow_truncated: bool = False,
    keep: Callable[[str], bool] = is_relevant,
) -> list[SetFile]:
    """Every file of `paths` read, with its phase. A folder's files that are not ncu output (a
    README, the authors' table) are skipped, one note each; a named file must be ncu output."""
    out: list[SetFile] = []
    for name, phase in zip(paths, phases):
        folder = Path(name).is_dir()
        for f in _files(Path(name)):
            try:
                report = load_ncu_rep(f, keep) if is_ncu_rep(f) else read_ncu_csv(f, keep=keep)
            except NcuParseError:
                if not folder:
                    raise
                console.note(f"skipped {f.name} in {name}: not Nsight Compute output")
                continue
            refuse_truncated(report, allow_truncated)
            out.append(SetFile(f, phase, report))
        if folder and not any(s.path.parent == Path(name) for s in out):
            raise BenchError(f"--import {name}: no file in the folder is Nsight Compute output")
    return out


def _launch_keys(report: NcuReport) -> list[tuple[int, int]]:
    """(process ordinal, launch ID) of each kernel: IDs count launches per process; processes are
    numbered in the order they first appear in the file, not by their Process ID (each ncu run of
    a one-metric-per-process capture has its own)."""
    order: dict[str, int] = {}
    return [
        (order.setdefault(k.attrs.get("Process ID", ""), len(order)), k.id) for k in report.kernels
    ]


def _short(name: str) -> str:
    return name if len(name) <= 90 else name[:87] + "..."


def merge_phase(files: list[SetFile]) -> tuple[list[NcuKernel], dict[str, int]]:
    """The kernels of the files of one phase merged launch by launch (the first file's order),
    and per metric how many launches had a second, different value of it (the first kept).
    BenchError when a file lacks a launch another has, or names a launch's kernel otherwise."""
    first = files[0]
    merged = dict(zip(_launch_keys(first.report), first.report.kernels))
    differing: dict[str, int] = {}
    for other in files[1:]:
        keys = _launch_keys(other.report)
        _same_launches(first, other, set(merged), keys)
        for key, k in zip(keys, other.report.kernels):
            base = merged[key]
            if base.name != k.name:
                raise BenchError(
                    f"{other.path.name}: launch {k.id} is {_short(k.name)!r} where {first.path.name} "
                    f"has {_short(base.name)!r}: the files are not captures of the same launches "
                    "(the program ran other kernels); import them separately or capture again"
                )
            _add_metrics(base, k, differing)
    return list(merged.values()), differing


def _same_launches(first: SetFile, other: SetFile, have: set, keys: list) -> None:
    """BenchError naming the first launch one file has and the other lacks."""
    theirs = set(keys)
    for a, b, launches in ((other, first, have - theirs), (first, other, theirs - have)):
        if launches:
            proc, lid = min(launches)
            raise BenchError(
                f"{a.path.name} has no launch {lid}"
                + (f" (process {proc + 1} of the file)" if proc else "")
                + f" where {b.path.name} has one ({len(launches)} launches differ): the files of a "
                "phase must hold the same launches (a cut capture, or another --launch-count?); "
                "import them separately or capture again"
            )


def _add_metrics(base: NcuKernel, k: NcuKernel, differing: dict[str, int]) -> None:
    for name, value in k.metrics.items():
        if name in base.metrics:
            if base.metrics[name] != value and value == value:
                differing[name] = differing.get(name, 0) + 1
            continue
        base.metrics[name] = value
        if name in k.units:
            base.units[name] = k.units[name]
    for name, text in k.texts.items():
        base.texts.setdefault(name, text)
    if not (base.nvtx_push_pop or base.nvtx_start_end):
        base.nvtx_push_pop, base.nvtx_start_end = k.nvtx_push_pop, k.nvtx_start_end


def combine(files: list[SetFile], source: str) -> NcuReport:
    """One report of the set: each phase's files merged (merge_phase), phases in the order first
    given, every kernel labelled with its phase (none for `step` or no --phase)."""
    by_phase: dict[str | None, list[SetFile]] = {}
    for f in files:
        by_phase.setdefault(f.phase, []).append(f)
    kernels: list[NcuKernel] = []
    for phase, group in by_phase.items():
        merged, differing = merge_phase(group) if len(group) > 1 else (group[0].report.kernels, {})
        for name, n in differing.items():
            console.note(
                f"{n} launches of {phase or 'the set'} have another {name} in a later file: "
                f"kept the value of {group[0].path.name}"
            )
        for k in merged:
            k.phase_label = phase if phase and phase != "step" else k.phase_label
        kernels += merged
    reports = [f.report for f in files]
    na: dict[str, int] = {}
    for r in reports:
        for name, n in r.na.items():
            na[name] = na.get(name, 0) + n
    return NcuReport(
        kernels=kernels,
        page=reports[0].page,
        messages=[m for r in reports for m in r.messages],
        program_lines=sum(r.program_lines for r in reports),
        na=na,
        has_nvtx=any(r.has_nvtx for r in reports),
        source=source,
        truncated=next(
            (
                f"{f.path.name}: {f.report.truncated}" if len(files) > 1 else f.report.truncated
                for f in files
                if f.report.truncated
            ),
            "",
        ),
    )


def set_name(paths: list[str], files: list[SetFile]) -> str:
    """How the set is named in messages and params: the one file's name, else `<folder>/ (N
    files)` or the file names (the first three, and how many more)."""
    if len(files) == 1:
        return files[0].path.name
    if len(paths) == 1:
        return f"{Path(paths[0]).name}/ ({len(files)} files)"
    names = [f.path.name for f in files]
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"{', '.join(names[:3])}{more} ({len(files)} files)"
