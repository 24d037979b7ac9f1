"""selection: per workload, which of eager / compile / graph / compile+graph won, by how much, and why.

It measures nothing: it reads this run's earlier records (`ctx.results.experiments`) of the
experiments whose catalogue entry names a `workload` — the lead's `cuda_graph_decode` and the
overhead experiments — and fills the chapter's selection rule in with this host's numbers. A case is one
set of parameters (batch, n_ops, residency, ...); its candidates
are the `step_ms` medians of each method that passed its correctness rule (the record's `correct`,
lab.step.correctness: the fastest *correct* method wins). A win whose 95% interval overlaps eager's
(lab.contract.intervals; the interquartile ranges for a run that stored no intervals) is reported as a
tie with eager: this run cannot tell them apart. A workload absent from the run, NOT_RUN or
FAILED is listed as not measured with its record's reason; methods a record skipped are named in
the evidence.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from lab.contract import intervals
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.catalogue import CATALOGUE
from lab.contract.names import BASELINES, Family, family, Param as P, Status
from lab.contract.options import NoOptions
from lab.contract.reasons import Code
from lab.run.context import Context

Options = NoOptions  # no knobs: it reads the run's records

# workload id -> what it is: every experiment whose catalogue entry names its workload
WORKLOADS: dict[str, str] = {spec.id: spec.workload for spec in CATALOGUE if spec.workload}

WHY: dict[str, str] = {
    Family.EAGER: "nothing worth removing: the overheads compile and replay attack are small here (or "
                  "compile/graph added work)",
    Family.COMPILE: "the computation changed: fewer kernels and fewer bytes (fusion), lower host cost per call",
    Family.GRAPH: "host launch work dominated and the kernels were already fine: replay removes the launches",
    Family.COMPILE_GRAPH: "both: compile cut kernels and bytes, replay then launched what was left at once",
}


@dataclass
class Candidate:
    method: str
    median: float
    q1: float
    q3: float
    noisy: bool
    ci_low: float | None = None
    ci_high: float | None = None
    params: dict[str, Any] | None = None

    @property
    def family(self) -> str:
        return family(self.method)


def case_key(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if k != P.METHOD) or "-"


def _incorrect(record: Any) -> set[str]:
    """The (params without readback) of every case whose `correct` metric is false."""
    return {case_key({k: v for k, v in m.params.items() if k != P.READBACK}) + "|" + str(m.params.get(P.METHOD))
            for m in record.metrics if m.name == M.CORRECT.name and m.value is False}


def candidates_by_case(record: Any) -> dict[str, list[Candidate]]:
    """step_ms metrics of a record grouped by their parameters other than `method`; methods that failed their
    correctness rule are left out (the fastest correct method wins)."""
    out: dict[str, list[Candidate]] = defaultdict(list)
    wrong = _incorrect(record)
    for m in record.metrics:
        if m.name != M.STEP_MS.name or "method" not in m.params or m.value is None:
            continue
        if m.params.get(P.READBACK) is True:  # the decode step with the token read back: a separate question
            continue
        key = case_key({k: v for k, v in m.params.items() if k != P.READBACK}) + "|" + str(m.params[P.METHOD])
        if key in wrong:
            continue
        sp, value = m.spread, float(m.value)
        spread = (sp.q1, sp.q3, bool(sp.noisy), sp.ci_low, sp.ci_high) if sp else (value, value, False, None, None)
        out[case_key(m.params)].append(Candidate(str(m.params[P.METHOD]), value, *spread, dict(m.params)))
    return out


def _interval(c: Candidate) -> intervals.Interval | None:
    return intervals.of(c.ci_low, c.ci_high)


def inside_eager(winner: Candidate, eager: Candidate) -> bool:
    """Whether the winner cannot be told from eager: 95% intervals overlap (else, without intervals, the IQRs)."""
    rel = intervals.relation(_interval(eager), _interval(winner))
    if rel is not intervals.Relation.UNKNOWN:
        return rel is intervals.Relation.SAME
    return winner.q3 >= eager.q1


@dataclass
class Choice:
    winner: Candidate
    eager: Candidate | None
    runner_up: Candidate | None
    tie_with_eager: bool

    @property
    def speedup_vs_eager(self) -> float | None:
        return self.eager.median / self.winner.median if self.eager else None

    @property
    def margin(self) -> float | None:
        return self.runner_up.median / self.winner.median if self.runner_up else None


def choose(cands: list[Candidate]) -> Choice:
    ranked = sorted(cands, key=lambda c: c.median)
    eager = next((c for c in cands if c.method in BASELINES), None)
    winner = ranked[0]
    tie = eager is not None and winner is not eager and inside_eager(winner, eager)
    if tie:
        winner = eager
        ranked = [eager] + [c for c in ranked if c is not eager]
    return Choice(winner, eager, ranked[1] if len(ranked) > 1 else None, tie)


def evidence(choice: Choice, cands: list[Candidate], skipped: list[str]) -> str:
    """One line: every candidate's median, then who won, by how much, and the rule's reading of it."""
    parts = [f"{c.method} {c.median:.4g} ms{' (noisy)' if c.noisy else ''}" for c in sorted(cands, key=lambda c: c.median)]
    text = "; ".join(parts)
    w, other = choice.winner, choice.runner_up
    if choice.tie_with_eager and other is not None:
        text += (f" — {other.method} was {choice.eager.median / other.median:.2f}× eager but inside eager's spread: "
                 f"eager is enough ({WHY[Family.EAGER]})")
    elif w.family == Family.EAGER and other is not None:
        text += f" — eager wins, {other.method} is {other.median / w.median:.2f}× slower: {WHY[Family.EAGER]}"
    elif choice.speedup_vs_eager is not None:
        text += f" — {w.method} ({w.family}) {choice.speedup_vs_eager:.2f}× eager: {WHY.get(w.family, '')}"
        if other is not None and other.family != Family.EAGER:
            text += f"; {choice.margin:.2f}× ahead of {other.method}"
    if skipped:
        text += f"; not measured: {', '.join(skipped)}"
    return text


def _stored_interval(record: Any, choice: Choice) -> tuple[float | None, float | None]:
    """The interval the workload's record stored with the winner's speedup (the winner is eager: [1, 1])."""
    if choice.winner is choice.eager:
        return 1.0, 1.0
    params = choice.winner.params or {}
    found: dict[str, float | None] = {}
    for m in record.metrics:
        if m.name in (M.SPEEDUP_CI_LOW.name, M.SPEEDUP_CI_HIGH.name) and \
                all(m.params.get(k) == v for k, v in params.items() if k in m.params) and \
                m.params.get(P.METHOD, params.get(P.METHOD)) == params.get(P.METHOD):
            found[m.name] = m.value
    return found.get(M.SPEEDUP_CI_LOW.name), found.get(M.SPEEDUP_CI_HIGH.name)


def run(ctx: Context[Options]) -> None:
    records = {r.id: r for r in ctx.results.experiments}
    chosen = 0
    for wid, what in WORKLOADS.items():
        rec = records.get(wid)
        if rec is None:
            ctx.skip(wid, Code.NOT_MEASURED, f"{what}: not in this run; run `python -m lab run --only {wid},selection`")
            continue
        if rec.status != Status.OK:
            code = rec.reason.code if rec.reason else Code.NOT_MEASURED  # a stored run's FAILED without a reason
            msg = rec.reason.message if rec.reason else rec.status
            ctx.skip(wid, code, f"{what}: {rec.status}: {msg}")
            continue
        cases = candidates_by_case(rec)
        if not cases:
            ctx.skip(wid, Code.NO_TIMINGS, f"{what}: the record has no step_ms timings to compare")
            continue
        skipped = [f"{s.item} ({s.code})" for s in rec.skipped]
        for case, cands in cases.items():
            choice = choose(cands)
            ctx.metric(M.WINNER, choice.winner.method, workload=wid, case=case)
            ctx.metric(M.WINNER_FAMILY, choice.winner.family, workload=wid, case=case)
            if choice.speedup_vs_eager is not None:
                ctx.metric(M.SPEEDUP_VS_EAGER, choice.speedup_vs_eager, workload=wid, case=case)
                low, high = _stored_interval(rec, choice)
                ctx.metrics({M.SPEEDUP_CI_LOW: low, M.SPEEDUP_CI_HIGH: high}, workload=wid, case=case)
            if choice.margin is not None:
                ctx.metric(M.MARGIN_VS_RUNNER_UP, choice.margin, workload=wid, case=case)
            ctx.metric(M.TIE_WITH_EAGER, choice.tie_with_eager, workload=wid, case=case)
            ctx.note(N.EVIDENCE.key_for(wid, case), evidence(choice, cands, skipped))
            chosen += 1
    ctx.metric(M.CASES, chosen)
    ctx.progress(f"{chosen} cases chosen; {len(ctx.record.skipped)} workload(s) not measured")
