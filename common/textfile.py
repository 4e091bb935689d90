"""Small files a user gives a command (a `--peaks-file`, a sweep `--matrix`), read with bounds.

A file is read only when it is a regular file (a FIFO would never end, /dev/zero never stop), at
most `max_chars` characters of it; YAML is read without aliases. A 466-byte YAML of nested aliases
(`b: [*a, *a, ...]`, each level ten times the one before) took 3.8 GB and 43 s in
`python -m roofline.vendor` and 4.07 GB and 156 s in `python -m analysis`, and one level more ran
out of memory: an alias makes a node stand for another node, so a file of a few lines can stand for
billions of values. Without aliases a document has at most as many nodes as it has characters.
Pure: reads only.
"""

from __future__ import annotations

from pathlib import Path

from common.errors import UsageError, one_line

MAX_CHARS = 2**20
"""The longest such file read (1 Mi characters): a peaks file lists a few devices, a sweep file a
few axes (the built-in vendor table is ~20 kB)."""


def read_text(path: Path, what: str, hint: str, max_chars: int = MAX_CHARS) -> str:
    """The text of the user's file `path` (UTF-8, a BOM dropped); UsageError naming `what` ("peaks
    file") when it does not exist (`hint` says how it was named), is no regular file, cannot be
    read, or holds more than `max_chars` characters."""
    if not path.exists():
        raise UsageError(f"{what} {path} does not exist ({hint})")
    if not path.is_file():
        raise UsageError(
            f"{what} {path} is not a file (a folder, device or pipe): give a JSON/YAML file"
        )
    try:
        with path.open(encoding="utf-8-sig") as fh:
            text = fh.read(max_chars + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what} {path} cannot be read: {one_line(exc)}") from None
    if len(text) > max_chars:
        raise UsageError(
            f"{what} {path} is larger than {max_chars / 2**20:g} Mi characters: a {what} lists "
            "a few entries"
        )
    return text


def load_yaml(text: str):
    """The YAML document `text` (JSON is YAML), read by PyYAML's safe loader without aliases:
    ValueError saying what is wrong and where (an alias: "aliases (*name) are not read: ...")."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"aliases (*{event.anchor}) are not read: write each value out",
                    event.start_mark,
                )
            return super().compose_node(parent, index)

    try:
        return yaml.load(text, Loader=NoAliases)  # noqa: S506 - a SafeLoader, without aliases
    except yaml.YAMLError as exc:
        raise ValueError(yaml_problem(exc)) from None
    except (RecursionError, ValueError) as exc:  # nesting deeper than Python's stack; 5,000 digits
        raise ValueError(one_line(exc) or type(exc).__name__) from None


def yaml_problem(exc) -> str:
    """What a YAML error says went wrong and where (its message ends with a source excerpt)."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if not problem or mark is None:
        return one_line(exc)
    where = f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and cmark is not None:
        where += f" ({context} at line {cmark.line + 1}, column {cmark.column + 1})"
    return where
