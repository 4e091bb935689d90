"""An ImageFolder tree with directory links (issue 25, train/folder_links.py).

torchvision's ImageFolder walks with followlinks=True. On main, `python -m train` followed such a
link: the issue saw 6 images become 2,706 and a larger tree hang while memory grew; here the
6-image tree with `cat/up -> ..` trained and exited 0 on images counted many times over.
"""

from __future__ import annotations

import os
import subprocess
import sys

import mlflow
import pytest

from common.errors import UsageError
from tests.conftest import ROOT
from tests.helpers import TINY, make_image_folder
from train.data import check_data


def test_a_link_back_up_the_tree_is_one_line_naming_it(tmp_path):
    root = make_image_folder(tmp_path / "data")
    os.symlink("..", root / "train" / "cat" / "up")
    with pytest.raises(UsageError) as err:
        check_data(str(root))
    assert str(err.value) == (
        f"{root / 'train' / 'cat' / 'up'} links back to {root / 'train'}, a folder it is inside: "
        "ImageFolder would follow it forever; remove the link, or point --data at a folder without "
        "link loops"
    )


def test_a_folder_reached_twice_through_links_is_refused(tmp_path):
    root = make_image_folder(tmp_path / "data")
    os.symlink(root / "train" / "cat", root / "train" / "dog" / "cats")
    with pytest.raises(UsageError, match=r"dog/cats leads to .*/train/cat, already reached as"):
        check_data(str(root))


def test_a_dangling_link_is_no_folder(tmp_path):
    root = make_image_folder(tmp_path / "data")
    os.symlink(tmp_path / "gone", root / "train" / "cat" / "more")
    os.symlink("self", root / "train" / "cat" / "self")  # ELOOP
    assert check_data(str(root)) == 2


def test_links_to_other_folders_are_fine(tmp_path):
    """A class folder that is a link to images kept elsewhere (a common layout) is no loop."""
    root = make_image_folder(tmp_path / "data", classes=("cat",))
    elsewhere = make_image_folder(tmp_path / "pool", classes=("dog",), train_subdir=False)
    os.symlink(elsewhere / "dog", root / "train" / "dog")
    assert check_data(str(root)) == 2


def test_train_on_a_link_loop_exits_2_at_once(tracking, tmp_path):
    root = make_image_folder(tmp_path / "data")
    os.symlink("..", root / "train" / "cat" / "up")
    proc = subprocess.run(
        [sys.executable, "-m", "train", *TINY, "--data", str(root)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"error: {root / 'train' / 'cat' / 'up'} links back to")
    )
    assert mlflow.search_runs(search_all_experiments=True, output_format="list") == []


def test_a_fifo_named_like_an_image_is_not_listed(tmp_path):
    """Issue 32: a FIFO named `*.png` in an ImageFolder hung train forever (the loader opened it
    and waited for a writer). Only regular files are images."""
    from train.data import image_folder

    root = make_image_folder(tmp_path / "imgs", per_class=2)
    os.mkfifo(root / "train" / "cat" / "pipe.png")
    ds, n_classes = image_folder(str(root), 16)
    assert n_classes == 2 and len(ds) == 4
    assert not [p for p, _ in ds.samples if p.endswith("pipe.png")]
    assert ds[0][0].shape == (3, 16, 16)
