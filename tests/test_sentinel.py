"""lab.experiments.sentinel and sentinel_end: the fresh-process baseline and the run's own eager judged by it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.names import Method
from lab.contract.profiles import TINY
from lab.contract.results import Metric, Record
from lab.experiments import sentinel, sentinel_end
from lab.experiments.common import paired as pairing
from lab.host import cpuplace
from lab.step.model import resolve_weights


@pytest.mark.slow
def test_the_child_warms_up_until_steady_and_returns_rounds_the_warm_up_and_the_launch_cost():
    out = sentinel.child(dataclasses.asdict(TINY), resolve_weights(TINY, "random"), "cpu", prompt_len=4, max_len=32,
                         steps=6, rounds=3, min_s=0.2, window=2, agree=0.5, max_rounds=6, retakes=1,
                         budget_s=30.0, methods=(Method.EAGER,))
    assert list(out["rounds"]) == [Method.EAGER] and len(out["rounds"][Method.EAGER]) == 3
    assert all(len(r) == 6 for r in out["rounds"][Method.EAGER])
    warm = out["warmup"]
    assert 2 <= warm["rounds"] <= 12 and warm["retakes"] in (0, 1) and min(out["launch_us_eager"]) > 0
    assert not N.WARMUP.problem(warm) and len(warm["round_medians_ms"][Method.EAGER]) == 3
    where = out["placement"]  # where the child ran, and the CPU each eager round (warm-up and kept) ended on
    assert not N.PLACEMENT.problem(where) and len(where["round_cpus"]) == warm["rounds"] + 3 * (1 + warm["retakes"])
    if where["allowed"] is not None:
        assert set(c for c in where["round_cpus"] if c is not None) <= set(where["allowed"])


class _Process:
    """A fake child on a fake clock: each eager round takes half a second at the step time `eager_ms(n)` of its
    n-th call (graph replay is steady and takes no time)."""

    def __init__(self, eager_ms) -> None:
        self.eager_ms, self.t, self.n = eager_ms, 0.0, 0

    def now(self) -> float:
        return self.t

    def calls(self) -> dict:
        def eager() -> list[float]:
            self.n += 1
            self.t += 0.5
            return [self.eager_ms(self.n)] * 4

        return {Method.EAGER: eager, Method.GRAPH: lambda: [0.7] * 4}


RULE = {"rounds": 5, "min_s": 10.0, "window": 3, "agree": 0.05, "max_rounds": 100, "retakes": 2}


def test_a_steady_process_is_taken_once_after_min_s_of_warm_up():
    p = _Process(lambda n: 2.7 + 0.01 * (n % 3))
    take = sentinel.steady_take(p.calls(), now=p.now, **RULE)
    assert take.retakes == 0 and not take.drifting and len(take.warmups) == 1
    assert take.warmups[0].rounds == 20 and take.warmups[0].seconds >= 10.0 and p.n == 20 + 5
    assert {m: len(r) for m, r in take.rounds.items()} == {Method.EAGER: 5, Method.GRAPH: 5}
    note = take.summary()
    assert not N.WARMUP.problem(note) and note["rounds"] == 20 and note["retakes"] == 0 and note["warmup_steady"]


def test_kept_rounds_that_drop_off_a_slow_plateau_are_discarded_and_taken_again():
    """A slow plateau that outlasts the warm-up's 10 s and ends inside the kept rounds (5.9 ms, then 3.4 ms): the
    take drifted, so it is discarded; the second warm-up and take are on the settled level."""
    p = _Process(lambda n: 5.9 if n <= 23 else 3.4)
    take = sentinel.steady_take(p.calls(), now=p.now, **RULE)
    assert take.retakes == 1 and not take.drifting
    assert take.warmups[0].medians[-1] == 5.9 and take.warmups[1].medians[-1] == 3.4
    assert take.medians()[Method.EAGER] == [3.4] * 5
    assert take.summary()["rounds"] == 20 + 20 and take.summary()["retakes"] == 1


def test_a_process_still_improving_after_every_retake_keeps_its_last_take_and_says_so():
    p = _Process(lambda n: 6.0 * 0.98 ** n)  # 2% faster every round: consecutive rounds agree, the take drifts
    take = sentinel.steady_take(p.calls(), now=p.now, **RULE)
    assert take.retakes == 2 and take.drifting == (Method.EAGER,) and len(take.warmups) == 3
    checks: list[tuple] = []
    ctx = SimpleNamespace(check=lambda name, ok, **kw: checks.append((name, ok, kw)) or ok)
    assert not sentinel.steadiness(ctx, take.summary(), "start", 0.05)
    name, ok, kw = checks[0]
    assert name == "the sentinel's rounds were steady (start)" and not kw["fatal"] and kw["when"] == "start"
    first, last = take.medians()[Method.EAGER][0], take.medians()[Method.EAGER][-1]
    assert f"{first:.4g}" in kw["detail"] and f"{last:.4g}" in kw["detail"] and "2 retake(s)" in kw["detail"]


def test_a_host_that_keeps_moving_is_reported_when_the_budget_runs_out_not_waited_out():
    """An H200 host's eager rounds moved between 2.9 and 6.4 ms for 65 s of warm-up: the warm-ups and retakes stop at
    the budget, the take is kept, the note says the budget ran out with the host index as the reason, and the check
    says the host moved (a host warning, not a failed check)."""
    from lab.measure.hostspeed import HostIndex

    p = _Process(lambda n: 3.0 if n % 2 else 6.0)  # no two consecutive rounds agree
    index = HostIndex(now=p.now, work=lambda: setattr(p, "t", p.t + (0.02 if (p.n // 10) % 2 else 0.01)))
    take = sentinel.steady_take(p.calls(), now=p.now, index=index, **(RULE | {"budget_s": 25.0}))
    assert take.out_of_budget and not take.warmups[-1].steady and len(take.warmups) == 1
    assert 25.0 <= p.t <= 25.0 + 0.5 + 5 * 0.5 + 2  # the round under way, then the kept rounds: nothing more
    note = take.summary()
    assert not N.WARMUP.problem(note) and note["out_of_budget"] and note["budget_s"] == 25.0
    assert note["host_moved"] == pytest.approx(2.0)
    checks: list[tuple] = []
    warnings: list[str] = []
    ctx = SimpleNamespace(check=lambda name, ok, **kw: checks.append((name, ok, kw)) or ok, record=Record("s", "", "OK"),
                          note=lambda key, value: warnings.extend(value[-1:]), progress=lambda text: None)
    assert sentinel.steadiness(ctx, note, "start", 0.05)
    assert "budget of 25 s ran out" in checks[0][2]["detail"] and "the host moved" in checks[0][2]["detail"]
    assert "index moved 2.00x" in warnings[0]
    checks.clear()
    sentinel.steadiness(ctx, take.summary() | {"host_moved": None}, "start", 0.05)  # no index (an older run)
    assert "the host moved" not in checks[0][2]["detail"]


def test_no_retake_starts_once_the_budget_is_spent():
    p = _Process(lambda n: 6.0 * 0.98 ** n)  # still improving: would retake twice without a budget
    take = sentinel.steady_take(p.calls(), now=p.now, **(RULE | {"budget_s": 12.0}))
    assert take.retakes == 0 and take.drifting == (Method.EAGER,) and take.out_of_budget
    roomy = _Process(lambda n: 2.7 + 0.01 * (n % 3))  # a steady host inside the budget is unaffected by it
    calm = sentinel.steady_take(roomy.calls(), now=roomy.now, **(RULE | {"budget_s": 25.0}))
    assert not calm.out_of_budget and calm.warmups[0].steady and calm.warmups[0].rounds == 20


def test_measure_records_the_warm_up_and_the_steadiness_check(monkeypatch):
    from lab.contract import profiles
    from lab.contract.catalogue import BY_ID
    from lab.run.childproc import ChildResult
    from lab.run.context import Context

    p = _Process(lambda n: 2.7)
    take = sentinel.steady_take(p.calls(), now=p.now, **RULE)
    where = {"bind": "none", "allowed": [0, 1], "numa_nodes": {"0": [0, 1]}, "gpu_node": 0, "ran_on": 1,
             "round_cpus": [1, 1, 0]}
    sent: dict = {}

    def child(target, kwargs, timeout_s):
        sent.update(kwargs)
        return ChildResult(target, 0, None, False, 12.0, {"rounds": take.rounds, "warmup": take.summary(),
                                                          "launch_us_eager": [4.0, 4.5], "placement": where}, "", "")

    monkeypatch.setattr(sentinel, "run_child", child)
    ctx = Context(BY_ID["sentinel"], profiles.get("smoke"), None, Record("sentinel", "", "OK"),
                  SimpleNamespace(experiments=[], manifest=None), None)
    sentinel.measure(ctx, "start")
    o = sentinel.Options()
    assert {k: sent[k] for k in ("min_s", "window", "agree", "max_rounds", "retakes")} == \
        {"min_s": o.warmup_s, "window": o.window, "agree": o.agree, "max_rounds": o.max_rounds, "retakes": o.retakes}
    assert ctx.record.notes[N.WARMUP.key_for(when="start")] == take.summary()
    assert ctx.record.notes[N.PLACEMENT.key_for(when="start")] == where
    assert [(c.name, c.passed, c.fatal) for c in ctx.record.checks] == [
        ("the sentinel's rounds were steady (start)", True, False)]
    assert "20 warm-up rounds in 10.0 s, 0 retake(s)" in ctx.record.checks[0].detail


def _rec(id_: str, metrics: list[Metric]) -> Record:
    return Record(id=id_, title=id_, status="OK", metrics=metrics)


def test_sentinel_end_keeps_the_drift_and_the_in_run_ratio_as_data_and_warns_of_the_host(monkeypatch):
    """The start and end sentinels minutes apart measure the host as much as the lab: data and a host warning with the
    index at both ends, never a failed check."""
    start = _rec("sentinel", [Metric(M.SENTINEL_STEP_MS.name, 2.0, "ms", {"method": m, "batch": 1, "dtype": "float32",
                                                                          "when": "start"}) for m in sentinel.METHODS])
    start.notes[N.WARMUP.key_for(when="start")] = {"index_ms": {"warmup": [9.0], Method.EAGER: [1.0, 1.0, 1.1]}}
    decode = _rec("cuda_graph_decode", [Metric(M.STEP_MS.name, ms, "ms", {"method": m, "batch": 1, "dtype": "float32",
                                                                          "readback": False})
                                        for m, ms in ((Method.EAGER, 2.6), (Method.GRAPH, 2.05))])
    recorded: list[tuple] = []
    checks: list[tuple] = []
    record = _rec("sentinel_end", [Metric(M.SENTINEL_STEP_MS.name, ms, "ms", {"method": m, "batch": 1,
                                                                             "dtype": "float32", "when": "end"})
                                   for m, ms in ((Method.EAGER, 3.0), (Method.GRAPH, 2.02))])
    record.notes[N.WARMUP.key_for(when="end")] = {"index_ms": {Method.EAGER: [1.5, 1.5]}}

    def note(key, value):
        record.notes[key] = value

    ctx = SimpleNamespace(results=SimpleNamespace(experiments=[start, decode]), record=record, note=note,
                          metric=lambda spec, value, **p: recorded.append((spec.name, value, p["method"])),
                          check=lambda name, ok, **kw: checks.append((name, ok)), progress=lambda text: None)
    sentinel_end.drift(ctx)
    assert (M.IN_RUN_OVER_SENTINEL.name, 1.3, Method.EAGER) in recorded  # 2.6 / 2.0
    assert (M.SENTINEL_DRIFT.name, 1.5, Method.EAGER) in recorded and (M.SENTINEL_DRIFT.name, 1.01, Method.GRAPH) in \
        recorded
    assert checks == []
    [warning] = record.notes[N.HOST_WARNINGS.key]
    assert "eager step moved 1.50x" in warning and "1 ms at the start, 1.5 ms at the end (1.50x)" in warning


class _Child:
    """A fake paired child: its eager rounds take `ms` at the host's current slowness."""

    def __init__(self, host: list[float], ms: float) -> None:
        self.host, self.ms, self.calls = host, ms, 0

    def __call__(self) -> dict:
        self.calls += 1
        slow = self.host[0]
        return {"samples": [self.ms * slow] * 4, "index": [20 * slow, 20 * slow],
                "host": {"cpu": 3, "wait_ms": 0.5, "others_ms": 0.0, "steal_ms": None}}


