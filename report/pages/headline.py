"""The README's headline tables, made from a run's results (never typed by hand).

    python -m lab headline RUN [RUN ...] [--view compile]                  # print the tables (markdown)
    python -m lab headline RUN [RUN ...] [--view compile] --write README.md   # replace that view's block
    python -m lab headline --check README.md             # exit 1 when a block differs from its runs

A block sits between `<!-- headline:begin RUN [RUN ...] -->` and `<!-- headline:end -->`; the begin marker names
the runs it was made from (run directories or results.json files, relative to the repository root), so the block
can be checked and remade from them. A begin marker may name a view, `<!-- headline:begin[compile] RUN ... -->`
(none: the default view); a README holds at most one block per view, and `--check` checks every block. Several
runs are merged in order: the first record of an experiment id wins (a reference made in two invocations).

Every view opens with the same lines: who measured it (the lab's commit and tree per run), what the host's CPU
speed did during the run and the flags the run raised about itself (report.sections.host): an overloaded host, an
unsteady warm-up, an instrument not clean, the host's warnings. Each table is made from the metrics the lab
recorded (a value the run did not record is "—").

The default view:
1. step time per method and batch, fp32, with the speedup over eager and its stored 95% interval
   (speedup_ci_low / speedup_ci_high) where the run stores one, and the rounds each batch was timed over;
2. the distance to the floor per method at batch 1, fp32 and bf16: step time, kernels per step,
   GPU-busy time and the gaps between kernels (cuda_graph_decode), the bytes a step must read
   (ceilings: the workload's, the same for every method), the byte floor (ceilings' bound_bandwidth_ms), MBU, and
   correctness: fp32 tokens equal to eager's, teacher-forced argmax agreement and largest logit error against
   fp32 eager;
3. MBU per method and batch;
4. the ceilings the bounds use.
MBU and bounds are the values the run page shows (report.sections.steps: stored_mbu, bound_of): stored, never worked
out here; a bound above a stored step of its method is "not meaningful".

The compile view (`compile`), for the compile modes and Inductor's levers:
1. every compiled method cuda_graph_decode timed (lab.contract.names.COMPILED), per dtype and batch: its setup
   (compile + capture), the frames it compiled, the frames compiled during that case's timed rounds, its step, its
   speedup over eager with the stored interval, and against compile+graph of the same case: the ratio of the two
   stored medians and a verdict from their stored 95% intervals (lab.contract.intervals.relation: overlapping is
   `same`), and its break-even steps; a setup that reused another method's compile (the note break_even_includes)
   is footnoted; the compiled methods the run skipped or failed are listed below it;
2. where the run has compile_tuning (the tuned compiles at every batch), the same table of its methods, each set
   against the compile+graph that compile_tuning timed in the same rounds;
3. compile_cost: the first call cold and warm per depth of the decode core and for the small MLP, with the
   break-even calls (or one line saying why the run has none).

Standard library only (plus lab.contract.results to read the files): the README can be remade without torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from lab.contract import intervals
from lab.contract import metrics as M
from lab.contract import query as q
from lab.contract import notes as N
from lab.contract.names import Experiment, Method, Status, is_compiled, method_rank, Param as P
from lab.contract.results import Metric, Record, load

from report.sections import host
from report.sections.steps import answer, bound_of, cases, step_rows, stored_mbu
from report.site.provenance import tree_state

BEGIN = re.compile(r"<!-- headline:begin(?:\[(?P<view>[^\]>]*)\])?(?P<runs>[^>]*)-->")
END = "<!-- headline:end -->"
DASH = "—"
DEFAULT = "default"  # the view whose begin marker names none: today's tables
COMPILE = "compile"
CGD = Experiment.CUDA_GRAPH_DECODE
TUNING = Experiment.COMPILE_TUNING
TITLES = {CGD: "Compiled methods (cuda_graph_decode)",
          TUNING: "The tuned compiles at every batch (compile_tuning), each against compile+graph timed in the same "
                  "rounds"}


class Run:
    """The records of one or more results files, merged (the first record of an id wins)."""

    def __init__(self, paths: Iterable[str | Path]) -> None:
        self.paths = [str(p) for p in paths]
        if not self.paths:
            raise ValueError("headline: name at least one run directory or results.json")
        self.records: dict[str, Record] = {}
        self.trees: list[str] = []  # per path: the lab's commit and its tree's state (report.pages.front.tree_state)
        self.flags: list[str] = []  # what the runs flagged about themselves (report.sections.host.flags), each once
        loaded = [load(path) for path in self.paths]
        for results in loaded:
            self.trees.append(tree_state(results))
            self.flags += [f for f in host.flags(results.experiments, results.manifest) if f not in self.flags]
            for rec in results.experiments:
                self.records.setdefault(rec.id, rec)
        self.results = replace(loaded[0], experiments=list(self.records.values()))  # merged, as one run

    def value(self, exp: Experiment, name: M.MetricSpec | str, **params: Any) -> Any:
        """The value of the one metric whose params include these, or None (absent, NOT_RUN; several: QueryError)."""
        found = q.maybe(self.records.get(exp), name, **params)
        return None if found is None else found.value

    def values(self, exp: Experiment, name: M.MetricSpec | str) -> list[tuple[dict[str, Any], Any]]:
        return [(dict(m.params), m.value) for m in q.all(self.records.get(exp), name)]


def _f(value: Any, fmt: str, suffix: str = "") -> str:
    return DASH if value is None else f"{value:{fmt}}{suffix}"


def _pct(value: Any) -> str:
    return DASH if value is None else f"{100 * value:.1f}%"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def _steps(run: Run, dtype: str) -> dict[tuple[str, int, bool], float]:
    return {(str(params[P.METHOD]), int(params[P.BATCH]), bool(params.get(P.READBACK))): float(value)
            for params, value in run.values(Experiment.CUDA_GRAPH_DECODE, M.STEP_MS)
            if params.get(P.DTYPE) == dtype and value is not None}


def _interval(run: Run, method: str, batch: int, dtype: str = "float32",
              exp: Experiment = CGD) -> str:
    """' [10.6, 11.7]': the stored 95% interval of the method's speedup over eager, or '' where none is stored."""
    ci = q.interval(run.records.get(exp), M.SPEEDUP_VS_EAGER, method=method, batch=batch, dtype=dtype, readback=False)
    return "" if ci is None or None in ci else f" [{ci[0]:.2f}, {ci[1]:.2f}]"

