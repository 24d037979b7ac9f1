"""Experiment options: each experiment declares its knobs once, as a frozen dataclass.

An experiment module defines `Options`, a frozen dataclass whose fields are its knobs, each made
with `option(default, "one line of help")`. Profiles override fields by name
(`Profile.options[experiment_id][field]`), and so does the command line
(`--set EXPERIMENT.FIELD=VALUE`); `resolve` builds the instance the experiment receives as
`ctx.options`, refusing unknown names and values of the wrong type with a one-line error. A field
whose default is `None` takes its value from the profile (the help says which); the experiment
reads `prof.decode_steps if ctx.options.steps is None else ctx.options.steps` (0 is a value).

Text from the command line is parsed by the declared type: `true/false/1/0/yes/no/on/off` for
bools; ints; floats; a member's value for an enum or a Literal (`compile-default`); comma-separated
lists (`1,8,16`) for tuples and lists; `none`/`null` for an Optional field. Values that come from a
profile (Python objects) are checked against the same types, so `try_compile="False"` in a profile
is an error, not a truthy string.

This module imports nothing but the standard library (the report and `list --options` use it).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Mapping, Union, get_args, get_origin, get_type_hints

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")
NONE = ("none", "null")


class OptionsError(ValueError):
    """An unknown experiment or option, or a value of the wrong type; the message is one line."""


def option(default: Any, help: str) -> Any:
    """A declared option: its default and one line of help (shown by `python -m lab list --options`)."""
    if isinstance(default, list):
        raise TypeError("use a tuple for a list-valued option's default (options are frozen)")
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """One declared option, for listing."""

    name: str
    type: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()  # the allowed values of an enum or Literal (or of a list's items)


def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        inner = " | ".join(_type_name(a) for a in args)
        return f"{inner} | None" if type(None) in get_args(tp) else inner
    if origin in (tuple, list):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return f"list of {_type_name(args[0]) if args else 'values'}"
    if origin is typing.Literal:
        return "str"
    if _is_enum(tp):
        return tp.__name__.lower()
    return getattr(tp, "__name__", str(tp))


def _choices(tp: Any) -> tuple[str, ...]:
    """The allowed values of an enum or Literal type, looking inside Optional and list types."""
    if _is_enum(tp):
        return tuple(str(m.value) for m in tp)
    if get_origin(tp) is typing.Literal:
        return tuple(str(a) for a in get_args(tp))
    return tuple(c for a in get_args(tp) if a is not Ellipsis for c in _choices(a))


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def describe(cls: type) -> list[OptionInfo]:
    """The declared options of an Options dataclass, in declaration order."""
    hints = _hints(cls)
    return [OptionInfo(f.name, _type_name(hints[f.name]), f.default, f.metadata.get("help", ""),
                       _choices(hints[f.name])) for f in dataclasses.fields(cls)]


def _parse_scalar(text: str, tp: Any, where: str) -> Any:
    low = text.strip().lower()
    if tp is bool:
        if low in TRUE:
            return True
        if low in FALSE:
            return False
        raise OptionsError(f"{where}: expected a bool (true/false/1/0/yes/no), got {text!r}")
    if tp is int:
        try:
            return int(text.strip())
        except ValueError:
            raise OptionsError(f"{where}: expected an int, got {text!r}") from None
    if tp is float:
        try:
            return float(text.strip())
        except ValueError:
            raise OptionsError(f"{where}: expected a float, got {text!r}") from None
    if tp is str:
        return text
    if get_origin(tp) is typing.Literal or _is_enum(tp):
        try:
            return _coerce_scalar(text.strip(), tp, where)
        except OptionsError:
            allowed = [m.value for m in tp] if _is_enum(tp) else get_args(tp)
            raise OptionsError(f"{where}: expected one of {', '.join(map(str, allowed))}, got {text!r}") from None
    raise OptionsError(f"{where}: cannot parse a value of type {_type_name(tp)}")


def parse_text(text: str, tp: Any, where: str) -> Any:
    """A command-line string as a value of the declared type `tp`."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if type(None) in args and text.strip().lower() in NONE:
            return None
        for a in (a for a in args if a is not type(None)):
            try:
                return parse_text(text, a, where)
            except OptionsError:
                continue
        choices = f" (one of {', '.join(_choices(tp))})" if _choices(tp) else ""
        raise OptionsError(f"{where}: expected {_type_name(tp)}{choices}, got {text!r}")
    if origin in (tuple, list):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        item = args[0] if args else str
        parts = [p for p in (s.strip() for s in text.split(",")) if p] if text.strip() else []
        return tuple(_parse_scalar(p, item, where) for p in parts)
    return _parse_scalar(text, tp, where)