def _ctx_end():
    from lab.contract import profiles
    from lab.contract.catalogue import BY_ID
    from lab.run.context import Context

    return Context(BY_ID["sentinel_end"], profiles.get("smoke"), None, Record("sentinel_end", "", "OK"),
                   SimpleNamespace(experiments=[], manifest=None), None)


def _clock_index(host: list[float]):
    from lab.measure.hostspeed import HostIndex

    t = [0.0]
    def work() -> None:
        t[0] += 0.02 * host[0]
    return HostIndex(now=lambda: t[0], work=work)


@pytest.mark.parametrize("own_ms, clean", [(3.0, True), (3.9, False)])
def test_the_cycles_rotate_and_judge_the_instrument_not_the_host(own_ms: float, clean: bool):
    """Two fresh children (3.0 and 3.09 ms: two processes differ by themselves) and the run's own eager take turns;
    the host slows by 2x half-way: every side slows alike, so the paired ratio is the run's own doing alone, and
    the children's own ratio is the instrument's resolution."""
    import math

    host = [1.0]
    order: list[str] = []
    children = {"fresh": _Child(host, 3.0), "fresh-2": _Child(host, 3.09)}

    def turn(side: str) -> None:
        host[0] = 2.0 if len(order) >= 12 else 1.0  # the second half of the cycles on a host twice as slow
        order.append(side)

    def ask(side: str):
        turn(side)
        return children[side]()

    def own() -> list[float]:
        turn("in-run")
        return [own_ms * host[0]] * 4

    fresh = {side: (lambda side=side: ask(side)) for side in children}
    paired = pairing.alternate(own, fresh, cycles=8, index=_clock_index(host))
    assert order[:6] == ["fresh", "in-run", "fresh-2", "in-run", "fresh-2", "fresh"] and len(order) == 24
    assert len(paired.in_run) == len(paired.fresh) == len(paired.rounds["fresh-2"]) == 8
    assert paired.index.per_round("fresh")[-1] == 40.0 and paired.index.per_round("in-run")[-1] == 40.0
    ctx = _ctx_end()
    assert sentinel_end.record_paired(ctx, paired) is clean
    rec = ctx.record
    params = {"method": Method.EAGER, "batch": 1, "dtype": "float32"}
    assert rec.metric(M.IN_RUN_OVER_FRESH.name, **params).value == pytest.approx(own_ms / math.sqrt(3.0 * 3.09),
                                                                                  rel=1e-3)
    assert rec.metric(M.IN_RUN_OVER_FRESH_CI_LOW.name, **params).value is not None
    assert rec.metric(M.FRESH_OVER_FRESH.name, **params).value == pytest.approx(3.0 / 3.09, rel=1e-3)
    [check] = rec.checks
    assert check.passed is clean and not check.fatal and "8 cycles" in check.detail
    assert "the host index moved 2.00x" in check.detail and "two fresh processes differed 0.971x" in check.detail
    assert "the index's own in-run over fresh 1.00x per cycle" in check.detail
    assert "not pinned" in check.detail and "waited for the CPU" in check.detail
    assert N.check("sentinel_end", N.PAIRED_ROUNDS.key, rec.notes[N.PAIRED_ROUNDS.key]) is None
    assert [r["wait_ms"] for r in rec.notes[N.PAIRED_ROUNDS.key]["rounds"]["fresh"]] == [0.5] * 8
    assert N.check("sentinel_end", N.HOST_INDEX.key_for(shape="paired"), rec.notes["host_index.paired"]) is None