def step_table(run: Run) -> list[str]:
    steps = _steps(run, "float32")
    if not steps:
        return [f"No fp32 step times in {', '.join(run.paths)} (cuda_graph_decode did not run or recorded none)."]
    batches = sorted({b for _, b, _ in steps})
    methods = sorted({m for m, _, rb in steps if not rb}, key=method_rank)
    rows = []
    for m in methods:
        cells = [f"`{m}`"]
        for b in batches:
            ms = steps.get((m, b, False))
            sp = run.value(Experiment.CUDA_GRAPH_DECODE, M.SPEEDUP_VS_EAGER, method=m, batch=b, dtype="float32",
                           readback=False) if m != Method.EAGER else None
            cells.append(DASH if ms is None else f"{ms:.3f} ({sp:.2f}×{_interval(run, m, b)})" if sp else f"{ms:.3f}")
        rows.append(cells)
    rows += [[f"`{m}`, token read back"] + [_f(steps.get((m, b, True)), ".3f") for b in batches]
             for m in sorted({m for m, _, rb in steps if rb}, key=method_rank)]
    note = " [its 95% interval]" if run.values(Experiment.CUDA_GRAPH_DECODE, M.SPEEDUP_CI_LOW) else ""
    lines = [f"GPT-2 124M, fp32, median ms per step (speedup over eager{note}), {_config(run, batches)}:", ""]
    return lines + _table(["method"] + [f"B={b}" for b in batches], rows)


def rounds(run: Run, dtype: str = "float32", exp: Experiment = CGD) -> dict[int, int]:
    """The rounds each batch was timed over (the length of its round medians), batch -> rounds."""
    out: dict[int, int] = {}
    for p, v in run.values(exp, M.ROUND_MEDIANS_MS):
        if p.get(P.DTYPE) == dtype and isinstance(v, list):
            out[int(p[P.BATCH])] = max(out.get(int(p[P.BATCH]), 0), len(v))
    return out


