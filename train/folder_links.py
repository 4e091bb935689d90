"""Directory links in an ImageFolder tree that torchvision would follow forever.

torchvision's ImageFolder lists a class folder with `os.walk(..., followlinks=True)`: a link back up
the tree (`cat/up -> ..`) makes it descend without end, listing the same images again at every
level (one such link turned 6 images into 2,706, and train hung while its memory grew). Before any
image is listed, `check_links` walks the tree the same way, keeping the folders on the current path
(by device and inode, so two names of one folder are one folder), and refuses in one line a link
that leads back to a folder it is inside, or to a folder already reached another way (its images
would be counted twice, and a lattice of such links grows as fast as a loop). Pure: reads the
folder tree only.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.errors import UsageError

MAX_FOLDERS = 1_000_000
"""More folders than this under one ImageFolder root is not a data set (ImageNet has 1,000)."""


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def check_links(root: Path) -> None:
    """UsageError naming the first directory link under `root` that loops back into the tree, or
    reaches a folder reached before; nothing otherwise."""
    seen: dict[tuple[int, int], str] = {_key(os.stat(root)): str(root)}
    stack: list[tuple[str, frozenset]] = [(str(root), frozenset(seen))]
    while stack:
        folder, above = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # unreadable: ImageFolder's own listing says what is wrong with it
        for entry in sorted(entries, key=lambda e: e.name):
            try:  # a dangling link, or one to itself (ELOOP), is no folder: ImageFolder skips it
                if not entry.is_dir(follow_symlinks=True):
                    continue
                key = _key(entry.stat(follow_symlinks=True))
            except OSError:
                continue
            target = os.path.realpath(entry.path)
            if key in above:
                raise UsageError(
                    f"{entry.path} links back to {target}, a folder it is inside: ImageFolder would "
                    "follow it forever; remove the link, or point --data at a folder without link loops"
                )
            if key in seen:
                raise UsageError(
                    f"{entry.path} leads to {target}, already reached as {seen[key]}: its images "
                    "would be counted twice; remove one of the two, or point --data at a folder "
                    "without such links"
                )
            seen[key] = entry.path
            if len(seen) > MAX_FOLDERS:
                raise UsageError(
                    f"{root} holds more than {MAX_FOLDERS:,} folders: not an ImageFolder data set "
                    "(expected <root>/<class>/<image>.jpg)"
                )
            stack.append((entry.path, above | {key}))