@pytest.mark.parametrize("end_ms, clean", [(3.2, True), (3.7, False)])
def test_the_verdict_is_the_change_since_the_start_against_the_same_processes(end_ms: float, clean: bool):
    """The run's process is 5% slower than the fresh ones already at the start (its own luck, its threads): at the
    end 3.2 ms against the same two is no change, and the check passes where the end's ratio alone (1.05x) would be
    at the edge; 3.7 ms is the run's doing (1.16x) and fails. The start's own ratio is said in the detail."""
    children = {"fresh": _Child([1.0], 3.0), "fresh-2": _Child([1.0], 3.09)}

    def cycles(own_ms: float) -> pairing.Paired:
        return pairing.alternate(lambda: [own_ms] * 4, {side: c for side, c in children.items()}, cycles=8)

    start, end = cycles(3.2), cycles(end_ms)
    ctx = _ctx_end()
    assert sentinel_end.record_paired(ctx, end, pairing.Paired.from_note(start.note())) is clean
    p = {"method": Method.EAGER, "batch": 1, "dtype": "float32"}
    assert ctx.record.metric(M.IN_RUN_CHANGE.name, **p).value == pytest.approx(end_ms / 3.2, rel=1e-3)
    [check] = ctx.record.checks
    assert check.name.startswith("in-run eager within 5% of where it started") and check.passed is clean
    assert "at the start the run's process was 1.051x the same fresh processes" in check.detail


