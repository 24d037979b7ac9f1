"""The schema's building blocks: field types, the metric-value rule, reading a file, one-line errors.

`lab.contract.results` declares the results file with dataclasses whose fields use the types below, and
`lab.contract.manifest_schema` the manifest with pydantic models. This module holds what both need:
strict field types, reading a JSON file, and turning a pydantic `ValidationError` into one line
that names the file and the field. Nothing here imports torch: `report` and `compare` use it.

Numbers: JSON has no NaN or infinity, so the writer (lab.atomic) stores such floats as the
strings "nan", "inf", "-inf". A numeric field accepts a JSON number or exactly one of those three
strings; a number literal too large for a float (1e400, or an integer of 400 digits) is refused when the file
is read, since the lab never writes one. A file is read by lab.untrusted's rule (no link followed, a regular
file only, at most MAX_FILE_BYTES).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, JsonValue, PlainValidator, Strict, ValidationError, WithJsonSchema
from pydantic_core import PydanticCustomError

from lab import untrusted
from lab.contract import metrics
from lab.contract.reasons import Code

NON_FINITE = ("nan", "inf", "-inf")
CODES: tuple[str, ...] = tuple(c.value for c in Code)


class ResultsError(ValueError):
    """A results or manifest file that cannot be used; the message is one line naming the file."""


# ---------------------------------------------------------------------------- field types

def kind_of(value: Any) -> str:
    """A short description of a value for an error message: its JSON kind and a little of it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"text {value[:40]!r}" + ("…" if len(value) > 40 else "")
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    return f"a Python {type(value).__name__}"


def _number(value: Any) -> float | int:
    """A finite JSON number as it is, or one of the non-finite spellings as a float."""
    if isinstance(value, str) and value in NON_FINITE:
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise PydanticCustomError("number_range", "a number literal too large for a float (the lab writes "
                                                      "non-finite numbers as \"nan\", \"inf\", \"-inf\")")
        return value
    raise PydanticCustomError("number", "expected a number (or \"nan\", \"inf\", \"-inf\"), got {kind}",
                              {"kind": kind_of(value)})


_NUMBER_SCHEMA = {"anyOf": [{"type": "number"}, {"enum": list(NON_FINITE)}]}
Number = Annotated[float, PlainValidator(_number), WithJsonSchema(_NUMBER_SCHEMA)]
Text = Annotated[str, Strict()]
Flag = Annotated[bool, Strict()]
Count = Annotated[int, Strict()]
JsonObject = dict[str, JsonValue]


def known_code(code: str) -> str:
    if code not in CODES:
        raise PydanticCustomError("reason_code", "unknown reason code {code} (codes live in lab/contract/reasons.py)",
                                  {"code": repr(code)})
    return code


CodeName = Annotated[str, Strict(), AfterValidator(known_code), WithJsonSchema({"enum": list(CODES)})]


