"""The marks `compare`, the history and the report give a pair of values, from the metric's declaration alone.

For one metric that two runs both recorded (same experiment, name and params), `judge` returns
the ratio B/A, a mark and the reason behind it, applying the rules below in order:

1. a condition of the declaration fails (its own `comparable` and, inherited, those of the metrics
   it is `derived_from`: lab.contract.metrics.conditions)  -> not comparable, naming it:
   `metric:NAME`: the values of NAME in the same record whose params include this value's params
   (fusion's bytes_moved beside its step_ms, both methods' beside its speedup) differ, or only one
   record has them (neither: the condition does not apply);
   `manifest:PATH` / `profile:PATH`: the field differs, or a run does not record it;
   `option:EXPERIMENT.KEY`: for a value of that experiment, or about it (selection's figures, whose
   `workload` param names it), the option it ran with differs (the
   manifest's resolved `options`; for a run made before those were recorded, the profile's
   override, else "its default");
2. the units differ: two units of a scale (ms against s)  -> not comparable;
   otherwise (a renamed unit: count against steps, a label's unit dropped) equal values and two
   categorical values are judged as below (8 against 8, "eager" against "eager": same), two different
   numbers                                            -> not comparable
3. both values are null                               -> same
4. one value is null (e.g. break-even "never")        -> not comparable
5. booleans, text, lists                              -> same when equal, else changed
6. numbers: not finite                                -> not comparable
            outside its own samples' interquartile
            range (an edited file: 1e308 with the
            spread of 6.09)                           -> not comparable
            equal                                     -> same
            of different sign (5.06 vs -40.66)        -> not comparable (a ratio would be meaningless)
            the metric has no direction               -> changed (never better or worse)
            both sides have a 95% interval            -> the interval rule (lab.contract.intervals):
                                                         overlapping: same ("95% intervals overlap");
                                                         disjoint: better / worse in the declared
                                                         direction ("disjoint 95% intervals")
   where either side has no interval (a run made before intervals were stored, a metric that declares
   none), the older rule, its reason saying that no interval was stored:
            one of them is 0                          -> better / worse by direction, no ratio
            interquartile ranges overlap              -> same (within noise)
            ratio within [1/factor, factor]           -> same
            otherwise                                 -> better / worse in the declared direction.

A value's interval is where its metric declares it: a timing's in its spread (`ci_low`, `ci_high`), a
derived figure's in the metrics its declaration names (`MetricSpec.interval`, e.g. speedup_vs_eager's
`speedup_ci_low` / `speedup_ci_high`, recorded with the same params); the caller fills `Value.ci_low` and
`Value.ci_high`. A metric this lab version does not declare has no direction and no conditions.
Standard library only (no torch): the report and `lab compare` use it on a laptop.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from lab.contract import units as U
from lab.contract.intervals import Interval, Relation, of, relation
from lab.contract import metrics as M
from lab.contract.metrics import Direction, MetricSpec, is_number

Mark = Literal["better", "worse", "same", "changed", "not comparable", "newly failing", "fixed"]
MARKS: tuple[str, ...] = ("better", "worse", "newly failing", "fixed", "not comparable", "changed", "same")
FACTOR = 1.10
_MISSING = object()


@dataclass(frozen=True)
class Verdict:
    ratio: float | None
    mark: Mark
    reason: str = ""


@dataclass(frozen=True)
class Value:
    """One side's value with what the conditions may look at: its record's metrics and its run's manifest."""

    value: Any
    unit: str
    params: dict[str, Any]
    q1: float | None = None
    q3: float | None = None
    siblings: tuple[Any, ...] = ()  # the record's metrics (lab.contract.results.Metric), for `metric:NAME`
    manifest: dict[str, Any] | None = None  # the run's manifest, for `manifest:`, `profile:` and `option:`
    experiment: str = ""  # the record's experiment id, for `option:`
    ci_low: float | None = None  # the 95% interval of the value, where stored (see the module docstring)
    ci_high: float | None = None

    @property
    def interval(self) -> Interval | None:
        try:
            return of(self.ci_low, self.ci_high)
        except ValueError:  # a stored interval whose ends are the wrong way round: not an interval
            return None