@pytest.mark.parametrize("second_end_ms, warned", [(3.09, False), (2.85, True)])
def test_the_fresh_processes_own_change_is_the_verdicts_resolution_and_the_host_s(second_end_ms: float, warned: bool):
    """Two fresh processes that did nothing moved apart over the run (the second 3.09 -> 2.85 ms while the first
    stayed at 3.0: 1.084x): `fresh_change` says how far, in the verdict's detail, and beyond 5% it is a host warning;
    the verdict itself is unchanged (the run's process, 3.2 ms at both ends, did not move against their mean)."""
    def cycles(second_ms: float) -> pairing.Paired:
        children = {"fresh": _Child([1.0], 3.0), "fresh-2": _Child([1.0], second_ms)}
        return pairing.alternate(lambda: [3.2] * 4, {side: c for side, c in children.items()}, cycles=8)

    start, end = cycles(3.09), cycles(second_end_ms)
    ctx = _ctx_end()
    sentinel_end.record_paired(ctx, end, pairing.Paired.from_note(start.note()))
    p = {"method": Method.EAGER, "batch": 1, "dtype": "float32"}
    fresh = (3.0 / second_end_ms) / (3.0 / 3.09)
    assert ctx.record.metric(M.FRESH_CHANGE.name, **p).value == pytest.approx(fresh, rel=1e-3)
    assert ctx.record.metric(M.FRESH_CHANGE_CI_HIGH.name, **p).value >= ctx.record.metric(
        M.FRESH_CHANGE_CI_LOW.name, **p).value
    [check] = ctx.record.checks
    assert f"the two fresh processes' own change {fresh:.3f}x" in check.detail
    warnings = ctx.record.notes.get(N.HOST_WARNINGS.key, [])
    assert bool([w for w in warnings if "idle through the run" in w]) is warned