def _config(run: Run, batches: list[int], exp: Experiment = CGD) -> str:
    rec = run.records.get(exp)
    cfg = rec.notes.get(N.DECODE_CONFIG.key) if rec is not None else None
    per = rounds(run, exp=exp)
    if per and len(set(per.values())) > 1:
        timed = "rounds: " + ", ".join(f"{per[b]} at B={b}" for b in batches if b in per)
    elif per:
        timed = f"{next(iter(per.values()))} rounds"
    else:
        timed = f"{cfg.get('rounds')} rounds" if isinstance(cfg, dict) else ""
    if not isinstance(cfg, dict):
        return f"{exp}" + (f", {timed}" if timed else "")
    return f"{cfg.get('steps')} steps after a {cfg.get('prompt_len')}-token prompt, {timed}"


def floor(run: Run, batch: int, dtype: str) -> tuple[float | None, float | None]:
    """(bytes a step must read, the floor they take at the measured copy bandwidth in ms) at this batch and dtype, as
    ceilings stored them: the workload's bytes, the same for every method."""
    def first(name: M.MetricSpec) -> float | None:
        return next((float(v) for p, v in run.values(Experiment.CEILINGS, name)
                     if p.get(P.BATCH) == batch and p.get(P.DTYPE) == dtype and v is not None), None)
    return first(M.BYTES_PER_STEP), first(M.BOUND_BANDWIDTH_MS)


def mbu(run: Run, method: str, batch: int, dtype: str) -> float | None:
    """The method's MBU beside its step, as the run page shows it (report.sections.steps.stored_mbu)."""
    step = run.value(Experiment.CUDA_GRAPH_DECODE, M.STEP_MS, method=method, batch=batch, dtype=dtype, readback=False)
    found = stored_mbu(run.records.values(), method, batch, dtype, step)
    return None if found is None else float(found.value)


def _bound(run: Run, method: str, batch: int, dtype: str, value: float | None) -> str:
    """A bound in ms, or 'not meaningful' where a stored step of the method is below it (steps.bound_of)."""
    return _f(value, ".3f") if bound_of(run.records.values(), method, batch, dtype).allows(value) else "not meaningful"


def floor_table(run: Run) -> list[str]:
    """Distance to the floor, per method at the first batch (B=1) of each dtype, fp32 first."""
    steps = run.values(Experiment.CUDA_GRAPH_DECODE, M.STEP_MS)
    cases = sorted({(str(p[P.DTYPE]), int(p[P.BATCH])) for p, _ in steps}, key=lambda c: (c[0] != "float32", c[1]))
    first = {d: min(b for dd, b in cases if dd == d) for d, _ in cases}
    cgd = partial(run.value, Experiment.CUDA_GRAPH_DECODE)
    rows = []
    for dtype, batch in [c for c in cases if c[1] == first[c[0]]]:
        methods = sorted({str(p[P.METHOD]) for p, _ in steps if p.get(P.DTYPE) == dtype and p.get(P.BATCH) == batch},
                         key=method_rank)
        nbytes, floor_ms = floor(run, batch, dtype)
        for m in methods:
            p = {P.METHOD: m, P.BATCH: batch, P.DTYPE: dtype}
            rows.append([
                f"`{m}`", f"{'fp32' if dtype == 'float32' else 'bf16'} B={batch}",
                _f(cgd(M.STEP_MS, readback=False, **p), ".3f"), _f(cgd(M.KERNELS_PER_STEP, **p), ".0f"),
                _bound(run, m, batch, dtype, run.value(Experiment.CEILINGS, M.BOUND_LAUNCH_MS, **p)),
                _f(cgd(M.GPU_BUSY_US, **p), ".0f"), _f(cgd(M.GAP_US, **p), ".0f"),
                _f(None if nbytes is None else nbytes / 1e6, ".0f"), _bound(run, m, batch, dtype, floor_ms),
                _pct(mbu(run, m, batch, dtype)), _pct(cgd(M.TOKEN_AGREEMENT, **p)),
                _pct(cgd(M.TEACHER_FORCED_AGREEMENT, **p)), _f(cgd(M.TEACHER_FORCED_MAX_LOGIT_ERROR, **p), ".2g")])
    if not rows:
        return ["No step times to set against the floor."]
    header = ["method", "case", "ms/step", "kernels/step", "launch bound ms", "GPU busy µs", "gaps µs", "MB read",
              "floor ms", "MBU", "free-running agreement¹", "teacher-forced agreement²", "max logit error²"]
    return (["Distance to the floor, per step at batch 1: kernels and the launch bound (kernels × the measured cost "
             "of one launch or graph node), GPU-busy time (union of the kernels' intervals, profiler) and the gaps "
             "(step time − busy), the bytes a step must read (every weight once + the attended cache, the same for "
             "every method), the floor those bytes take at the measured copy bandwidth, and MBU as the run stored it "
             "(cuda_graph_decode's from the method's own step, else ceilings'; — where neither did):", ""]
            + _table(header, rows)
            + ["", f"¹ Tokens equal to eager's of the same dtype over the whole decode; {M.FREE_RUNNING_NOTE}. "
                   "² Fed fp32 eager's token at every step, argmax and logits against fp32 eager's."])


