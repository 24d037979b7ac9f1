"""Experiment options: each experiment declares its knobs once, as a frozen dataclass.

An experiment module defines `Options`, a frozen dataclass whose fields are its knobs, each made
with `option(default, "one line of help")`. Profiles override fields by name
(`Profile.options[experiment_id][field]`), and so does the command line
(`--set EXPERIMENT.FIELD=VALUE`); `resolve` builds the instance the experiment receives as
`ctx.options`, refusing unknown names and values of the wrong type with a one-line error.

A default that depends on the run is declared where the option is, and resolved here, once, before the
experiment runs (so the manifest records the value used, never `None`):
`option(None, "...", profile="rounds")` takes the profile's field (a dotted path such as
`"model.n_layer"` reaches inside it; a scalar becomes a one-item tuple for a list-valued option),
`option(None, "...", same_as="rounds")` the resolved value of another option, and
`option(None, "...", by_device={"cuda": 8192, "cpu": 1024})` a value per profile device. A value the
profile or `--set` gives wins (`--set X.rounds=none` asks for the declared default again). A `None`
default without a source is a value of its own, which the help explains ("none: all").

Text from the command line is parsed by the declared type: `true/false/1/0/yes/no/on/off` for
bools; ints; floats; a member's value for an enum or a Literal (`compile-default`); comma-separated
lists (`1,8,16`) for tuples and lists; `none`/`null` for an Optional field. Values that come from a
profile (Python objects) are checked against the same types, so `try_compile="False"` in a profile
is an error, not a truthy string.

A number must also lie in its option's declared range (`option(..., minimum=1, maximum=1)`; at least 0
where none is declared, and finite): `--set cuda_graph_decode.rounds=0` is refused before anything runs,
never left for the experiment to fail on.

This module imports nothing but the standard library (the report and `list --options` use it).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from types import MappingProxyType
from typing import Any, Mapping, Union, get_args, get_origin, get_type_hints

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")
NONE = ("none", "null")


class OptionsError(ValueError):
    """An unknown experiment or option, or a value of the wrong type; the message is one line."""


def option(default: Any, help: str, *, profile: str | None = None, same_as: str | None = None,
           by_device: Mapping[str, Any] | None = None, minimum: float = 0, maximum: float | None = None) -> Any:
    """A declared option: its default and one line of help (shown by `python -m lab list --options`); with
    `profile`, `same_as` or `by_device` (default None), where the value comes from when nothing sets it. A number
    (or each number of a list) a profile or `--set` gives must lie in [minimum, maximum] (`in_range`)."""
    if isinstance(default, list):
        raise TypeError("use a tuple for a list-valued option's default (options are frozen)")
    sources = {k: v for k, v in (("profile", profile), ("same_as", same_as), ("by_device", by_device))
               if v is not None}
    if len(sources) > 1 or (sources and default is not None):
        raise TypeError("an option's default comes from one source: a value, or None with one of profile, same_as, "
                        "by_device")
    if by_device is not None:
        sources["by_device"] = MappingProxyType(dict(by_device))
    return dataclasses.field(default=default, metadata={"help": help, **sources, "minimum": minimum,
                                                        "maximum": maximum})


def in_range(f: dataclasses.Field[Any], value: Any, where: str) -> None:
    """OptionsError (one line) when a number of `value` (a number, or a list of them) lies outside the option's
    declared range: at least its `minimum` (0 unless declared: no option of the lab is negative), at most its
    `maximum` where declared. Refused before anything runs, never left to fail the experiment."""
    low, high = f.metadata.get("minimum", 0), f.metadata.get("maximum")
    for item in value if isinstance(value, tuple) else (value,):
        if isinstance(item, (int, float)) and not isinstance(item, bool) and \
                not (low <= item and (high is None or item <= high)):
            bounds = f"at least {low:g}" + (f" and at most {high:g}" if high is not None else "")
            raise OptionsError(f"{where}: {item!r} is out of range (it must be {bounds})")


def default_source(f: dataclasses.Field[Any]) -> str:
    """Where an option's value comes from when nothing sets it, in words (empty for a plain default)."""
    if "profile" in f.metadata:
        return f"the profile's {f.metadata['profile']}"
    if "same_as" in f.metadata:
        return f"the value of {f.metadata['same_as']}"
    if "by_device" in f.metadata:
        return ", ".join(f"{v!r} on {k}" for k, v in f.metadata["by_device"].items())
    return ""


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
        return str(tp.__name__).lower()
    return str(getattr(tp, "__name__", str(tp)))


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
            value = float(text.strip())
        except ValueError:
            raise OptionsError(f"{where}: expected a float, got {text!r}") from None
        if not math.isfinite(value):
            raise OptionsError(f"{where}: expected a finite float, got {text!r}")
        return value
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
        listed = [a for a in get_args(tp) if a is not Ellipsis]
        item = listed[0] if listed else str
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
            set_text: Mapping[str, str] | None = None, profile_name: str = "profile", profile: Any = None) -> Any:
    """An instance of `cls`: its defaults, then the profile's values (Python objects, type-checked),
    then `--set` text (parsed by the declared type), then, given the `profile` itself, the declared
    defaults that come from the run (`fill`). Unknown keys and wrong types are OptionsError."""
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in (profile_values or {}).items():
        _known(cls, key, experiment, f"profile {profile_name}:")
        values[key] = coerce(value, hints[key], f"profile {profile_name}: {experiment}.{key}")
        in_range(fields[key], values[key], f"profile {profile_name}: {experiment}.{key}")
    for key, text in (set_text or {}).items():
        _known(cls, key, experiment, "--set")
        values[key] = parse_text(text, hints[key], f"--set {experiment}.{key}")
        in_range(fields[key], values[key], f"--set {experiment}.{key}={text}")
    options = cls(**values)
    return options if profile is None else fill(options, profile, experiment)