def test_a_warm_up_that_ran_out_while_the_host_moved_is_a_host_warning_not_a_failed_check():
    ctx = _ctx_end()
    warm = {"rounds": 40, "seconds": 25.0, "retakes": 2, "warmup_steady": False, "warmup_medians_ms": [3.0, 6.0],
            "round_medians_ms": {Method.EAGER: [6.0, 5.0, 3.0]}, "drifting": [Method.EAGER], "budget_s": 25.0,
            "out_of_budget": True, "index_ms": {"warmup": [10.0, 20.0], Method.EAGER: [20.0, 15.0, 10.0]},
            "host_moved": 2.0}
    assert sentinel.steadiness(ctx, warm, "end", 0.05)
    assert "the host-speed index moved 2.00x (p95/p5) meanwhile: the host moved, not the lab" in \
        ctx.record.checks[0].detail
    assert "did not settle" in ctx.record.notes[N.HOST_WARNINGS.key][0]
    still = _ctx_end()  # the same drift on a host whose index stayed put: the lab's process, a failed check
    assert not sentinel.steadiness(still, warm | {"host_moved": 1.02}, "end", 0.05)
    assert N.HOST_WARNINGS.key not in still.record.notes


def test_a_take_notes_the_host_index_of_every_round():
    from lab.measure.hostspeed import HostIndex

    p = _Process(lambda n: 2.7)
    index = HostIndex(now=p.now, work=lambda: None)
    take = sentinel.steady_take(p.calls(), now=p.now, index=index, **RULE)
    summary = take.summary()
    assert len(summary["index_ms"][f"warmup.{Method.EAGER}"]) == take.warmups[0].rounds
    assert len(summary["index_ms"][Method.EAGER]) == RULE["rounds"] and summary["host_moved"] is None
    assert not N.WARMUP.problem(summary)