def mbu_table(run: Run) -> list[str]:
    """MBU per method and batch, fp32, each from the method's own step time (`mbu`)."""
    steps = _steps(run, "float32")
    batches = sorted({b for _, b, rb in steps if not rb})
    methods = sorted({m for m, _, rb in steps if not rb}, key=method_rank)
    cells = {(m, b): mbu(run, m, b, "float32") for m in methods for b in batches}
    if not any(v is not None for v in cells.values()):
        return []
    rows = [[f"`{m}`"] + [_pct(cells[(m, b)]) for b in batches] for m in methods]
    return ["", "MBU per batch, fp32, as the run stored it (bytes a step must read / step time / copy bandwidth; "
                "— where it stored none):", ""] + _table(["method"] + [f"B={b}" for b in batches], rows)


def ceilings_line(run: Run) -> list[str]:
    bw = run.value(Experiment.CEILINGS, M.BANDWIDTH_GBPS, kind="copy")
    node = run.value(Experiment.CEILINGS, M.LAUNCH_US_PER_OP, mode="graph_node")
    eager = run.value(Experiment.CEILINGS, M.LAUNCH_US_PER_OP, mode=Method.EAGER)
    tf = {d: run.value(Experiment.CEILINGS, M.MATMUL_TFLOPS, dtype=d) for d in ("float32", "bfloat16")}
    if bw is None and node is None and eager is None:
        return []
    return ["", f"Ceilings measured in the same run: copy bandwidth {_f(bw, ',.0f')} GB/s, a node of a replayed "
                f"graph {_f(node, '.2f')} µs, an eager tiny op {_f(eager, '.1f')} µs, matmul "
                f"{_f(tf['float32'], '.1f')} TFLOP/s fp32 and {_f(tf['bfloat16'], '.0f')} TFLOP/s bf16."]


# ---------------------------------------------------------------------------- the compile view

def compiled_cases(run: Run, exp: Experiment = CGD) -> list[tuple[str, str, int]]:
    """(method, dtype, batch) of every compiled method `exp` timed (token not read back): method by method in
    method_rank's order, each fp32 batches ascending, then bf16."""
    found = {(str(p[P.METHOD]), str(p[P.DTYPE]), int(p[P.BATCH])) for p, v in run.values(exp, M.STEP_MS)
             if is_compiled(p.get(P.METHOD)) and not p.get(P.READBACK) and v is not None}
    return sorted(found, key=lambda c: (method_rank(c[0]), c[1] != "float32", c[1], c[2]))


def _case(dtype: str, batch: int) -> str:
    return f"{'fp32' if dtype == 'float32' else 'bf16' if dtype == 'bfloat16' else dtype} B={batch}"


def _step(run: Run, method: str, dtype: str, batch: int, exp: Experiment = CGD) -> Metric | None:
    """The method's stored median step (token not read back), its spread holding the median's 95% interval."""
    return q.maybe(run.records.get(exp), M.STEP_MS, method=method, batch=batch, dtype=dtype, readback=False)


def _median_interval(m: Metric) -> intervals.Interval | None:
    return None if m.spread is None else intervals.of(m.spread.ci_low, m.spread.ci_high)


VERDICT = {intervals.Relation.LOWER: "faster", intervals.Relation.HIGHER: "slower",
           intervals.Relation.SAME: "same", intervals.Relation.UNKNOWN: DASH}


