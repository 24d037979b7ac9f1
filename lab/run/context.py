"""What an experiment receives: `Context` (the profile, its resolved options, the device, a clock, a recorder).

The recorder accepts only the metrics, checks and notes the experiment's catalogue entry declares
(lab.contract.catalogue, lab.contract.metrics, lab.contract.notes), each metric once per params, and refuses by
name a value results.json cannot hold, where it is recorded. `ModelCache` builds the profile's GPT-2 once per run
(`ctx.gpt2()`); `experiment_module` loads an experiment's code, `options_for` resolves its declared options.
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Iterable, Iterator, Sequence, TypeVar

import torch

from lab import console as out
from lab.contract import intervals
from lab.contract import metrics as M
from lab.contract import notes
from lab.contract.catalogue import ExperimentSpec
from lab.contract.metrics import Kind, MetricSpec
from lab.contract.options import NoOptions, fill
from lab.contract.options import resolve as resolve_options
from lab.contract.profiles import Profile
from lab.contract.reasons import Code
from lab.contract.results import Check, Metric, Record, Results, Samples, Skipped, Spread, unstorable
from lab.host.toolchain import Toolchain
from lab.measure.timing import clock_for, spread

T = TypeVar("T")
Opts = TypeVar("Opts")  # the experiment's Options


def _plain(value: Any) -> Any:
    """numpy scalars (np.float32, np.int64, np.bool_) as the Python values they hold, inside lists, tuples and dicts
    too; anything else as it is (the same object when nothing changed; a tensor stays a tensor, for the caller to
    refuse by name)."""
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        return value.item()
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else type(value)(items) \
            if type(value) in (list, tuple) else items
    if isinstance(value, dict):
        pairs = {k: _plain(v) for k, v in value.items()}
        return value if all(pairs[k] is v for k, v in value.items()) else pairs
    return value



class ModelCache:
    """What a run keeps between experiments: one GPT-2 per (dtype, device) (building the 124M model takes seconds),
    and what an experiment keeps open for a later one (`keep`: lab.experiments.sentinel's two fresh processes),
    closed by `close` at the run's end, however it ends."""

    def __init__(self, profile: Profile, provenance: dict[str, Any]) -> None:
        self.profile = profile
        self.provenance = provenance
        self._cache: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._open = contextlib.ExitStack()
        self.kept: dict[str, Any] = {}

    def keep(self, key: str, manager: contextlib.AbstractContextManager[T]) -> T:
        """Enter `manager` and keep what it gives under `key` until `close`."""
        value = self._open.enter_context(manager)
        self.kept[key] = value
        return value

    def close(self) -> None:
        self.kept.clear()
        self._open.close()

    def get(self, dtype: str | None = None, device: str | None = None) -> tuple[Any, Any]:
        from lab.step.model import build_model, extract_weights, torch_dtype

        key = (dtype or self.profile.dtype, device or self.profile.device)
        if key not in self._cache:
            model = build_model(self.profile.model, self.provenance, device=key[1], dtype=torch_dtype(key[0]))
            self._cache[key] = (model, extract_weights(model))
        return self._cache[key]


def experiment_module(spec: ExperimentSpec) -> ModuleType | None:
    """The experiment's code (`spec.module`: `Options`, `run(ctx)`), or None where this lab has none yet: the one
    upward load of the layers, at run time, by the catalogue's name (declared in tests/test_layers.py)."""
    try:
        return importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        if exc.name != spec.module:
            raise
        return None


def options_class(spec: ExperimentSpec) -> type:
    """The experiment's declared `Options`; NoOptions where it has no module yet."""
    module = experiment_module(spec)
    if module is not None and not hasattr(module, "Options"):
        raise TypeError(f"{spec.module} declares no Options (a frozen dataclass, or `Options = NoOptions`)")
    return NoOptions if module is None else module.Options


def options_for(spec: ExperimentSpec, profile: Profile, set_text: dict[str, str] | None = None) -> Any:
    """The experiment's declared Options with the profile's values, `--set` text and the defaults that come from
    the profile applied (OptionsError if bad): what the experiment receives and the manifest records."""
    return resolve_options(options_class(spec), spec.id, profile.options.get(spec.id), set_text, profile.name,
                           profile=profile)



def _rounds(samples: Any) -> list[list[float]] | None:
    """Per-round samples as floats, or None for a flat list."""
    items = list(samples)
    if items and all(isinstance(r, (list, tuple)) for r in items):
        return [[float(x) for x in _plain(list(r))] for r in items]
    return None


def stored_interval(record: Record, spec: MetricSpec, **params: Any) -> intervals.Interval | None:
    """The 95% interval `record` stored beside its `spec` figure with these params (the metrics the declaration
    names in `spec.interval`, as `Context.speedup` writes them); None where it stored an empty one. KeyError where
    the record holds no such metrics."""
    if spec.interval is None:
        raise KeyError(f"{spec.name} declares no interval")
    low, high = (record.metric(name, **params).value for name in spec.interval)
    return intervals.of(low, high)


class Context(Generic[Opts]):
    """What an experiment receives: the profile, its resolved options (`Context[Options]`: the experiment's own
    declared Options), the device, a clock, and a recorder."""

    def __init__(self, spec: ExperimentSpec, profile: Profile, toolchain: Toolchain, record: Record,
                 results: Results, models: ModelCache, options: Opts | None = None, out_dir: Path | None = None) -> None:
        self.spec = spec
        self.out_dir = out_dir  # the run directory (None outside a run): where files beside results.json go
        self.profile = profile
        # resolved (lab.contract.options): a default that comes from the profile is filled in, also in Options a
        # caller built by hand
        self.options: Opts = fill(options, profile, spec.id) if options is not None else options_for(spec, profile)
        self.toolchain = toolchain
        self.record = record
        self.results = results
        self._models = models
        self.device = torch.device(profile.device)
        self.clock = clock_for(self.device)
        self._recorded = {m.key for m in record.metrics}

    def _once(self, m: Metric) -> Metric:
        """`m` appended to the record; ValueError where it holds that name and params: one figure, one value."""
        if m.key in self._recorded:
            raise ValueError(f"{self.spec.id} recorded metric {m.name!r} with params {m.params} a second time: "
                             "a record holds each figure once (record it where it is computed)")
        self._recorded.add(m.key)
        self.record.metrics.append(m)
        return m

    # ---- recording
    def _declared(self, spec: MetricSpec, value: Any) -> MetricSpec:
        """`spec` if this experiment declares it (lab.contract.catalogue) and `value` is of its kind; else ValueError."""
        name = getattr(spec, "name", spec)
        if not isinstance(spec, MetricSpec) or spec not in self.spec.metrics:
            raise ValueError(f"{self.spec.id} recorded metric {name!r}, which its catalogue entry does not declare "
                             f"(lab/contract/catalogue.py; new names are declared in lab/contract/metrics.py)")
        if not spec.accepts(value):
            raise ValueError(f"{self.spec.id} recorded metric {name!r} = {value!r} ({type(value).__name__}): "
                             f"lab/contract/metrics.py declares it {spec.kind.value}")
        return spec

    def _storable(self, what: str, value: Any) -> Any:
        """`value` (numpy scalars as Python numbers), or ValueError naming `what` if results.json cannot hold it
        (a tensor, a set, an object): caught where it is recorded, so the experiment is FAILED at that line."""
        value = _plain(value)
        problem = unstorable(value, what)
        if problem is not None:
            raise ValueError(f"{self.spec.id} recorded {problem}")
        return value

    def metric(self, spec: MetricSpec, value: Any, /, **params: Any) -> Metric:
        """Record one value of a declared metric (its unit comes from the declaration), once per params."""
        value = _plain(value)
        self._declared(spec, value)
        params = self._storable(f"metric {spec.name!r}'s params", params)
        return self._once(Metric(name=spec.name, value=value, unit=spec.unit, params=params))

    def metrics(self, values: dict[MetricSpec, Any], /, **params: Any) -> None:
        """Record several declared metrics under the same params, in the order given (`metric` each)."""
        for spec, value in values.items():
            self.metric(spec, value, **params)

    def timing(self, spec: MetricSpec, samples: Sequence[float] | Sequence[Sequence[float]], /,
               **params: Any) -> Spread:
        """A timing: the median as the metric's value, its spread, and the raw samples kept.

        `samples` is a flat list, or one list per round (rotating rounds): then the spread also holds the
        95% interval of the median, a bootstrap over rounds (lab.contract.intervals)."""
        if isinstance(spec, MetricSpec) and spec.kind is not Kind.NUMBER:
            raise ValueError(f"{self.spec.id} timed metric {spec.name!r}, which lab/contract/metrics.py declares "
                             f"{spec.kind.value}")
        rounds = _rounds(samples)
        flat = [x for r in rounds for x in r] if rounds is not None else [float(x) for x in _plain(list(samples))]
        sp = spread(flat, rounds)
        self._declared(spec, sp.median)
        params = self._storable(f"metric {spec.name!r}'s params", params)
        self._once(Metric(name=spec.name, value=sp.median, unit=spec.unit, params=params, spread=sp))
        self.record.samples.append(Samples(name=spec.name, unit=spec.unit, params=params,
                                           values=[float(f"{x:.6g}") for x in flat]))
        return sp

    def speedup(self, spec: MetricSpec, baseline: Sequence[Sequence[float]], method: Sequence[Sequence[float]], /,
                paired: bool | None = None, **params: Any) -> float:
        """Record a speedup (the baseline's median over the method's, from their per-round samples) and, where the
        declaration names them, its 95% interval (lab.contract.intervals.ratio_interval: rounds paired, unless
        `paired=False`: two sides timed one after the other)."""
        base = [float(x) for r in baseline for x in r]
        mine = [float(x) for r in method for x in r]
        value = statistics.median(base) / statistics.median(mine)
        self.metric(spec, round(value, 4), **params)
        if spec.interval is not None:
            ci = intervals.ratio_interval(baseline, method, paired=paired)
            low, high = (M.REGISTRY[n] for n in spec.interval)
            self.metric(low, None if ci is None else round(ci.low, 4), **params)
            self.metric(high, None if ci is None else round(ci.high, 4), **params)
        return value

    def check(self, name: str, passed: bool, /, detail: str = "", fatal: bool = True, **params: Any) -> bool:
        params = self._storable(f"check {name!r}'s params", params)
        self.record.checks.append(Check(name=name, passed=bool(passed), detail=str(detail), params=params,
                                        fatal=fatal))
        return bool(passed)

    def note(self, key: str, value: Any) -> None:
        """Non-numeric evidence; a note the report reads back (lab.contract.notes) must have its declared shape."""
        value = self._storable(f"note {key!r}", value)
        problem = notes.check(self.spec.id, key, value)
        if problem is not None:
            raise ValueError(problem)
        self.record.notes[key] = value

    def skip(self, item: str, code: Code, message: str) -> None:
        """A part of this experiment that did not run: listed in the record, never dropped."""
        self.record.skipped.append(Skipped(item=item, code=code, message=message))
        self.progress(f"skipped {item}: {code}")

    # ---- helpers
    def kept(self, key: str) -> Any:
        """What an earlier experiment of this run kept open under `key` (lab.run.context.ModelCache.keep); None."""
        return None if self._models is None else self._models.kept.get(key)

    def keep(self, key: str, manager: contextlib.AbstractContextManager[T]) -> T | None:
        """Keep `manager` open for a later experiment of this run (None outside a run: nothing to keep it in)."""
        return None if self._models is None else self._models.keep(key, manager)

    def gpt2(self, dtype: str | None = None) -> tuple[Any, Any]:
        """(transformers model, lab Weights) of the profile's GPT-2, on the profile's device."""
        return self._models.get(dtype)

    def progress(self, message: str) -> None:
        """One line saying what the experiment does now."""
        out.line(message)

    def track(self, items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
        """`items` with progress: item n of N, elapsed, an estimate of the rest (lab.console.track)."""
        yield from out.track(items, description, total)

    def counter(self, description: str, total: int) -> contextlib.AbstractContextManager[out.Steps]:
        """Progress over `total` units of work that are not one loop: `with ctx.counter(..) as c: c.advance()`."""
        return out.counter(description, total)

    def activity(self, description: str) -> contextlib.AbstractContextManager[None]:
        """One long thing that cannot be counted (a compile, a child process): shown with its elapsed time."""
        return out.activity(description)