@pytest.mark.slow
def test_the_real_child_takes_turns_with_the_parents_eager_on_the_cpu(tiny):
    """The sentinel's child, started by lab.run.turns, warms up, says it is ready with its take, then answers each
    request with one eager round between two fresh index samples; the parent's own eager alternates with it."""
    import torch

    from lab.run import turns
    from lab.step import methods as stepmethods
    from lab.measure.timing import HostClock

    kwargs = {"model": dataclasses.asdict(TINY), "provenance": resolve_weights(TINY, "random"), "device": "cpu",
              "prompt_len": 4, "max_len": 32, "steps": 6, "rounds": 3, "min_s": 0.2, "window": 2, "agree": 0.5,
              "max_rounds": 6, "retakes": 1, "budget_s": 30.0, "methods": [Method.EAGER]}
    _, w = tiny
    prompt = torch.randint(0, TINY.vocab_size, (1, 4), generator=torch.Generator().manual_seed(1001))
    mine = stepmethods.build(Method.EAGER, w, prompt, 32, warmup=1)
    with turns.Turns(sentinel.CHILD, kwargs, timeout_s=120) as child:
        ready = child.wait()["ready"]
        assert not N.WARMUP.problem(ready["warmup"]) and ready["warmup"]["index_ms"][f"warmup.{Method.EAGER}"]

        cpu = cpuplace.thread_cpu()
        with cpuplace.pinned(cpu) as on:
            pinned = child.ask({"pin": on})["pinned"] if on is not None else None
            paired = pairing.alternate(lambda: mine.decode(6, HostClock(), readback=False),
                                       {"fresh": lambda: pairing.ask_round(child)}, cycles=3)
            if on is not None:  # freed again, it warms up and takes again as at the run's end
                assert child.ask({"pin": None})["pinned"] is None
            again = child.ask({"take": True})["ready"]
            assert not N.WARMUP.problem(again["warmup"]) and len(again["rounds"][Method.EAGER]) == 3
            assert len(pairing.ask_round(child)["samples"]) == 6  # and serves rounds after it
        res = child.finish()
    assert res.ok and len(paired.fresh) == len(paired.in_run) == 3 and all(len(r) == 6 for r in paired.fresh)
    if on is not None:  # Linux: the child took the parent's CPU, and each side's rounds say where they ran
        assert pinned == on and {r["cpu"] for side in paired.host.values() for r in side} == {on}
        assert all(r["wait_ms"] >= 0 and r["others_ms"] >= 0 for side in paired.host.values() for r in side)
    assert all(x > 0 for x in paired.index.per_round("fresh") + paired.index.per_round("in-run"))
    assert paired.ratio()[0] > 0


def test_without_posix_pipes_the_end_sentinel_runs_alone_and_says_why(monkeypatch):
    from lab.run import turns

    ctx = _ctx_end()
    seen: list[str] = []
    monkeypatch.setattr(turns, "supported", lambda: False)
    monkeypatch.setattr(sentinel, "measure", lambda c, when: seen.append(when))
    monkeypatch.setattr(sentinel, "measure_paired", lambda c, when: pytest.fail("no pipes to pair through"))
    sentinel_end.run(ctx)
    assert seen == ["end"] and [s.item for s in ctx.record.skipped] == ["in_run_over_fresh"]


