"""The GPU check touches only what it made (gpu_check/folders.py, gpu_check/children.py): a user's
folder given as --root is refused and left as it was, and in a root of its own the check deletes
and packs only its own files; a root inside a git checkout, an --out that is a file or cannot be
written, a second check on one folder and an --only naming no step are one line (exit 2) before
anything is written; a signal stops the check at once with its conventional exit code and stops
a step's matrix before its next configuration; and a killed check takes its step and the step's
children with it. docs/robustness.md lists these cases."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from gpu_check import check as gpu_check
from gpu_check import steps as gpu_check_steps
from gpu_check.folders import MARKER, lock
from tests.conftest import ROOT

USER_FILES = {
    "results/experiment1.json": '{"mine": true}\n',
    "secret/creds.txt": "password\n",
    "mlflow.db.bak": "an old store\n",
}
"""a user's files in the folder given as --root (issue 42's cases)"""


def plant(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def still_there(folder: Path, files: dict[str, str]) -> bool:
    return all((folder / rel).read_text() == text for rel, text in files.items())


def refused(*flags: str) -> tuple[int, list[str]]:
    """`python -m gpu_check FLAGS`: its exit code and its stderr's lines."""
    done = subprocess.run(
        [sys.executable, "-m", "gpu_check", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stderr.splitlines()


def test_a_users_folder_as_root_is_refused_and_left_as_it_was(tmp_path):
    user = tmp_path / "experiments"
    plant(user, USER_FILES)
    rc, err = refused(
        "--device", "cpu", "--only", "versions", "--root", str(user), "--out", str(tmp_path / "o")
    )
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"error: --root {user} holds files the GPU check did not make (")
    assert err[0].endswith(f"no {MARKER}): give a new or empty folder")
    assert still_there(user, USER_FILES) and not (user / MARKER).exists()
    assert not (tmp_path / "o").exists()  # nothing written: no bundle of the user's files


def test_in_a_root_of_its_own_the_check_deletes_and_packs_only_its_own_files(tmp_path):
    """A root an earlier check made (its marker) where the user later dropped files: the earlier
    step results go, the user's files stay, and the bundle holds the check's files alone."""
    root = tmp_path / "root"
    plant(root, {MARKER: "", "results/versions.json": "{}", "logs/versions.txt": "ran\n"})
    plant(root, {"mlflow.db": "store", "mlruns/0/meta.yaml": "x", **USER_FILES})
    plant(root, {"logs/notes.txt": "the user's\n", "cache/c.bin": "c"})
    check = gpu_check.Check(gpu_check.parse(["--out", str(tmp_path / "out"), "--root", str(root)]))
    try:
        check.write()
    finally:
        check.close()
    assert not (root / "results" / "versions.json").exists()  # the earlier check's result
    assert still_there(root, {**USER_FILES, "logs/notes.txt": "the user's\n"})
    with tarfile.open(tmp_path / "out" / "bundle.tar.gz") as tar:
        names = set(tar.getnames())
    assert names == {MARKER, "logs/versions.txt", "mlflow.db", "mlruns/0/meta.yaml", "cache/c.bin"}


def test_a_root_inside_a_git_checkout_is_refused(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    root = tmp_path / "repo" / "gpu"
    rc, err = refused("--only", "versions", "--root", str(root), "--out", str(tmp_path / "o"))
    assert rc == 2 and err == [
        f"error: --root {root} is inside the git checkout {tmp_path / 'repo'}: the check writes a "
        "store, logs and artifacts under its root and packs them into bundle.tar.gz; give a folder "
        "outside it"
    ]
    assert not root.exists() and not (tmp_path / "o").exists()


def test_an_out_that_is_a_file_or_cannot_be_written_is_one_line(tmp_path):
    afile = tmp_path / "results.txt"
    afile.write_text("mine\n")
    rc, err = refused("--only", "versions", "--out", str(afile), "--root", str(tmp_path / "r"))
    assert rc == 2 and err == [
        f"error: --out {afile} is a file, not a folder: give a folder for the result files"
    ]
    assert afile.read_text() == "mine\n" and not (tmp_path / "r").exists()
    # a folder this user cannot write: a read-only one, or (as root, who writes those) /sys
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    target = Path("/sys") if os.geteuid() == 0 else locked
    rc, err = refused("--only", "versions", "--out", str(target), "--root", str(tmp_path / "r"))
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"error: --out {target} cannot be written (")
    assert err[0].endswith("): give a folder you can write") and not (tmp_path / "r").exists()


@pytest.mark.parametrize("which", ["--out", "--root"])
def test_a_second_check_on_one_folder_is_refused(tmp_path, which):
    out, root = tmp_path / "out", tmp_path / "root"
    out.mkdir()
    root.mkdir()
    held = lock(out if which == "--out" else root, which)  # as a running check holds it
    try:
        rc, err = refused("--only", "versions", "--out", str(out), "--root", str(root))
    finally:
        os.close(held)
    folder = out if which == "--out" else root
    assert rc == 2 and err == [
        f"error: another GPU check is writing into {which} {folder}: wait for it to end or give "
        f"another {which}"
    ]
    assert list(out.iterdir()) == [] and not (root / "logs").exists()


@pytest.mark.parametrize("only", ["nosuch", ","])
def test_an_only_naming_no_step_is_refused_before_any_folder_is_made(tmp_path, only):
    rc, err = refused("--only", only, "--out", str(tmp_path / "o"), "--root", str(tmp_path / "r"))
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0]
    want = "unknown step(s) nosuch" if only == "nosuch" else "names no step"
    assert err[0].startswith("error: --only") and want in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_check_with_its_conventional_exit_code(
    tmp_path, monkeypatch, capsys, sig, code
):
    def run(self, names):
        os.kill(os.getpid(), sig)
        time.sleep(30)
        raise AssertionError("the signal did not stop the check")

    monkeypatch.setattr(gpu_check.Check, "run", run)
    before = signal.getsignal(sig)
    argv = ["--out", str(tmp_path / "o"), "--root", str(tmp_path / "r"), "--device", "cpu"]
    assert gpu_check.main(argv) == code
    name = signal.Signals(sig).name
    assert capsys.readouterr().err.splitlines() == [f"gpu check: stopped by {name} after 0 step(s)"]
    assert signal.getsignal(sig) is before  # the caller's handler is back
    last = json.loads((tmp_path / "o" / "steps.json").read_text())["steps"][-1]
    assert (last["name"], last["reason"]) == ("interrupted", f"stopped by {name}")


