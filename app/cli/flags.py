"""Command-line flags derived from config dataclasses, so each setting is written once.

A field whose metadata has ``help`` becomes a flag: ``--field-name`` (or the
metadata's ``name``), typed from the field's annotation, defaulting to the field's
default (or to the environment variable the metadata's ``env`` names). Nested
config dataclasses contribute their own flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def _base(tp: Any) -> Any:
    """``X | None`` -> ``X``."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return tp


def _nested(tp: Any) -> bool:
    """A nested config with flags of its own."""
    if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return False
    hints = typing.get_type_hints(tp)
    return any("help" in f.metadata or _nested(hints[f.name]) for f in dataclasses.fields(tp))


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"flag field {f.name} has no default")


def add_flags(parser: argparse.ArgumentParser, cls: type[Any]) -> None:
    """Add a flag for every field of ``cls`` (and of its nested configs) that has ``help``."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if _nested(tp):
            add_flags(parser, tp)
            continue
        meta = f.metadata
        if "help" not in meta:
            continue
        default = _default(f)
        shown = default is not None and "env" not in meta  # never print a secret from the environment
        if "env" in meta:
            default = os.environ.get(meta["env"], default)
        name = meta.get("name", "--" + f.name.replace("_", "-"))
        base = _base(tp)
        kwargs: dict[str, Any] = {
            "dest": f.name,
            "help": meta["help"],
            "default": default,
            "metavar": name.lstrip("-").upper().replace("-", "_"),
        }
        if typing.get_origin(base) is tuple:
            kwargs.update(action="append", default=list(default))
            shown = False
        elif base is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
            del kwargs["metavar"]
        elif typing.get_origin(base) is typing.Literal:  # a closed set of names: its choices
            kwargs.update(type=str, choices=typing.get_args(base))
        else:
            kwargs["type"] = base
        for key in ("choices", "metavar"):
            if key in meta:
                kwargs[key] = meta[key]
        if "choices" in kwargs:
            kwargs.pop("metavar", None)
        if shown and default != "":
            kwargs["help"] += f" (default: {default})"
        parser.add_argument(name, **kwargs)


def from_args(cls: type[T], args: argparse.Namespace) -> T:
    """An instance of ``cls`` with every flag field (nested ones too) taken from ``args``."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tp = hints[f.name]
        if _nested(tp):
            values[f.name] = from_args(tp, args)
        elif "help" in f.metadata and hasattr(args, f.name):
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if typing.get_origin(_base(tp)) is tuple else value
    return cls(**values)