@pytest.mark.slow
def test_the_sentinels_pair_the_runs_own_eager_with_the_same_fresh_children_at_both_ends_on_the_cpu(monkeypatch):
    """The experiments' own path on the smoke profile (eager only: graph replay needs CUDA). The start sentinel's
    two children take, take turns with the run's own eager, and are kept open by the run; the end sentinel asks the
    same two to take again and take turns again, and judges the run's change; the run's end closes them."""
    from lab.contract import profiles
    from lab.contract.catalogue import BY_ID
    from lab.run.context import Context, ModelCache

    profile = profiles.get("smoke")
    kwargs = sentinel.child_kwargs
    monkeypatch.setattr(sentinel, "child_kwargs", lambda ctx: kwargs(ctx) | {"methods": [Method.EAGER], "min_s": 0.2,
                                                                             "budget_s": 10.0, "max_rounds": 6})
    monkeypatch.setattr(sentinel_end, "drift", lambda ctx: None)  # (graph replay's figures: CUDA only)
    models = ModelCache(profile, {"source": "random"})
    results = SimpleNamespace(experiments=[], manifest=None)
    options = sentinel.Options(steps=8, rounds=2, pairs=4, timeout_s=120)

    def context(eid: str) -> Context:
        return Context(BY_ID[eid], profile, None, Record(eid, "", "OK"), results, models, options=options)

    start = context("sentinel")
    out = sentinel.measure_paired(start, "start")
    assert out is not None and len(out.in_run) == len(out.fresh) == 4
    pairing.record(start, out)
    results.experiments.append(start.record)
    kept = [models.kept[key] for key in sentinel.KEPT]
    assert all(c.proc.poll() is None for c in kept)  # alive, waiting for the end
    end = context("sentinel_end")
    sentinel_end.run(end)
    p = {"method": Method.EAGER, "batch": 1, "dtype": "float32"}
    for rec in (start.record, end.record):
        assert rec.metric(M.IN_RUN_OVER_FRESH.name, **p).value > 0
        assert rec.metric(M.FRESH_OVER_FRESH.name, **p).value > 0  # the second, gated child took its turns too
        assert set(rec.notes[N.PAIRED_ROUNDS.key]["samples_ms"]) == {"fresh", "in-run", "fresh-2"}
        assert N.check(rec.id, N.PAIRED_ROUNDS.key, rec.notes[N.PAIRED_ROUNDS.key]) is None
    rec = end.record
    change = rec.metric(M.IN_RUN_CHANGE.name, **p).value
    ratio = rec.metric(M.IN_RUN_OVER_FRESH.name, **p).value / start.record.metric(M.IN_RUN_OVER_FRESH.name, **p).value
    assert change == pytest.approx(ratio, rel=2e-3, abs=1e-4)  # stored to 4 decimals; a loaded CPU can make it tiny
    [verdict] = [c for c in rec.checks if "where it started" in c.name]
    assert "at the start the run's process was" in verdict.detail
    assert rec.metric(M.SENTINEL_STEP_MS.name, method=Method.EAGER, when="end").value > 0
    assert N.WARMUP.key_for(when="end") in rec.notes and "host_index.paired" in rec.notes
    assert all(c.proc.poll() is not None for c in kept)  # the end finished them
    models.close()
    assert models.kept == {}


