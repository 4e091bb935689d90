"""Command-line flags derived from config dataclasses: a field is one flag, described once.

Each field becomes `--field-name`; its default is the field's default, its help the docstring
written under the field (or metadata `doc`: the shared fields below), its type the annotation's:

* bool: `--flag` or `--flag true|false`; metadata `switch`: `--flag` alone (store_true);
* int, float: converted; `X | None`: "" (an MLproject parameter left unset) or "none" is None;
* list[X], tuple[X, ...]: one or more values, repeatable, each split at commas and white space
  (metadata `sep=","`: at commas only); the items are converted when the config is built;
* anything else (`int | str`, a union the dataclass converts) stays text.

Metadata refines a field: `flags` (the option strings; `()`: no flag), `parse` (the argparse
type, replacing the annotation's), `choices` (the flag's choices and what `check_choices` holds the
config to: declared once; `choices_pattern` = (regex, its words) admits values beyond them, the
flag then takes any text; `choices_text` words them in the error), `metavar`, `nargs`/`const`,
`negation` (a second flag that stores false, `--no-track`), `hidden` (accepted, left out of
--help).

`build(cls, args)` makes the config from parsed flags; the dataclass validates (ValueError naming
the field), once, and the command says it in one line. `overrides=True` (a command whose flags
override another source, such as a sweep file's base): every default is None and an empty value
counts as not given.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import textwrap
import types
import typing
from dataclasses import MISSING, Field, field, fields
from functools import lru_cache

from common import schema
from common.cli import optional, split_words, str_bool
from common.errors import UsageError

SWITCH = {"switch": True}
"""metadata of a bool field whose flag takes no value (`--dry-run`)."""


# ------------------------------------------------------------------ fields shared by commands
def experiment() -> Field:
    return field(
        default=None,
        metadata={"doc": "MLflow experiment name (default: $MLFLOW_EXPERIMENT_NAME, else Default)"},
    )


def no_progress() -> Field:
    return field(default=False, metadata={**SWITCH, "doc": "no progress bar or progress lines"})


def track() -> Field:
    doc = "log an MLflow run of the command (false: print and write files only)"
    return field(default=True, metadata={"negation": "--no-track", "doc": doc})


def env_label() -> Field:
    doc = "your name for this environment (default: host name); analysis groups by it"
    return field(default_factory=schema.default_env_label, metadata={"doc": doc})


def peaks_file() -> Field:
    doc = (
        "JSON/YAML file of vendor-peak entries that add to or override the vendor table (format: "
        "docs/peaks.md; default: the file named by $ROOFLINE_PEAKS_FILE)"
    )
    return field(default="", metadata={"doc": doc})


# ------------------------------------------------------------------ reading the dataclass
@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of dataclass `cls`, by field name (Python keeps no
    such docstring at run time: they are read from the class's source); metadata `doc` first."""
    docs = {f.name: f.metadata["doc"] for f in fields(cls) if "doc" in f.metadata}
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    for node, after in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs.setdefault(node.target.id, inspect.cleandoc(after.value.value))
    return docs


def flag_names(f: Field) -> tuple[str, ...]:
    """The option strings of field `f` (empty: the field has no flag)."""
    return tuple(f.metadata.get("flags", (f"--{f.name.replace('_', '-')}",)))


def flag_fields(cls: type, names=None) -> list[Field]:
    """The fields of `cls` that have a flag, in declaration order; only those in `names` if given."""
    return [f for f in fields(cls) if flag_names(f) and (names is None or f.name in names)]


def _kind(cls: type, f: Field) -> tuple[object, bool]:
    """(the annotation without None, whether None is allowed) of field `f`."""
    hint = typing.get_type_hints(cls)[f.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) < len(typing.get_args(hint)):
            return (args[0] if len(args) == 1 else hint), True
    return hint, False


def _items_type(kind) -> type | None:
    """X of list[X] / tuple[X, ...], else None (not a list)."""
    if typing.get_origin(kind) in (list, tuple):
        return (typing.get_args(kind) or (str,))[0]
    return None


# ------------------------------------------------------------------ the parser
def add_flags(group, cls: type, names=None, overrides: bool = False) -> None:
    """Add a flag for each field of `cls` (those in `names`) to `group` (a parser or group)."""
    for f in flag_fields(cls, names):
        add_field_flag(group, cls, f, overrides)


