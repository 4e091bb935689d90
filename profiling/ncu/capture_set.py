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

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common import console, schema
from common.errors import BenchError, UsageError
from profiling.ncu.budget import ReadBudget
from profiling.ncu.checks import check_values
from profiling.ncu.names import is_relevant
from profiling.ncu.parse import NcuKernel, NcuParseError, NcuReport, read_ncu_csv, refuse_truncated
from profiling.ncu.report_import import is_ncu_rep, load_ncu_rep

PHASE_LABELS = ("forward", "backward", "optimizer", "step")
"""What --phase says a file holds; `step` (the whole step) leaves NVTX phases, if any, as they are."""
MAX_SET_FILES = 256
"""The most files one import reads, all PATHs together (NERSC's captures are 12 to 20 files of one
metric each)."""


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
        if self.workload:
            schema.check_name(self.workload, "workload")  # logged as the run's model
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


def check_import_paths(
    paths: list[str], max_bytes: int, phases: list[str | None] | None = None
) -> None:
    """UsageError, before any run exists, for a PATH that is neither a file nor a folder, an empty
    folder, more than MAX_SET_FILES files in all, a file given twice, or a file larger than
    `max_bytes`."""
    for f, _, _ in set_files(paths, phases or [None] * len(paths)):
        size = f.stat().st_size
        if size > max_bytes:
            raise UsageError(
                f"--import {f} is {size / 1024**3:.3g} GiB, more than the "
                f"{max_bytes / 1024**3:.3g} GiB an ncu CSV or .ncu-rep of a profiled training step "
                "holds: export only the profiled step (ncu --launch-skip/--launch-count, --metrics) "
                "or check that it is the right file"
            )


def set_files(paths: list[str], phases: list[str | None]) -> list[tuple[Path, str, str | None]]:
    """(file, the PATH it came from, its phase) of every file of the set, in order. UsageError for
    an empty folder, more than MAX_SET_FILES files over all PATHs (300 files as 300 PATHs were all
    read), or one file reached twice (a folder given as two phases doubled its FLOPs)."""
    out: list[tuple[Path, str, str | None]] = []
    seen: dict[tuple[int, int], tuple[str, str | None]] = {}
    for name, phase in zip(paths, phases):
        files = _files(Path(name))
        if not files:
            raise UsageError(f"--import {name}: an empty folder (no file in it to read)")
        if len(out) + len(files) > MAX_SET_FILES:
            raise UsageError(
                f"--import: the {len(paths)} PATH(s) hold more than the {MAX_SET_FILES} files of one "
                "capture set: pass the files (or folder) of one profile"
            )
        for f in files:
            st = f.stat()
            key = (st.st_dev, st.st_ino)
            if key in seen:
                first = seen[key]
                raise UsageError(
                    f"--import: {f} is given twice (in {first[0]}{_as(first[1])} and in "
                    f"{name}{_as(phase)}): its counters would count twice; give each file once"
                )
            seen[key] = (name, phase)
            out.append((f, name, phase))
    return out


def _as(phase: str | None) -> str:
    return f" as {phase}" if phase else ""


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
    budget: ReadBudget | None = None,
) -> list[SetFile]:
    """Every file of `paths` read, with its phase, against one ReadBudget (profiling.ncu.budget:
    the text, lines and results of the whole import), each file's values checked naming it
    (profiling.ncu.checks). A folder's files that are not ncu output (a README, the authors'
    table) are skipped, one note each; a named file must be ncu output."""
    budget = budget or ReadBudget()
    out: list[SetFile] = []
    for f, name, phase in set_files(paths, phases):
        folder = Path(name).is_dir()
        try:
            report = (
                load_ncu_rep(f, keep) if is_ncu_rep(f) else read_ncu_csv(f, keep, budget=budget)
            )
        except NcuParseError:
            if not folder:
                raise
            console.note(f"skipped {f.name} in {name}: not Nsight Compute output")
            continue
        check_values(report, in_set=len(paths) > 1 or folder)
        out.append(SetFile(f, phase, report))
    for name in paths:
        if Path(name).is_dir() and not any(s.path.parent == Path(name) for s in out):
            raise BenchError(f"--import {name}: no file in the folder is Nsight Compute output")
    for f in out:
        _refuse_truncated(f, [g for g in out if g.phase == f.phase], allow_truncated)
    return out