def against(mine: Metric | None, reference: Metric | None) -> tuple[str, str]:
    """(the reference's median over the method's: >1 faster, the verdict of their stored 95% intervals: `faster` or
    `slower` where they are disjoint, `same` where they overlap, — where either is missing), the lab's one rule
    (lab.contract.intervals.relation)."""
    if mine is None or reference is None or not mine.value or reference.value is None:
        return DASH, DASH
    ratio = f"{float(reference.value) / float(mine.value):.3f}×"
    return ratio, VERDICT[intervals.relation(_median_interval(reference), _median_interval(mine))]


def reused(run: Run, method: str, dtype: str, batch: int, exp: Experiment = CGD) -> str | None:
    """Whose compile the method's setup reused at this case, as the run noted it (break_even_includes), or None."""
    rec = run.records.get(exp)
    note = rec.notes.get(N.BREAK_EVEN_INCLUDES.key_for(batch=batch, dtype=dtype)) if rec is not None else None
    return str(note[method]) if isinstance(note, dict) and method in note else None


def _pays_back(found: Metric | None) -> str:
    """A stored break-even (steps or calls): its count, "never" (stored null: no saving), or — where none is stored."""
    return DASH if found is None else "never" if found.value is None else f"{found.value:.0f}"


def _break_even(run: Run, method: str, dtype: str, batch: int, exp: Experiment = CGD) -> str:
    return _pays_back(q.maybe(run.records.get(exp), M.BREAK_EVEN_STEPS, method=method, batch=batch, dtype=dtype))


def _compiled_row(run: Run, method: str, dtype: str, batch: int, mark: str, exp: Experiment = CGD) -> list[str]:
    cgd = partial(run.value, exp, method=method, batch=batch, dtype=dtype)
    mine = _step(run, method, dtype, batch, exp)
    ratio, verdict = ((f"{1:.3f}×", "reference") if method == Method.COMPILE_GRAPH
                      else against(mine, _step(run, Method.COMPILE_GRAPH, dtype, batch, exp)))
    sp = cgd(M.SPEEDUP_VS_EAGER, readback=False)
    timing = run.value(exp, M.RECOMPILES_DURING_TIMING, batch=batch, dtype=dtype)
    return [f"`{method}`", _case(dtype, batch), _f(cgd(M.SETUP_S), ".2f") + mark, _f(cgd(M.COMPILED_FRAMES), ".0f"),
            _f(timing, ".0f"), _f(None if mine is None else mine.value, ".3f"),
            DASH if sp is None else f"{sp:.2f}×{_interval(run, method, batch, dtype, exp)}", ratio, verdict,
            _break_even(run, method, dtype, batch, exp)]


def _reuse_notes(run: Run, found: list[tuple[str, str, int]], exp: Experiment = CGD) -> list[str]:
    """One footnote line per (method, whose compile it reused), with the cases."""
    by: dict[tuple[str, str], list[str]] = {}
    for m, d, b in found:
        text = reused(run, m, d, b, exp)
        if text is not None:
            by.setdefault((m, text), []).append(_case(d, b))
    return [f"¹ `{m}` at {', '.join(cs)} reused {text}: its setup and compiled frames count only what it added (the "
            "capture), not that compile; its break-even steps pay for that compile too." for (m, text), cs in by.items()]


def _method_of(item: str) -> str | None:
    """The method a skipped item names ("max-autotune+graph", "reduce-overhead at batch 64", "x (batch=1 ...)")."""
    return next((m for m in sorted(Method, key=len, reverse=True) if item == m or item.startswith(f"{m} ")), None)