def add_field_flag(group, cls: type, f: Field, overrides: bool = False) -> None:
    """Add the flag of field `f` of dataclass `cls` to `group` (a parser or an argument group)."""
    kind, nullable = _kind(cls, f)
    meta = f.metadata
    default = None if f.default is MISSING or overrides else f.default
    kw: dict = {"dest": f.name, "default": default}
    kw["help"] = argparse.SUPPRESS if meta.get("hidden") else _help(cls, f, overrides)
    if meta.get("switch"):
        group.add_argument(*flag_names(f), action="store_true", **kw)
        return
    convert = meta.get("parse") or _converter(kind)
    listed = _items_type(kind) is not None and "parse" not in meta
    if listed:  # `build` splits and converts the items
        kw.update(nargs="+", action="extend", default=None)
    if convert is str_bool:
        kw.update(nargs="?", const=True)
    choices = None if "choices_pattern" in meta else meta.get("choices")
    if (nullable or overrides) and not listed:
        convert = optional(convert)
        choices = [*choices, None] if choices is not None else None
    kw.update({k: meta[k] for k in ("metavar", "nargs", "const") if k in meta})
    group.add_argument(*flag_names(f), type=convert, choices=choices, **kw)
    if "negation" in meta:
        group.add_argument(
            meta["negation"],
            dest=f.name,
            action="store_false",
            help=f"same as {flag_names(f)[0]} false",
        )


def _converter(kind):
    """The argparse `type` of a field of annotation `kind`: bool, int and float convert; the
    rest stays text (a list's items are converted by `build`)."""
    if kind is bool:
        return str_bool
    return kind if kind in (int, float) else None


def _help(cls: type, f: Field, overrides: bool) -> str:
    text = " ".join(field_docs(cls).get(f.name, "").split()).replace("%", "%%").removesuffix(".")
    default = f.default if f.default is not MISSING else None
    if f.default_factory is not MISSING:
        made = f.default_factory()
        default = " ".join(map(str, made)) if isinstance(made, (list, tuple)) else None
    if not overrides and not f.metadata.get("switch") and default not in (None, "", ()):
        text += f" (default: {default})".replace("%", "%%")
    return text


# ------------------------------------------------------------------ the config
def build(cls: type, args, as_flags: bool = False, **given):
    """`cls` from parsed flags (fields not given keep their defaults) and `given` values; a
    ValueError from its validation is a UsageError, its field's name replaced by the flag when
    `as_flags` (the user typed flags)."""
    values = {}
    for f in flag_fields(cls):
        value = getattr(args, f.name, None)
        if value is not None:
            values[f.name] = _items(cls, f, value)
    try:
        return cls(**{**values, **given})
    except ValueError as exc:
        text = str(exc)
        if as_flags:
            text = _flag_message(cls, text)
        raise UsageError(text) from None


def _items(cls: type, f: Field, value):
    """A list field's values split (at commas, and white space unless `sep=","`) and converted."""
    kind, _ = _kind(cls, f)
    item = _items_type(kind)
    if item is None or "parse" in f.metadata:
        return value
    texts = value if isinstance(value, (list, tuple)) else [value]
    if f.metadata.get("sep") == ",":
        words = [w.strip() for t in texts for w in str(t).split(",") if w.strip()]
    else:
        words = split_words(texts)
    out = []
    for word in words:
        try:
            out.append(item(word))
        except ValueError:
            what = "whole numbers" if item is int else "numbers" if item is float else "text"
            raise UsageError(f"{flag_names(f)[0]} takes {what}, got {word!r}") from None
    return tuple(out) if typing.get_origin(kind) is tuple else out


def check_choices(config) -> None:
    """ValueError naming the first field of `config` whose value is not among its `choices` (nor
    matches its `choices_pattern`)."""
    for f in fields(config):
        meta = f.metadata
        choices, pattern = meta.get("choices"), meta.get("choices_pattern")
        value = getattr(config, f.name)
        if choices is None or value in choices:
            continue
        if pattern and re.fullmatch(pattern[0], str(value)):
            continue
        listed = "one of " + ", ".join(map(str, choices)) + (f" or {pattern[1]}" if pattern else "")
        raise ValueError(f"{f.name} must be {meta.get('choices_text', listed)}, got {value!r}")


def _flag_message(cls: type, text: str) -> str:
    """'batch_sizes must ...' -> '--batch-sizes must ...'."""
    m = re.match(r"^(\w+)(:?\s)(.*)$", text, re.S)
    by_name = {f.name: f for f in flag_fields(cls)}
    if m and m.group(1) in by_name:
        return f"{flag_names(by_name[m.group(1)])[0]}{m.group(2)}{m.group(3)}"
    return text


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
