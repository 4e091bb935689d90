"""Hostile round five, output folders: a command writes only into a folder it made or was given
for that purpose (common/out_folder.py): new, empty or marked as its own by an earlier run, never
inside a git checkout that does not ignore it, and locked while it writes. Each refusal is one
`error:` line on stderr, exit 2, before any run exists, and leaves the user's files as they were.
"""

from __future__ import annotations

import shutil
import subprocess

import mlflow
import pytest

from analysis import app, out_files
from common import out_folder
from profiling import cli as profiling_cli
from tests.test_profiling_cli import CONFIG, gpu
from train.complexity import __main__ as complexity

USER_FILES = {"results/experiment1.json": '{"mine": 1}\n', "notes.txt": "keep me\n"}


def plant(folder, files=USER_FILES) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def untouched(folder, files=USER_FILES) -> bool:
    """Every planted file still there with its text, and nothing else added to the folder."""
    found = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    return found == set(files) and all((folder / r).read_text() == t for r, t in files.items())


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def no_runs() -> bool:
    return not mlflow.search_runs(search_all_experiments=True, output_format="list")


def test_analysis_refuses_a_folder_of_the_users_and_leaves_it_as_it_was(tracking, tmp_path, capsys):
    """main wrote the report, its tables and figures/ among the user's files (and a reused folder's
    summary.csv over the user's)."""
    out = tmp_path / "mine"
    plant(out)
    assert app.cli(["--out", str(out)]) == 2
    assert one_error(capsys) == (
        f"error: --out {out} holds files analysis did not make (notes.txt; no "
        f"{out_files.MANIFEST}): pass a new or empty folder, so that none of them is overwritten"
    )
    assert untouched(out) and no_runs()


def test_a_folder_an_earlier_analysis_made_is_taken_again(tracking, tmp_path, capsys):
    """The marker (the list of files the analysis wrote) makes a folder the analysis' own: the
    refusal above is not for a reused --out."""
    out = tmp_path / "report"
    out_folder.claim(out, "--out", out_files.MANIFEST, "analysis")
    (out / "summary.csv").write_text("an earlier analysis' table\n")
    assert out_files.check_out_dir(str(out)) == out.resolve()
    assert (out / out_files.MANIFEST).is_file()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_no_folder_inside_a_git_checkout_unless_git_ignores_it(tracking, tmp_path, capsys):
    """main wrote a report (and the GPU check a store) into a checkout's tree; the project's own
    default folders are in its .gitignore, and stay usable."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("analysis_report/\n")
    assert app.cli(["--out", str(repo / "docs" / "report")]) == 2
    assert one_error(capsys) == (
        f"error: --out {repo / 'docs' / 'report'} is inside the git checkout {repo.resolve()}, "
        "which does not ignore it: analysis would write into the tree; pass a folder outside it "
        "(or one git ignores)"
    )
    assert not (repo / "docs").exists() and no_runs()
    assert (
        out_files.check_out_dir(str(repo / "analysis_report"))
        == (repo / "analysis_report").resolve()
    )


def test_a_second_analysis_on_one_out_is_refused_while_the_first_writes(tracking, tmp_path, capsys):
    """main: two analyses into one --out overwrote each other's files."""
    out = out_folder.claim(tmp_path / "report", "--out", out_files.MANIFEST, "analysis")
    with out_folder.locked(out, "--out", "analysis"):  # as a running analysis holds it
        assert app.cli(["--out", str(out)]) == 2
    assert one_error(capsys) == (
        f"error: another analysis is writing into --out {out}: wait for it to end or pass another "
        "--out"
    )
    assert no_runs()


def test_complexity_refuses_a_folder_of_the_users(tracking, tmp_path, capsys):
    """main wrote complexity/*.csv among them, before a model was measured."""
    out = tmp_path / "mine"
    plant(out)
    argv = ["--models", "resnet18", "--batch-sizes", "2", "--image-size", "32", "--device", "cpu"]
    assert complexity.main([*argv, "--no-progress", "--out", str(out)]) == 2
    assert one_error(capsys).startswith(
        f"error: --out {out} holds files python -m train.complexity did not make (notes.txt; no "
        f"{complexity.OUT_MARKER})"
    )
    assert untouched(out) and no_runs()


def test_a_capture_refuses_a_folder_of_the_users(tracking, tmp_path, capsys):
    """main created its profile run and wrote (and first deleted a stale) ncu log there."""
    out = tmp_path / "mine"
    plant(out)
    argv = [*CONFIG, "--out", str(out), "--experiment", "prof"]
    assert profiling_cli.main(argv, probe=gpu()) == 2
    assert one_error(capsys).startswith(
        f"error: --out {out} holds files python -m profiling did not make (notes.txt; no "
        f"{profiling_cli.OUT_MARKER})"
    )
    assert untouched(out) and no_runs()
