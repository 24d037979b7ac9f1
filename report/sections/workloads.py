"""Sections for the smaller workloads: Amdahl's prediction beside the launch-aware one and the measured speedup,
and fusion against its bytes ceiling. Stored figures only."""

from __future__ import annotations

from lab.contract import query as q
from lab.contract import metrics as M
from lab.contract import units
from lab.contract.names import Experiment, Method, Param as P, Status
from lab.contract.results import Metric, Results

from report.sections.section import Section, shown, why_absent
from report.draw.tables import Cell, Table, fmt, pivot, value_cell

def amdahl(results: Results) -> Section:
    rec = q.experiment(results, Experiment.AMDAHL)
    workloads = sorted({str(m.params.get(P.WORKLOAD)) for m in q.all(rec, M.PREDICTED_SPEEDUP)})
    table = Table(columns=["workload", "fusible fraction f", "k (fusion speedup)", "kernels eager → compiled", "cost per launch",
                           "eager kernel time", "Amdahl (fusion only)", "launch-aware", "measured",
                           "measured / Amdahl", "measured / launch-aware"], id="amdahl-table",
                  caption="Predicted and measured compile speedup (amdahl)")
    lines = []
    for w in workloads:
        def get(spec: M.MetricSpec, **extra: object) -> Metric | None:
            return q.maybe(rec, spec, workload=w, **extra)

        ke, kc = get(M.KERNELS, method=Method.EAGER), get(M.KERNELS, method=Method.COMPILE_DEFAULT)
        launch, kt = get(M.LAUNCH_US_PER_OP), get(M.KERNEL_TIME_PER_STEP_US, method=Method.EAGER)
        amd, lau, meas = get(M.PREDICTED_SPEEDUP), get(M.PREDICTED_SPEEDUP_LAUNCH), get(M.MEASURED_SPEEDUP)
        table.rows.append([
            Cell(w), value_cell(get(M.FUSIBLE_FRACTION), ""), value_cell(get(M.K), units.X),
            Cell(f"{fmt(ke.value) if ke else '—'} → {fmt(kc.value) if kc else '—'}", cls="num"),
            *[value_cell(m) for m in (launch, kt, amd, lau, meas, get(M.MEASURED_OVER_PREDICTED),
                                      get(M.MEASURED_OVER_PREDICTED_LAUNCH))]])
        if amd is not None:
            text = f"{w}: Amdahl predicts {fmt(amd.value)}×"
            text += f", the launch-aware model {fmt(lau.value)}×" if lau else ", no launch-aware prediction"
            text += f"; measured {fmt(meas.value)}×." if meas else "; not measured in this run."
            lines.append(text)
    lines.append("Amdahl counts kernel time only: 1 / ((1 − f) + f / k). The launch-aware model adds each kernel's "
                 "launch at this run's measured cost per launch: (eager kernels × cost + kernel time) / (compiled "
                 "kernels × cost + kernel time × ((1 − f) + f / k)).")
    return shown(Experiment.AMDAHL, "Amdahl and the launch term: predicted against measured", "\n".join(lines),
                 [table], why_absent(results, Experiment.AMDAHL))


def fusion(results: Results) -> Section | None:
    rec = q.experiment(results, Experiment.FUSION)
    if rec is None or rec.status != Status.OK:
        return None
    table = pivot(rec, [P.N_OPS, P.RESIDENCY], [M.SPEEDUP, M.CEILING_X],
                  caption="Compiled (fused) chain over eager, against the bytes ceiling")
    return shown(Experiment.FUSION, "Fusion", "", [table], "fusion ran but recorded no speedup metrics.")
