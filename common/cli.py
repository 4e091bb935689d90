"""Command-line plumbing shared by every entry point."""

from __future__ import annotations

import argparse
import re

from common.errors import UsageError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage and exiting,
    so a bad flag under `mlflow run` still ends that run FAILED with the reason (see cli_entry)."""

    def error(self, message: str):  # noqa: D102 - argparse API
        raise UsageError(f"{message} (see {self.prog} --help)")


def split_words(values) -> list[str]:
    """`--models a b`, `--models a,b` and MLproject's single quoted "a b" all mean [a, b]."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [t for v in values for t in re.split(r"[\s,]+", str(v)) if t]


def str_bool(text: str | bool) -> bool:
    """Parse MLproject-style booleans ("true"/"false"/"1"/"0"/"yes"/"no")."""
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