def dig(obj: Any, path: str) -> Any:
    """A dotted path into nested dicts ('compile_cache.state'); _MISSING where any part is absent."""
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def short(value: Any, width: int = 40) -> str:
    """A value in a reason: numbers to 4 significant digits, objects as compact JSON, cut to `width`."""
    if is_number(value) and isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _first_difference(a: Any, b: Any) -> str:
    """For two dicts, the first key whose values differ ('n_layer: 2 vs 12'); else the two values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key, _MISSING) != b.get(key, _MISSING):
                va, vb = a.get(key, "(absent)"), b.get(key, "(absent)")
                return f"{key}: {short(va)} vs {short(vb)}"
    return f"{short(a)} vs {short(b)}"


def _siblings(side: Value, name: str) -> Any:
    """The values of metric `name` in the same record whose params include this value's params."""
    found = sorted((json.dumps(m.params, sort_keys=True, default=str), m.value) for m in side.siblings
                   if m.name == name and all(m.params.get(k, _MISSING) == v for k, v in side.params.items()))
    if not found:
        return _MISSING
    return found[0][1] if len(found) == 1 else [v for _, v in found]


DEFAULT = "its default"


def option_value(manifest: dict[str, Any] | None, experiment: str, key: str) -> Any:
    """The option `key` an experiment ran with: the manifest's resolved options, else the profile's override,
    else DEFAULT (a run recorded before the manifest held resolved options, where the profile left it alone)."""
    manifest = manifest or {}
    resolved = dig(manifest, f"options.{experiment}")
    if isinstance(resolved, dict):
        return resolved.get(key, DEFAULT)
    override = dig(manifest, f"profile.options.{experiment}")
    return override.get(key, DEFAULT) if isinstance(override, dict) else DEFAULT


def condition_failure(rule: str, a: Value, b: Value) -> str:
    """Why the condition `rule` of a declaration does not hold for this pair ('' when it holds)."""
    kind, _, what = rule.partition(":")
    if kind == "option":
        experiment, _, key = what.partition(".")
        if experiment not in (a.experiment, a.params.get("workload")):
            return ""  # another experiment's option: not a condition on this value (nor on a figure about it)
        va, vb = option_value(a.manifest, experiment, key), option_value(b.manifest, experiment, key)
        return "" if va == vb else f"option {what} differs: {short(va)} vs {short(vb)}"
    if kind == "metric":
        va, vb = _siblings(a, what), _siblings(b, what)
        if va is _MISSING and vb is _MISSING:
            return ""  # the condition is about a metric neither record has: it does not apply here
        if va is _MISSING or vb is _MISSING:
            return f"{what} recorded in {'B' if va is _MISSING else 'A'} only"
        return "" if va == vb else f"{what} differs: {_first_difference(va, vb)}"
    if kind in ("manifest", "profile"):
        root_a = (a.manifest or {}) if kind == "manifest" else (a.manifest or {}).get("profile")
        root_b = (b.manifest or {}) if kind == "manifest" else (b.manifest or {}).get("profile")
        va, vb = dig(root_a, what), dig(root_b, what)
        label = what if kind == "manifest" else f"profile {what}"
        if va is _MISSING or vb is _MISSING:
            where = "A and B" if va is _MISSING and vb is _MISSING else ("A" if va is _MISSING else "B")
            return f"{label} is not recorded in {where}"
        return "" if va == vb else f"{label} differs: {_first_difference(va, vb)}"
    return f"unknown condition {rule!r} in the metric's declaration"


def _null_meaning(spec: MetricSpec | None) -> str:
    """What null means for this metric, from its help text ('(null: never)'), else 'not measured'."""
    if spec is not None and "(null: " in spec.help:
        return spec.help.split("(null: ", 1)[1].split(")", 1)[0]
    return "not measured"


NO_INTERVAL = "no 95% interval stored"
# Units of a scale (1 s is not 1 ms): two of them that differ are never the same unit renamed.
SCALED = frozenset({U.MS, U.S, U.US, U.BYTES, U.MIB, U.GBPS, U.TFLOPS, U.FLOP, U.PERCENT, U.FRACTION})