def _count(value: object) -> int:
    """A stored count param (batch, layers, trial) as an int; 0 where it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _case_of(params: dict[str, Any]) -> tuple[str, str, int] | None:
    """(method, dtype, batch) of a compiled method's check, or None (another method's, or a check of no case)."""
    method, batch = params.get(P.METHOD), params.get(P.BATCH)
    return (str(method), str(params.get(P.DTYPE)), _count(batch)) if is_compiled(method) and _count(batch) else None


def missing_methods(run: Run, found: list[tuple[str, str, int]], exp: Experiment = CGD) -> list[str]:
    """The compiled methods `exp` skipped (with the reason's code) or whose fatal check failed before they were timed,
    so none disappears from the table silently."""
    rec = run.records.get(exp)
    if rec is None:
        return []
    skipped = [f"`{m}`{s.item[len(m):]} ({s.code})" for s in rec.skipped
               if (m := _method_of(s.item)) is not None and is_compiled(m)]
    failed = []
    for c in rec.checks:
        case = _case_of(c.params) if c.fatal and not c.passed else None
        if case is not None and case not in found:
            failed.append(c.name)  # names the method and the case
    return ([""] + [f"Not run here: {', '.join(skipped)}."] if skipped else []) + (
        [""] + [f"Failed here, not timed: {'; '.join(failed)}."] if failed else [])


def compiled_table(run: Run, exp: Experiment = CGD) -> list[str]:
    """The compiled methods of `exp` per case, against its own compile+graph of the same case (timed in the same
    rounds)."""
    found = compiled_cases(run, exp)
    if not found:
        return [f"No compiled method timed by {exp} in this run."] + missing_methods(run, found, exp)
    marks = {c: "¹" if reused(run, *c, exp) is not None else "" for c in found}
    batches = sorted({b for _, d, b in found if d == "float32"})
    header = ["method", "case", "setup s", "compiled frames", "recompiles in timing", "ms/step", "× eager",
              "compile+graph ms / method's", "vs compile+graph"]
    lines = [f"{TITLES[exp]}, per case: setup (compile + capture, first calls included), the frames Dynamo compiled "
             "getting it ready, the frames compiled during that case's timed rounds (all methods; should be 0), median "
             "ms per step (token not read back), speedup over eager [its 95% interval], compile+graph's median over "
             "the method's (>1: faster) and the verdict of their 95% intervals (disjoint: faster or slower; "
             f"overlapping: same), and the steps its setup takes to pay back against eager; "
             f"{_config(run, batches, exp)}:", ""]
    rows = [_compiled_row(run, m, d, b, marks[(m, d, b)], exp) for m, d, b in found]
    notes = _reuse_notes(run, found, exp)
    return (lines + _table(header + ["break-even steps"], rows) + ([""] + notes if notes else [])
            + missing_methods(run, found, exp))


def _first_calls(rec: Record) -> dict[tuple[str, int], dict[str, list[float]]]:
    """(target, layers) -> phase -> the stored first calls, in trial order."""
    out: dict[tuple[str, int], dict[str, list[float]]] = {}
    for m in sorted(q.all(rec, M.FIRST_CALL_S), key=lambda m: _count(m.params.get(P.TRIAL))):
        if m.value is not None:
            key = (str(m.params.get(P.TARGET)), _count(m.params.get(P.N_LAYER)))
            out.setdefault(key, {}).setdefault(str(m.params.get(P.PHASE)), []).append(float(m.value))
    return out


def _seconds(values: list[float] | None) -> str:
    return DASH if not values else ", ".join(f"{v:.2f}" for v in values)


def _calls(rec: Record, target: str, phase: str) -> str:
    return _pays_back(q.maybe(rec, M.BREAK_EVEN_CALLS, target=target, phase=phase))


def _cache_probe(rec: Record, calls: dict[tuple[str, int], dict[str, list[float]]]) -> list[str]:
    """The MLP's warm cache offered another setting (compile_cost's reuse_probe), where the run stored it."""
    probe = [(p[len("cache-"):], v) for (target, _), phases in calls.items() for p, v in phases.items()
             if p.startswith("cache-")]
    cells = []
    for setting, values in probe:
        hit = q.maybe(rec, M.CACHE_REUSED, setting=setting)
        cells.append(f"{setting} {_seconds(values)} s" + ("" if hit is None else
                                                          " (reused)" if hit.value else " (not reused)"))
    return ["", f"The MLP's warm cache offered another setting, first call: {', '.join(cells)}."] if cells else []


def compile_cost_table(run: Run) -> list[str]:
    """compile_cost as it stored it: the first call cold and warm per depth of the decode core, and the small MLP."""
    rec = run.records.get(Experiment.COMPILE_COST)
    if rec is None:
        return [f"{Experiment.COMPILE_COST}: not in this run."]
    if rec.status != Status.OK:
        why = f" ({rec.reason.code}: {rec.reason.message})" if rec.reason is not None else ""
        return [f"{Experiment.COMPILE_COST}: {rec.status}{why}."]
    calls = _first_calls(rec)
    keys = sorted(calls, key=lambda k: (k[0] != "decode_core", k[0], k[1]))
    full = {t: max(n for tt, n in keys if tt == t) for t, _ in keys}  # break-even is measured at the full depth
    rows = [[f"`{t}`", str(n) if t == "decode_core" else DASH, _seconds(calls[(t, n)].get("cold")),
             _seconds(calls[(t, n)].get("warm"))] + ([_calls(rec, t, "cold"), _calls(rec, t, "warm")]
                                                     if n == full[t] else [DASH, DASH]) for t, n in keys]
    skipped = [f"{s.item} ({s.code})" for s in rec.skipped]
    not_run = ["", f"Not run here: {', '.join(skipped)}."] if skipped else []
    if not rows:
        return [f"{Experiment.COMPILE_COST}: OK, but it stored no first call."] + not_run
    steady = q.all(rec, M.STEADY_MS)
    timed = f" ({steady[0].spread.n} timed calls of each side per process)" if steady and steady[0].spread else ""
    return (["Compile time against depth (compile_cost): the first call of the compiled decode core (its first N "
             "layers) and of the small MLP, each in a fresh process, s: cold (an empty Inductor cache; one figure per "
             "trial) and warm (the cache the cold call filled); break-even: calls until the compile pays back against "
             f"eager, from the saving measured in that phase's process{timed}, at the full depth:", ""]
            + _table(["target", "layers", "cold first call s", "warm first call s", "break-even calls cold",
                      "break-even calls warm"], rows) + _cache_probe(rec, calls) + not_run)


def default_view(run: Run) -> list[str]:
    """Today's tables: the fastest correct method per case, step times, the floor, MBU, the ceilings."""
    found = cases(step_rows(run.results))  # the run page's answer, the same sentence: one value per figure
    parts = ["Fastest correct method per batch and dtype (`correct` as stored; else tokens equal to eager's):", ""] + [
        f"- {answer(run.results, c)}" for c in found] + [""] if found else []
    return parts + step_table(run) + [""] + floor_table(run) + mbu_table(run) + ceilings_line(run)


