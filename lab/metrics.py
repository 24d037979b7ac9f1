"""What each metric means: its unit, which way is better, and what must match for two values to compare.

Every metric an experiment records is declared here once, as a `MetricSpec`, and the catalogue
entry of each experiment lists the specs it produces (`lab.catalogue`). The recorder refuses an
undeclared metric or a value of the wrong kind, `compare` and the report reason only from these
declarations, and a metric whose direction is `NONE` is never marked better or worse.

`comparable` names what, beyond the metric's own params (which must match exactly for two values
to be paired at all), must be equal for the two values to be compared:
- `"metric:NAME"`: the value of the metric NAME recorded with the same params in the same record
  (e.g. `fusion.step_ms` is comparable only where `bytes_moved` is equal);
- `"manifest:PATH"`: a field of the run's manifest, dotted (e.g. `manifest:compile_cache.state`);
- `"profile:PATH"`: a field of the run's profile (e.g. `profile:model.name`).

This module imports nothing but the standard library: the report and compare run without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lab import units


class Direction(StrEnum):
    LOWER = "lower"  # lower is better (times, memory, break-even counts)
    HIGHER = "higher"  # higher is better (speedups, bandwidth, agreement)
    NONE = "none"  # neither: a difference is "changed", never better or worse


class Kind(StrEnum):
    NUMBER = "number"  # int or float (or null: not measured)
    BOOL = "bool"
    TEXT = "text"  # a label, e.g. which bound binds
    NUMBERS = "numbers"  # a list of numbers (e.g. per-round medians)


@dataclass(frozen=True)
class MetricSpec:
    """The declaration of one metric name."""

    name: str
    unit: str
    direction: Direction
    help: str
    kind: Kind = Kind.NUMBER
    comparable: tuple[str, ...] = ()

    def __str__(self) -> str:  # so a spec can be used where its name is expected
        return self.name

    def accepts(self, value: Any) -> bool:
        """Whether `value` is of this metric's kind (None is accepted for numbers: not measured)."""
        if self.kind is Kind.BOOL:
            return isinstance(value, bool)
        if self.kind is Kind.TEXT:
            return isinstance(value, str)
        if self.kind is Kind.NUMBERS:
            return isinstance(value, list) and all(_is_number(v) for v in value)
        return value is None or _is_number(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


REGISTRY: dict[str, MetricSpec] = {}


def declare(name: str, unit: str, direction: Direction, help: str, kind: Kind = Kind.NUMBER,
            comparable: tuple[str, ...] = ()) -> MetricSpec:
    """Declare a metric name once; a second declaration of the same name is a programming error."""
    if name in REGISTRY:
        raise ValueError(f"metric {name!r} is declared twice")
    spec = MetricSpec(name, unit, direction, help, kind, comparable)
    REGISTRY[name] = spec
    return spec


def spec(name: str) -> MetricSpec | None:
    """The declaration of a metric name, or None for a name this lab version does not declare."""
    return REGISTRY.get(name)


L, H, N = Direction.LOWER, Direction.HIGHER, Direction.NONE

# ---------------------------------------------------------------------------- shared by several experiments
STEP_MS = declare("step_ms", units.MS, L, "median time of one step (or call) of the method")
SETUP_S = declare("setup_s", units.S, L, "time to make the method ready: compile and/or capture, first call included")
SPEEDUP = declare("speedup_vs_eager", units.X, H, "eager's median step time over this method's")

# ---------------------------------------------------------------------------- text metrics
# Declared on the `schema` branch so that its loader (text only where declared) reads the runs the
# lab already writes; the `contracts` branch declares every metric: on merge, keep its declarations
# and delete this block (a name declared twice fails at import, naming it).
T = Kind.TEXT
BINDING = declare("binding", units.NONE, N, "which lower bound on the step binds: launch, bandwidth or compute", T)
LAUNCH_COST_BASIS = declare("launch_cost_basis", units.NONE, N, "which per-launch cost the launch bound uses", T)
VERDICT = declare("verdict", "kind", N, "diagnose's verdict on a target", T)
WINNER = declare("winner", "method", N, "the fastest correct method for a workload", T)
WINNER_FAMILY = declare("winner_family", "family", N, "the family of the winning method", T)
