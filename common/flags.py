"""Command-line flags derived from a config dataclass: the dataclass is the one description.

Each field becomes one flag: its name `--field-name`, its default the field's default, its type
from the annotation (bool fields take `--flag`, `--flag true|false`), and its help the docstring
written under the field. `metadata` on a field refines that where needed:

* `flags`: the option strings (`("--batch", "--batch-size")`); `()`: no flag for the field;
* `choices`, `metavar`: as argparse takes them.

`overrides=True` (a command whose flags override another source, such as a sweep file's base):
every default is None and an empty value ("" from an MLproject default) counts as not given.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from dataclasses import MISSING, Field, fields
from functools import lru_cache

from common.cli import optional, str_bool


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of dataclass `cls`, by field name (Python keeps no
    such docstring at run time: they are read from the class's source)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def flag_names(f: Field) -> tuple[str, ...]:
    """The option strings of field `f` (empty: the field has no flag)."""
    return tuple(f.metadata.get("flags", (f"--{f.name.replace('_', '-')}",)))


def flag_fields(cls: type, names=None) -> list[Field]:
    """The fields of `cls` that have a flag, in declaration order; only those in `names` if given."""
    return [f for f in fields(cls) if flag_names(f) and (names is None or f.name in names)]


def add_field_flag(group, cls: type, f: Field, overrides: bool = False) -> None:
    """Add the flag of field `f` of dataclass `cls` to `group` (a parser or an argument group)."""
    convert = _converter(typing.get_type_hints(cls)[f.name])
    kw: dict = {"dest": f.name, "help": _help(field_docs(cls).get(f.name, ""), f, overrides)}
    if convert is str_bool:
        kw.update(nargs="?", const=True)
    choices = f.metadata.get("choices")
    default = None if f.default is MISSING else f.default
    if overrides:
        default, convert = None, optional(convert)
        choices = [*choices, None] if choices is not None else None
    if "metavar" in f.metadata:
        kw["metavar"] = f.metadata["metavar"]
    group.add_argument(*flag_names(f), type=convert, default=default, choices=choices, **kw)


def flag_values(cls: type, values, names=None) -> list[str]:
    """The flags of `cls` with their values, as its command takes them, from any object with the
    fields as attributes (parsed args, a config); None values are left out."""
    out: list[str] = []
    for f in flag_fields(cls, names):
        value = getattr(values, f.name, None)
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out += [flag_names(f)[0], str(value)]
    return out


def _converter(annotation):
    """The argparse `type` of a field annotated `annotation`: bool, int and float convert; a
    string or a union (`int | str`: the dataclass converts it) stays text."""
    if annotation is bool:
        return str_bool
    return annotation if annotation in (int, float) else None


def _help(doc: str, f: Field, overrides: bool) -> str:
    text = " ".join(doc.split()).replace("%", "%%").removesuffix(".")
    if not overrides and f.default is not MISSING:
        text += " (default: %(default)s)"
    return text