def outside_own_spread(v: Value) -> str:
    """The interquartile range of the value's own samples when the value lies outside it ('[1, 2]'), else '': a
    median is inside its samples' interquartile range, so a value outside it was not measured with them (an edited
    file). (A derived figure's interval, taken from other metrics, may legitimately miss its point estimate.)"""
    if v.q1 is not None and v.q3 is not None and v.q1 <= v.q3 and not v.q1 <= v.value <= v.q3:
        return f"[{short(v.q1)}, {short(v.q3)}]"
    return ""


def judge(spec: MetricSpec | None, a: Value, b: Value, factor: float = FACTOR) -> Verdict:
    """The ratio B/A, the mark and its reason for one metric both runs have (the rules of the module docstring)."""
    for rule in M.conditions(spec):
        why = condition_failure(rule, a, b)
        if why:
            return Verdict(None, "not comparable", why)
    va, vb = a.value, b.value
    renamed = ""
    if a.unit != b.unit:
        units = f"units differ: {a.unit or '(none)'} vs {b.unit or '(none)'}"
        if (a.unit in SCALED and b.unit in SCALED) or (is_number(va) and is_number(vb) and va != vb):
            return Verdict(None, "not comparable", units)
        renamed = f" ({units}: a renamed unit)"
    if va is None and vb is None:
        return Verdict(None, "same", "both null" + renamed)
    if va is None or vb is None:
        side = "A" if va is None else "B"
        return Verdict(None, "not comparable", f"{side} is null ({_null_meaning(spec)}): a value against null")
    if is_number(va) != is_number(vb) or (not is_number(va) and type(va) is not type(vb)):
        return Verdict(None, "not comparable", "the two values are of different kinds")
    if not is_number(va):  # booleans, text, lists of numbers: no direction
        if va == vb:
            return Verdict(None, "same", renamed.strip(" ()"))
        return Verdict(None, "changed", "no direction for this kind")
    if not (math.isfinite(va) and math.isfinite(vb)):
        return Verdict(None, "not comparable", "not a finite number")
    for side, v in (("A", a), ("B", b)):
        if why := outside_own_spread(v):
            return Verdict(None, "not comparable", f"{side}'s value {short(v.value)} lies outside the interquartile "
                                                   f"range of its own samples {why}: the value and its spread do not "
                                                   "belong together")
    direction = spec.direction if spec else Direction.NONE
    if va == vb:
        return Verdict(1.0 if va else None, "same", renamed.strip(" ()"))
    if (va < 0 < vb) or (vb < 0 < va):
        return Verdict(None, "not comparable", f"values of different sign ({short(va)} vs {short(vb)}): no ratio")
    ratio = None if va == 0 or vb == 0 else vb / va
    if direction is Direction.NONE:
        why = "no direction declared" if spec else "not declared by this lab version: no direction"
        return Verdict(ratio, "changed", why)
    up = vb > va
    better: Mark = "better" if up == (direction is Direction.HIGHER) else "worse"
    rel = relation(a.interval, b.interval)  # UNKNOWN where either side has no interval
    if rel is Relation.SAME and a.interval is not None and b.interval is not None:
        return Verdict(ratio, "same", f"95% intervals overlap ({a.interval.text()} vs {b.interval.text()})")
    if rel is not Relation.UNKNOWN and a.interval is not None and b.interval is not None:
        return Verdict(ratio, better, f"disjoint 95% intervals ({a.interval.text()} vs {b.interval.text()}); "
                                      f"{'higher' if direction is Direction.HIGHER else 'lower'} is better")
    if ratio is None:
        return Verdict(None, better, f"{NO_INTERVAL}; one side is 0: no ratio, marked by direction")
    if a.q1 is not None and a.q3 is not None and b.q1 is not None and b.q3 is not None \
            and a.q1 <= b.q3 and b.q1 <= a.q3:
        return Verdict(ratio, "same", f"{NO_INTERVAL}; interquartile ranges overlap")
    if 1 / factor <= ratio <= factor:
        return Verdict(ratio, "same", f"{NO_INTERVAL}; within a factor of {factor:g}")
    return Verdict(ratio, better, f"{NO_INTERVAL}; {'higher' if direction is Direction.HIGHER else 'lower'} is better")