def _coerce_scalar(value: Any, tp: Any, where: str) -> Any:
    """`value` as an instance of the scalar type `tp` (an int is a float; a member's value is the member)."""
    if tp is Any:
        return value
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        ok = False
    elif get_origin(tp) is typing.Literal:
        ok = value in get_args(tp) and not isinstance(value, bool)
    elif _is_enum(tp):
        try:
            return tp(value)
        except ValueError:
            ok = False
    else:
        ok = isinstance(value, tp)
    if not ok:
        _fail(value, tp, where)
    return value


def coerce(value: Any, tp: Any, where: str) -> Any:
    """A Python value (from a profile) checked against the declared type; lists become tuples."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in get_args(tp):
            return None
        for a in (a for a in get_args(tp) if a is not type(None)):
            try:
                return coerce(value, a, where)
            except OptionsError:
                continue
        _fail(value, tp, where)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            _fail(value, tp, where)
        args = [a for a in get_args(tp) if a is not Ellipsis]
        item = args[0] if args else Any
        try:
            return tuple(_coerce_scalar(v, item, where) for v in value)
        except OptionsError:
            _fail(value, tp, where)
    return _coerce_scalar(value, tp, where)


def _fail(value: Any, tp: Any, where: str) -> Any:
    choices = f" (one of {', '.join(_choices(tp))})" if _choices(tp) else ""
    raise OptionsError(f"{where}: expected {_type_name(tp)}{choices}, got {value!r} ({type(value).__name__})")


def _known(cls: type, key: str, experiment: str, source: str) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    if key not in names:
        valid = f"valid: {', '.join(names)}" if names else "it has no options"
        raise OptionsError(f"{source} {experiment}.{key}: {experiment} has no option {key!r} ({valid})")


def resolve(cls: type, experiment: str, profile_values: Mapping[str, Any] | None = None,
            set_text: Mapping[str, str] | None = None, profile_name: str = "profile") -> Any:
    """An instance of `cls`: its defaults, then the profile's values (Python objects, type-checked),
    then `--set` text (parsed by the declared type). Unknown keys and wrong types are OptionsError."""
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for key, value in (profile_values or {}).items():
        _known(cls, key, experiment, f"profile {profile_name}:")
        values[key] = coerce(value, hints[key], f"profile {profile_name}: {experiment}.{key}")
    for key, text in (set_text or {}).items():
        _known(cls, key, experiment, "--set")
        values[key] = parse_text(text, hints[key], f"--set {experiment}.{key}")
    return cls(**values)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def as_dict(options: Any) -> dict[str, Any]:
    """The resolved options as plain JSON-able data (tuples become lists, enum members their values)."""
    return {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options)}


def parse_set(items: list[str]) -> dict[str, dict[str, str]]:
    """`--set EXP.KEY=VALUE` arguments as {EXP: {KEY: raw text}}; the shape is checked here, names later."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        exp, dot, name = key.partition(".")
        if not sep or not dot or not exp.strip() or not name.strip():
            raise OptionsError(f"--set {item!r}: expected EXPERIMENT.KEY=VALUE")
        out.setdefault(exp.strip(), {})[name.strip()] = raw
    return out


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """For an experiment with no knobs."""