def _from_profile(profile: Any, path: str, experiment: str, name: str) -> Any:
    value = profile
    for part in path.split("."):
        if not hasattr(value, part):
            raise OptionsError(f"{experiment}.{name}: its default is the profile's {path}, which profile "
                               f"{getattr(profile, 'name', '?')} does not have")
        value = getattr(value, part)
    return value


def fill(options: Any, profile: Any, experiment: str = "") -> Any:
    """`options` with every field still None whose declaration names a source (profile, same_as, by_device)
    given its value under `profile` (its fields; `profile.device` for by_device). Idempotent: a resolved
    instance comes back unchanged, so a Context may fill what a test built by hand."""
    experiment = experiment or type(options).__module__.rsplit(".", 1)[-1]
    hints = _hints(type(options))
    fields = dataclasses.fields(options)
    values = {f.name: getattr(options, f.name) for f in fields}
    for f in sorted(fields, key=lambda f: "same_as" in f.metadata):  # same_as after the fields it copies
        if values[f.name] is not None:
            continue
        where = f"{experiment}.{f.name}"
        if "profile" in f.metadata:
            value = _from_profile(profile, f.metadata["profile"], experiment, f.name)
            if get_origin(hints[f.name]) in (Union, types.UnionType) and not isinstance(value, (tuple, list)) and \
                    any(get_origin(a) in (tuple, list) for a in get_args(hints[f.name])):
                value = (value,)
        elif "same_as" in f.metadata:
            value = values[f.metadata["same_as"]]
        elif "by_device" in f.metadata:
            device = str(getattr(profile, "device", ""))
            if device not in f.metadata["by_device"]:
                raise OptionsError(f"{where}: no declared default for device {device!r} "
                                   f"(declared: {', '.join(f.metadata['by_device'])})")
            value = f.metadata["by_device"][device]
        else:
            continue
        values[f.name] = coerce(value, hints[f.name], f"{where} (its default, {default_source(f)})")
    return dataclasses.replace(options, **values)


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