def test_the_fresh_process_tells_eager_that_follows_the_host_from_graph_replay_that_does_not(monkeypatch):
    """A host whose speed moves 2x during the warm-up (a slow stretch every seventh round): eager's rounds take as
    much longer as the index's loop, graph replay's do not. The sentinel's warm-up and kept rounds, each indexed,
    give eager an elasticity near 1 and graph replay one near 0, each with an interval that excludes the other."""
    from lab.contract import profiles
    from lab.contract.catalogue import BY_ID
    from lab.measure.hostspeed import HostIndex
    from lab.run.childproc import ChildResult
    from lab.run.context import Context

    t, turn = [0.0], [0]
    slow = lambda: 2.0 if (turn[0] // 2) % 7 in (3, 4) else 1.0  # noqa: E731 - the host's slowness this turn

    def work() -> None:
        t[0] += 0.001 * slow()

    def eager() -> list[float]:
        turn[0] += 1
        t[0] += 0.5
        return [3.0 * slow() * (1 + 0.01 * (turn[0] % 3))] * 4

    def graph() -> list[float]:
        turn[0] += 1
        t[0] += 0.1
        return [0.7 * (1 + 0.001 * (turn[0] % 5))] * 4

    take = sentinel.steady_take({Method.EAGER: eager, Method.GRAPH: graph}, now=lambda: t[0],
                                index=HostIndex(now=lambda: t[0], work=work), **RULE | {"agree": 1.0})
    note = take.summary()
    assert set(note["warmup_rounds_ms"]) == {Method.EAGER, Method.GRAPH} and not N.WARMUP.problem(note)
    points = sentinel.host_points(note)
    assert {m: len(p[0]) for m, p in points.items()} == {m: take.warmups[0].rounds - 1 + 5 for m in points}
    monkeypatch.setattr(sentinel, "run_child", lambda target, kwargs, timeout_s: ChildResult(
        target, 0, None, False, 1.0, {"rounds": take.rounds, "warmup": note, "launch_us_eager": [4.0]}, "", ""))
    ctx = Context(BY_ID["sentinel"], profiles.get("smoke"), None, Record("sentinel", "", "OK"),
                  SimpleNamespace(experiments=[], manifest=None), None)
    sentinel.measure(ctx, "start")
    got = {}
    for method in (Method.EAGER, Method.GRAPH):
        p = {"method": method, "batch": 1, "dtype": "float32", "when": "start"}
        got[method] = [ctx.record.metric(name, **p).value for name in (M.HOST_SENSITIVITY.name,
                                                                        M.HOST_SENSITIVITY_CI_LOW.name,
                                                                        M.HOST_SENSITIVITY_CI_HIGH.name)]
    assert got[Method.EAGER][0] == pytest.approx(1.0, abs=0.05) and got[Method.EAGER][1] > 0.5
    assert abs(got[Method.GRAPH][0]) < 0.05 and got[Method.GRAPH][2] < 0.5


def test_an_older_warm_up_note_gives_no_points():
    assert sentinel.host_points({"round_medians_ms": {Method.EAGER: [3.0]}, "index_ms": {"warmup": [1.0]}}) == {}


class _FakeTurns:
    """A paired fresh process that answers at once: its take, its pins (kept in `pins`), its rounds; `second_dies`:
    the second one (started with `gate`) ends before it answers."""

    made: list = []
    pins: list = []
    second_dies = False
    ready: dict = {}

    def __init__(self, target, kwargs, timeout_s):
        self.second = bool(kwargs.get("gate"))
        _FakeTurns.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def wait(self):
        return {"ready": self.ready}

    def ask(self, request):
        from lab.run import turns

        if self.second and self.second_dies:
            raise turns.ChildGone("the child ended without answering")
        if "pin" in request:
            _FakeTurns.pins.append(request["pin"])
            return {"pinned": request["pin"]}
        return {"samples": [3.0] * 4, "index": [1.0, 1.0], "host": {}}

    def finish(self):
        from lab.run.childproc import ChildResult

        return ChildResult("t", 1, None, False, 1.0, None, "", "boom")


def _fake_children(monkeypatch, second_dies: bool = False) -> type[_FakeTurns]:
    """The paired fresh processes and the run's own eager replaced by fakes that answer 3 ms a step."""
    from lab.run import turns

    p = _Process(lambda n: 2.7)
    take = sentinel.steady_take(p.calls(), now=p.now, **RULE)
    ready = {"rounds": take.rounds, "warmup": take.summary(), "launch_us_eager": [4.0]}
    for name, value in (("made", []), ("pins", []), ("second_dies", second_dies), ("ready", ready)):
        monkeypatch.setattr(_FakeTurns, name, value)
    monkeypatch.setattr(turns, "Turns", _FakeTurns)
    monkeypatch.setattr(pairing, "own_eager", lambda ctx, steps: (lambda: [3.0] * 4))
    monkeypatch.setattr(sentinel, "child_kwargs", lambda ctx: {"steps": 64})
    monkeypatch.setattr(sentinel, "steps_of", lambda ctx: 64)
    return _FakeTurns


def test_a_second_fresh_process_that_dies_leaves_the_verdict_on_one_and_says_so(monkeypatch):
    """The second fresh process ends before it warms up: the paired rounds go on with the first alone, and a
    non-fatal check says the verdict has no resolution; nothing is lost."""
    fake = _fake_children(monkeypatch, second_dies=True)
    ctx = _ctx_end()
    paired = sentinel.measure_paired(ctx, "end")
    assert paired is not None and set(paired.rounds) == {"fresh", "in-run"} and len(paired.in_run) == 24
    assert paired.resolution() is None and len(fake.made) == 2
    failed = [(c.name, c.fatal) for c in ctx.record.checks if not c.passed]
    assert failed == [("the second fresh process warmed up (end)", False)]
    assert sentinel_end.record_paired(ctx, paired) is True


@pytest.mark.skipif(cpuplace.allowed() is None, reason="no CPU affinity on this platform")
@pytest.mark.parametrize("same", [True, False])
def test_the_end_takes_turns_on_the_start_s_cpu_where_it_may(monkeypatch, same):
    """At the end every side is pinned to the start's CPU (the verdict divides the end by the start: the same core
    at both ends); a CPU this thread may not use falls back to the thread's own. The affinity is restored after."""
    fake = _fake_children(monkeypatch)
    before = cpuplace.allowed()
    start_cpu = max(before) if same else 10**6
    paired = sentinel.measure_paired(_ctx_end(), "end", start_cpu)
    assert paired is not None and cpuplace.allowed() == before
    on = paired.pinned["in-run"]
    assert on in before and fake.pins == [on, on] and paired.pinned == {"in-run": on, "fresh": on, "fresh-2": on}
    assert (on == start_cpu) is same