def compile_view(run: Run) -> list[str]:
    """The compile modes and Inductor's levers against compile+graph, the tuned compiles at every batch where the run
    has compile_tuning, then compile time against depth."""
    tuning = compiled_table(run, TUNING) + [""] if TUNING in run.records else []
    return compiled_table(run) + [""] + tuning + compile_cost_table(run)


VIEWS: dict[str, Callable[[Run], list[str]]] = {DEFAULT: default_view, COMPILE: compile_view}


def known_view(view: str) -> str:
    """The view, or ValueError naming the views there are."""
    if view not in VIEWS:
        raise ValueError(f"unknown headline view {view!r} (views: {', '.join(VIEWS)})")
    return view


def flag(view: str) -> str:
    """The command-line words that name a view: none for the default."""
    return "" if view == DEFAULT else f" --view {view}"


def label(view: str) -> str:
    """How messages name a view's block: `headline` (the default) or `headline[compile]`."""
    return "headline" if view == DEFAULT else f"headline[{view}]"


def marker(view: str, runs: list[str]) -> str:
    return f"<!-- headline:begin{'' if view == DEFAULT else f'[{view}]'}{''.join(f' {r}' for r in runs)} -->"


def preamble(run: Run, names: list[str], view: str = DEFAULT) -> list[str]:
    """What every view opens with: how it was made, who measured it, the host's sentence and the run's flags."""
    parts = [f"<!-- made by `python -m lab headline {' '.join(names)}{flag(view)} --write README.md`: do not edit "
             "by hand -->", ""]
    parts += [f"Measured by {'; '.join(f'`{n}`: {t}' for n, t in zip(names, run.trees))}.", ""]
    parts += [f"Host: {host.sentence(run.records.values())}.", ""]
    parts += [f"⚑ {raised}" + ("  " if i < len(run.flags) - 1 else "") for i, raised in enumerate(run.flags)]
    return parts + ([""] if run.flags else [])


def render(paths: Iterable[str | Path], shown: list[str] | None = None, view: str = DEFAULT) -> str:
    """A headline block's content (without the markers); `shown`: the run names to print (default: paths)."""
    tables = VIEWS[known_view(view)]
    run = Run(paths)
    parts = preamble(run, shown or run.paths, view) + tables(run)
    return "\n".join(parts).rstrip() + "\n"


# ---------------------------------------------------------------------------- the blocks of a README