def _refuse_truncated(f: SetFile, phase_files: list[SetFile], allowed: bool) -> None:
    """A cut file alone in its phase: refused unless allowed (refuse_truncated). A cut file beside
    others of its phase is refused either way: the others hold launches it lacks, so the files
    cannot be merged, and --allow-truncated would fail on that (main suggested it there)."""
    if not f.report.truncated:
        return
    if len(phase_files) == 1:
        refuse_truncated(f.report, allowed)
        return
    raise BenchError(
        f"{f.path.name} is truncated: {f.report.truncated}; it is one of the "
        f"{len(phase_files)} files of {f.phase or 'the set'}, whose launches must be the same in "
        "every file, so it cannot be merged (nor logged with --allow-truncated): copy or export "
        "it again, or import it alone"
    )


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
    BenchError when the files do not hold the same launches (_same_launches), when a file names
    a launch's kernel otherwise, or when a file adds no counter and differs (_refuse_copy)."""
    _same_launches(files)
    first = files[0]
    merged = dict(zip(_launch_keys(first.report), first.report.kernels))
    holders = dict.fromkeys(_counters(first.report), first.path.name)
    differing: dict[str, int] = {}
    for other in files[1:]:
        differs: dict[str, int] = {}
        for key, k in zip(_launch_keys(other.report), other.report.kernels):
            base = merged[key]
            if base.name != k.name:
                raise BenchError(
                    f"{other.path.name}: launch {k.id} is {_short(k.name)!r} where {first.path.name} "
                    f"has {_short(base.name)!r}: the files are not captures of the same launches "
                    "(the program ran other kernels); import them separately or capture again"
                )
            _add_metrics(base, k, differs)
        names = _counters(other.report)
        _refuse_copy(other, names, holders, differs)
        for name in names:
            holders.setdefault(name, other.path.name)
        for name, n in differs.items():
            differing[name] = differing.get(name, 0) + n
    return list(merged.values()), differing


def _counters(report: NcuReport) -> list[str]:
    """The counters (metrics but device attributes) a file holds, in the order first seen."""
    names = (n for k in report.kernels for n in k.metrics if not n.startswith("device__"))
    return list(dict.fromkeys(names))


def _refuse_copy(other: SetFile, names: list[str], holders: dict, differs: dict) -> None:
    """A file that adds no counter to the files before it is a second capture of theirs: refused
    when its values differ (main kept the first file's by name, silently), a note when the same."""
    if not names or any(n not in holders for n in names):
        return
    held = sorted({holders[n] for n in names})
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    if differs:
        raise BenchError(
            f"{other.path.name} holds only counters that {', '.join(held)} holds already "
            f"({shown}), with other values on {max(differs.values())} launches: two captures of "
            "the same counters, and either could be the right one; import only one of them"
        )
    console.note(f"{other.path.name} repeats {shown} of {', '.join(held)} with the same values")


def _same_launches(files: list[SetFile]) -> None:
    """BenchError when the files of a phase do not hold the same launches, naming the file that
    differs from the others (main named the first file by name, the good one, when a later file
    held launches more) and a launch it has or lacks; between two files, which one is right cannot
    be told, so both are named."""
    sets = [frozenset(_launch_keys(f.report)) for f in files]
    common, n_common = Counter(sets).most_common(1)[0]
    if n_common == len(files):
        return
    if n_common > 1:  # a majority: the odd file out is to blame
        i = next(i for i, s in enumerate(sets) if s != common)
        odd = files[i]
        what = f"where the other {n_common} files of {odd.phase or 'the set'} hold {len(common):,}"
    else:
        i = 1
        odd = files[1]
        common = sets[0]
        what = f"where {files[0].path.name} holds {len(common):,}"
    extra, lacking = sets[i] - common, common - sets[i]
    proc, lid = min(extra or lacking)
    where = f" (process {proc + 1} of the file)" if proc else ""
    raise BenchError(
        f"{odd.path.name} holds {len(sets[i]):,} launches {what}: launch {lid}{where} is "
        + ("only in it" if extra else "missing from it")
        + f" ({len(extra | lacking):,} launches differ); the files of a phase must hold the same "
        "launches (a cut capture, another --launch-count, a file of another capture?): leave it "
        "out, import the files separately, or capture again"
    )


def _add_metrics(base: NcuKernel, k: NcuKernel, differing: dict[str, int]) -> None:
    """Launch `k`'s counters added to `base`'s; a counter `base` has already is kept, and counted
    in `differing` when `k`'s value differs."""
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
