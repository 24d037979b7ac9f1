"""The README's headline tables, made from a run's results (never typed by hand).

    python -m lab headline RUN [RUN ...]                 # print the tables (markdown)
    python -m lab headline RUN [RUN ...] --write README.md   # replace the block between the markers
    python -m lab headline --check README.md             # exit 1 when the block differs from its runs

The block sits between `<!-- headline:begin RUN [RUN ...] -->` and `<!-- headline:end -->`; the
begin marker names the runs it was made from (run directories or results.json files, relative to
the repository root), so the block can be checked and remade from them. Several runs are merged
in order: the first record of an experiment id wins (a reference made in two invocations).

Tables, each from the metrics the lab recorded (a value the run did not record is "—"):
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
Above them, what the host's CPU speed did during the run and the flags the run raised about itself (report.sections.host):
an overloaded host, an unsteady warm-up, an instrument not clean, the host's warnings.

Standard library only (plus lab.contract.results to read the files): the README can be remade without torch.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Iterable

from lab.contract import metrics as M
from lab.contract import query as q
from lab.contract import notes as N
from lab.contract.names import Experiment, Method, method_rank, Param as P
from lab.contract.results import Record, load

from report.sections import host
from report.sections.steps import answer, bound_of, cases, step_rows, stored_mbu
from report.site.provenance import tree_state

BEGIN = re.compile(r"<!-- headline:begin(?P<runs>[^>]*)-->")
END = "<!-- headline:end -->"
DASH = "—"


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


def _interval(run: Run, method: str, batch: int, dtype: str = "float32") -> str:
    """' [10.6, 11.7]': the stored 95% interval of the method's speedup over eager, or '' where none is stored."""
    ci = q.interval(run.records.get(Experiment.CUDA_GRAPH_DECODE), M.SPEEDUP_VS_EAGER, method=method, batch=batch,
                    dtype=dtype, readback=False)
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


def rounds(run: Run, dtype: str = "float32") -> dict[int, int]:
    """The rounds each batch was timed over (the length of its round medians), batch -> rounds."""
    out: dict[int, int] = {}
    for p, v in run.values(Experiment.CUDA_GRAPH_DECODE, M.ROUND_MEDIANS_MS):
        if p.get(P.DTYPE) == dtype and isinstance(v, list):
            out[int(p[P.BATCH])] = max(out.get(int(p[P.BATCH]), 0), len(v))
    return out


def _config(run: Run, batches: list[int]) -> str:
    rec = run.records.get(Experiment.CUDA_GRAPH_DECODE)
    cfg = rec.notes.get(N.DECODE_CONFIG.key) if rec is not None else None
    per = rounds(run)
    if per and len(set(per.values())) > 1:
        timed = "rounds: " + ", ".join(f"{per[b]} at B={b}" for b in batches if b in per)
    elif per:
        timed = f"{next(iter(per.values()))} rounds"
    else:
        timed = f"{cfg.get('rounds')} rounds" if isinstance(cfg, dict) else ""
    if not isinstance(cfg, dict):
        return f"{Experiment.CUDA_GRAPH_DECODE}" + (f", {timed}" if timed else "")
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


def render(paths: Iterable[str | Path], shown: list[str] | None = None) -> str:
    """The headline block's content (without the markers); `shown`: the run names to print (default: paths)."""
    run = Run(paths)
    names = " ".join(shown or run.paths)
    parts = [f"<!-- made by `python -m lab headline {names} --write README.md`: do not edit by hand -->", ""]
    parts += [f"Measured by {'; '.join(f'`{n}`: {t}' for n, t in zip(shown or run.paths, run.trees))}.", ""]
    parts += [f"Host: {host.sentence(run.records.values())}.", ""]
    parts += [f"⚑ {flag}" + ("  " if i < len(run.flags) - 1 else "") for i, flag in enumerate(run.flags)]
    parts += [""] if run.flags else []
    found = cases(step_rows(run.results))  # the run page's answer, the same sentence: one value per figure
    parts += ["Fastest correct method per batch and dtype (`correct` as stored; else tokens equal to eager's):", ""] + [
        f"- {answer(run.results, c)}" for c in found] + [""] if found else []
    parts += step_table(run) + [""] + floor_table(run) + mbu_table(run) + ceilings_line(run)
    return "\n".join(parts).rstrip() + "\n"


def find_block(text: str, where: str = "README.md") -> tuple[int, int, list[str]]:
    """(start of the content, end of the content, the runs named in the begin marker)."""
    begin = BEGIN.search(text)
    if begin is None:
        raise ValueError(f"{where}: no `<!-- headline:begin RUN ... -->` marker")
    end = text.find(END, begin.end())
    if end < 0:
        raise ValueError(f"{where}: `{END}` missing after the headline:begin marker")
    return begin.end(), end, begin.group("runs").split()


def write(readme: Path, paths: list[str], root: Path | None = None) -> bool:
    """Replace the block of `readme` by the tables of `paths` (named in the marker as given; read from
    `root`, default the README's folder, when relative); True if the file changed."""
    text = readme.read_text()
    start, end, _ = find_block(text, str(readme))
    root = root or readme.parent
    begin = text.rfind("<!--", 0, start)
    block = f"<!-- headline:begin {' '.join(paths)} -->\n" + render([root / p for p in paths], shown=paths)
    new = text[:begin] + block + text[end:]
    if new != text:
        readme.write_text(new)
    return new != text


def check(readme: Path, root: Path | None = None) -> tuple[bool, str]:
    """(whether the block of `readme` equals the tables of the runs its marker names, those runs)."""
    text = readme.read_text()
    start, end, runs = find_block(text, str(readme))
    if not runs:
        raise ValueError(f"{readme}: the headline:begin marker names no run")
    root = root or readme.parent
    return text[start:end] == "\n" + render([root / r for r in runs], shown=runs), " ".join(runs)