@dataclass(frozen=True)
class Block:
    """One headline block of a README: its view, the runs its begin marker names, where it lies."""

    view: str
    runs: list[str]
    begin: int  # where the begin marker starts
    start: int  # where the content starts (after the begin marker)
    end: int  # where the end marker starts


def blocks(text: str, where: str = "README.md") -> list[Block]:
    """Every headline block of `text`, in order; ValueError for an unknown view, a view's second block, a begin
    marker without its end, or one inside another block."""
    found: list[Block] = []
    after = 0
    for begin in BEGIN.finditer(text):
        if begin.start() < after:
            raise ValueError(f"{where}: a headline:begin marker inside the block before it (no `{END}` between)")
        view = begin.group("view")
        if view is not None and (view == DEFAULT or view not in VIEWS):
            raise ValueError(f"{where}: unknown headline view [{view}] (views: {', '.join(v for v in VIEWS if v != DEFAULT)}"
                             "; the default view's marker names none)")
        view, runs = view or DEFAULT, begin.group("runs").split()
        if any(r.startswith("[") for r in runs):
            raise ValueError(f"{where}: write the view right after the marker's name, `headline:begin[{COMPILE}] RUN`")
        end = text.find(END, begin.end())
        if end < 0:
            raise ValueError(f"{where}: `{END}` missing after the {label(view)}:begin marker")
        if any(b.view == view for b in found):
            raise ValueError(f"{where}: a second {label(view)} block (at most one per view)")
        found.append(Block(view, runs, begin.start(), begin.end(), end))
        after = end + len(END)
    return found


def block(text: str, where: str = "README.md", view: str = DEFAULT) -> Block:
    """The block of `view`; ValueError, saying how to add its empty marker pair, where `text` has none."""
    found = next((b for b in blocks(text, where) if b.view == known_view(view)), None)
    if found is None:
        raise ValueError(f"{where} has no {label(view)} block: add the empty pair `{marker(view, [])}` and `{END}`, "
                         f"each on a line of its own, where its tables go, then write it again")
    return found


def find_block(text: str, where: str = "README.md", view: str = DEFAULT) -> tuple[int, int, list[str]]:
    """(start of the content, end of the content, the runs named in the begin marker) of the view's block."""
    found = block(text, where, view)
    return found.start, found.end, found.runs


def write(readme: Path, paths: list[str], root: Path | None = None, view: str = DEFAULT) -> bool:
    """Replace the block of `view` in `readme` by the tables of `paths` (named in the marker as given; read from
    `root`, default the README's folder, when relative); True if the file changed. The other blocks stay as they
    are; a README without a block of that view is refused (ValueError)."""
    text = readme.read_text()
    found = block(text, str(readme), view)
    root = root or readme.parent
    made = marker(view, paths) + "\n" + render([root / p for p in paths], shown=paths, view=view)
    new = text[:found.begin] + made + text[found.end:]
    if new != text:
        readme.write_text(new)
    return new != text


@dataclass(frozen=True)
class Checked:
    """One block against the tables of the runs its marker names."""

    view: str
    same: bool
    runs: str  # the runs its marker names, as written


def _check(text: str, found: Block, where: str, root: Path) -> Checked:
    if not found.runs:
        raise ValueError(f"{where}: the {label(found.view)}:begin marker names no run (write it: `python -m lab "
                         f"headline RUN{flag(found.view)} --write {where}`)")
    made = render([root / r for r in found.runs], shown=found.runs, view=found.view)
    return Checked(found.view, text[found.start:found.end] == "\n" + made, " ".join(found.runs))


def check_all(readme: Path, root: Path | None = None) -> list[Checked]:
    """Every block of `readme` against the tables of the runs its marker names, in the README's order."""
    text = readme.read_text()
    found = blocks(text, str(readme))
    if not found:
        raise ValueError(f"{readme}: no `<!-- headline:begin RUN ... -->` marker")
    return [_check(text, b, str(readme), root or readme.parent) for b in found]


def check(readme: Path, root: Path | None = None, view: str = DEFAULT) -> tuple[bool, str]:
    """(whether the block of `view` equals the tables of the runs its marker names, those runs)."""
    text = readme.read_text()
    found = _check(text, block(text, str(readme), view), str(readme), root or readme.parent)
    return found.same, found.runs