def test_a_signal_during_a_train_config_stops_the_matrix_before_the_next(tmp_path, monkeypatch):
    """The check stops a step with SIGINT; `python -m train` then ends its run KILLED and returns
    130: the train step must not go on to its next configuration (whose run would be created)."""
    import train.__main__ as train_cli

    calls: list[list[str]] = []

    def stopped_train(argv):
        calls.append(argv)
        return 130  # what train's cli_entry returns after SIGINT

    monkeypatch.setattr(train_cli, "main", stopped_train)
    monkeypatch.setattr(gpu_check_steps, "latest_run", lambda kind: None)
    (tmp_path / "results").mkdir()
    args = gpu_check.parse(
        ["--child", "train", "--root", str(tmp_path), "--device", "cpu", "--tiny"]
    )
    assert gpu_check_steps._run_step(args) == 130
    assert len(calls) == 1
    result = json.loads((tmp_path / "results" / "train.json").read_text())
    assert result["status"] == "failed" and result["reason"].startswith("stopped (SIGINT during")


PARENT = r'''
import sys, time
from gpu_check.children import spawn

STEP = """
import subprocess, sys, time
import gpu_check.steps as s

def sleepy(args, root, result):
    kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print("grandchild", kid.pid, flush=True)
    time.sleep(300)

s.STEP_FUNCTIONS["sleepy"] = sleepy
sys.exit(s.main(["--child", "sleepy", "--root", sys.argv[1]]))
"""
step = spawn([sys.executable, "-c", STEP, sys.argv[1]])
print("child", step.pid, flush=True)
time.sleep(300)
'''
"""a check (the parent) running one step (through gpu_check.steps) that started a child of its own"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_killed_check_takes_its_step_and_the_steps_children_with_it(tmp_path):
    (tmp_path / "results").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    pids: dict[str, int] = {}
    try:
        while len(pids) < 2:
            who, pid = lines.get(timeout=60).split()
            pids[who] = int(pid)
    finally:
        proc.kill()  # kill -9 of the check
        proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not all(_gone(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [who for who, p in pids.items() if not _gone(p)]
    for p in pids.values():
        if not _gone(p):
            os.kill(p, signal.SIGKILL)  # what the check left: not left to the next test
    assert alive == []