def _metric_shape(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return list(value)
    raise PydanticCustomError("metric_value", "a metric value is a number, a boolean, a list of numbers, text "
                                              "or null, not {kind}", {"kind": kind_of(value)})


MetricValue = Annotated[Any, PlainValidator(_metric_shape), WithJsonSchema({"anyOf": [
    _NUMBER_SCHEMA, {"type": "boolean"}, {"type": "array", "items": _NUMBER_SCHEMA}, {"type": "string"},
    {"type": "null"}]})]


def metric_value(name: str, value: Any) -> Any:
    """`value` checked against the declaration of metric `name` (lab.contract.metrics), non-finite spellings as floats.

    Text only where the metric is declared as text; an undeclared name takes a number, a boolean, a
    list of numbers or null. Raises PydanticCustomError naming the metric.
    """
    spec = metrics.spec(name)
    if spec is not None and spec.kind == metrics.Kind.TEXT:
        if spec.accepts(value):
            return value
        raise _refused(name, value, "declared as text")
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, float) and not math.isfinite(v):
            _number(v)  # a literal out of range: the writer spells non-finite numbers as strings
    if isinstance(value, str) and value in NON_FINITE:
        value = float(value)
    elif isinstance(value, list):
        value = [float(v) if isinstance(v, str) and v in NON_FINITE else v for v in value]
    if spec is not None:
        if spec.accepts(value):
            return value
        raise _refused(name, value, f"declared as {spec.kind.value}")
    if value is None or isinstance(value, (bool, int, float)) or (
            isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        return value
    raise _refused(name, value, "not declared in lab.contract.metrics, so a number, a boolean, a list of numbers or null")


def _refused(name: str, value: Any, rule: str) -> PydanticCustomError:
    return PydanticCustomError("metric_kind", "metric {name} is {rule}; got {kind}",
                               {"name": repr(name), "rule": rule, "kind": kind_of(value)})


# ---------------------------------------------------------------------------- reading and errors

def check_version(raw: Any, key: str, expected: int, where: str, path: Path | str, what: str = "") -> None:
    """One line for a missing or unknown version field (`where` prefixes the field's name)."""
    if not isinstance(raw, dict) or key not in raw:
        raise ResultsError(f"{path}: missing field {where}{key}")
    value = raw[key]
    if type(value) is not int or value != expected:
        raise ResultsError(f"{path}: unknown {what or where + key} {value!r} (this lab reads {what or key} {expected})")


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (the lab writes non-finite numbers as \"nan\", \"inf\", \"-inf\")")


MAX_FILE_BYTES = 64 << 20  # a results.json of the gpu-full profile is a few hundred KB


class NumberError(ValueError):
    """A number literal no float holds (the lab never writes one)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NumberError(f"the number {text[:20]}{'...' if len(text) > 20 else ''} is too large for a float")
    return value


def _finite_int(text: str) -> int:
    value = int(text)
    try:
        float(value)
    except OverflowError:
        raise NumberError(f"the integer {text[:20]}... ({len(text)} digits) is too large for a float") from None
    return value


def parse_json(text: str) -> Any:
    """JSON as the lab writes it: NaN and Infinity refused, every number finite as a float (ValueError)."""
    return json.loads(text, parse_constant=_not_json, parse_float=_finite_float, parse_int=_finite_int)


def read_json(path: Path) -> Any:
    """The parsed content of a JSON file, or ResultsError with one line naming it."""
    try:
        data = untrusted.read_bytes(path, MAX_FILE_BYTES)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except NumberError as exc:
        raise ResultsError(f"{path}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits, nesting too deep
        raise ResultsError(f"{path}: not usable JSON ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") \
            from None


_SHORT = {
    "model_type": "expected an object", "model_attributes_type": "expected an object",
    "dict_type": "expected an object", "dataclass_type": "expected an object", "list_type": "expected a list",
    "string_type": "expected text", "int_type": "expected an integer", "bool_type": "expected true or false",
    "float_type": "expected a number", "extra_forbidden": "unknown field",
    "unexpected_keyword_argument": "unknown field", "invalid-json-value": "not a JSON value",
}


ITEM_NAMES = {"experiments": "experiment", "metrics": "metric", "samples": "samples", "checks": "check"}


def _where(loc: tuple[Any, ...], raw: Any) -> tuple[str, list[str]]:
    """('experiments', 3, 'metrics', 0, 'value') as experiments[3].metrics[0].value, and what those items are
    called on the way (experiment 'ceilings', metric 'binding')."""
    text, names, node = "", [], raw
    folder: Any = None
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
        if isinstance(part, int) and folder in ITEM_NAMES and isinstance(node, dict):
            label = node.get("id") if folder == "experiments" else node.get("name")
            if isinstance(label, str):
                names.append(f"{ITEM_NAMES[folder]} {label!r}")
        folder = part
    return text, names


def describe_error(error: ValidationError, raw: Any, prefix: tuple[Any, ...] = ()) -> str:
    """The first error of a ValidationError as `field LOC (what it is): why`.

    `prefix` is where the validated value sits inside `raw` (the whole that the location is walked in)."""
    errors = error.errors(include_url=False)
    first = errors[0]
    loc = prefix + tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    where, names = _where(loc, raw)
    context = f" ({', '.join(names)})" if names else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "missing":
        return f"missing field {where}{context}{more}"
    text = _SHORT.get(first["type"], first["msg"])
    got = f", got {kind_of(first['input'])}" if first["type"] in _SHORT and "input" in first and not \
        first["type"].endswith(("forbidden", "argument")) else ""
    field = f"field {where}{context}: " if where else ""
    return " ".join(f"{field}{text}{got}{more}".split())


def one_line(path: Path | str, error: ValidationError, raw: Any) -> str:
    """A ValidationError as one line: the file, the first field refused and why (and how many more)."""
    return f"{path}: {describe_error(error, raw)}"
