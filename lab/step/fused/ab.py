"""A/B-time variants of the fused step on a GPU, in one process, in rotating rounds:

    python -m lab.step.fused.ab --size gpt2-1.5B --dtype bfloat16 table "ln_fc.BN=4;ln_fc.num_warps=8"
    python -m lab.step.fused.ab --size gpt2-124M --dtype float32 table "ln_qkv:HEAD_MAJOR=1" "all:EVICT=0"
    python -m lab.step.fused.ab --size gpt2-1.5B --dtype bfloat16 table "ln_qkv:maxnreg=96"

What docs/fused-step.md item 14's and 15's ratios come from, and item 28's bounds. Each ARM is the tuner's repeatable plan of `fused-pdl-prefetch`
(`lab.step.fused.tune`: random weights of the size's shapes, a state mid-decode at position POSITION, the gemv path
forced, PDL where the device has it) with changes, separated by ";":

- `KERNEL.FIELD=V`: a field of that kernel's config (BN, BK, BB, num_warps for a GEMV kernel; BS for the attention),
  as the tuner varies them;
- `KERNEL:SWITCH=V`: a compile-time switch bound on that kernel's launches (HEAD_MAJOR, EVICT, KV_L2, KV_AT_ONCE, ...:
  any constexpr of its kernel; lab.step.fused.step.with_switches), as a per-shape table in lab.step.fused.configs
  would bind it; `all:SWITCH=V` binds it on every launch whose kernel has it; `KERNEL:maxnreg=R`, Triton's launch
  option, caps a thread's registers (ptxas spills beyond the cap) so that more of the kernel's programs fit an SM;
- `plan:OPTION=V`: how the plan is built (`PLAN_OPTIONS`, each a keyword of `step.prepare`): `plan:RESIDUAL_BF16=1`
  the residual stream in bf16 (`residual=torch.bfloat16`; bf16 weights only), not fp32: half the bytes every program
  reads after its wait (6-8% slower on an H100: docs/fused-step.md item 25); `plan:ARGMAX_FOLD=1` the argmax taken by lm_head's
  last program, no argmax launch (`argmax_fold=True`; `=0` leaves it a launch where configs.ARGMAX_FOLD binds it);
  `plan:FOLD=0` the attention a launch of its own, not folded into ln_qkv (`fold=False`: five kernels a layer, as
  plain `fused` runs; with a bound on `attention` or `ln_qkv`, what each costs the chain apart);
- `KERNEL:LEAVE_OUT=N` (N not 0: a stage of the kernel's work left out, lab.step.fused.stages) and a kernel's `FOLD`
  switch (`"ln_qkv:FOLD=0"`: no count-in and no attention; the fold is the plan's, `plan:FOLD`) are timing only:
  their arms are bounds, as below, and printed as such;
- `KERNEL:ABSENT=1`, `KERNEL:IDLE=1`: bounds, not steps (their values are not the step's): every launch of that
  kernel left out of the plan, or made the idle kernel with its grid and warps (lab.step.fused.anatomy.without,
  idled). What a fold of that kernel's work into a neighbour could save at most (no fold takes the step below
  ABSENT's time: a fold still reads the kernel's weights), and how much of the kernel's place on the chain is its launch and
  hand-over (IDLE) rather than its work: `"proj:ABSENT=1" "proj:IDLE=1" "proj:ABSENT=1;fc2:ABSENT=1"`. Under the rows
  each bound is priced (`beyond_bytes`): what it saved against the arm of its own plan without the bound
  (`plan:FOLD=0` for `plan:FOLD=0;attention:ABSENT=1`; the first arm where the A/B has no such arm), µs a step; an
  ABSENT arm's kernels' bytes from memory (lab.step.fused.traffic) at this card's copy rate, measured before the
  rounds, and what it saved beyond them; an IDLE arm's launches against the ABSENT arm of the same kernels (IDLE -
  ABSENT: what they cost the chain with no work to do);
- `table`: no change (the plan as the tables bind it).

Every arm is captured once and warmed, then all arms are timed in ROUNDS rounds, each in a rotated order
(`triton.testing.do_bench_cudagraph`, the median of REP_MS of replays), so that a drift of the device over the run
falls on every arm alike. Prints each arm's median with its 95% interval (a bootstrap over rounds,
lab.contract.intervals), its ratio to the first arm's with the ratio's interval (paired: the same rounds drawn for
both, since round r of every arm ran side by side), and whether the arm is faster, slower or the same as the first
by the lab's one rule (the interval against 1); and one JSON line (`AB {...}`) with every round kept.

`--processes N` runs the whole A/B N times, each in a fresh process (one after another; this one only starts them and
touches no GPU), and judges the arms over all of them: each arm's ratio in each process, and the ratio of the pooled
medians with an interval that draws processes, then rounds within them (lab.contract.intervals.
clustered_ratio_interval). Each process's own record is printed as it ends (`AB-PROCESS {...}`), the pooled one last
(`AB {...}`). What it shows and what it does not (H200, 2026-12-05): three processes on one machine gave
the same ratio to the third decimal (0.996x, 0.996x, 0.996x), so a process's rounds are not where a half-percent
effect hides; but an arm 0.995x [0.994, 0.997] the table's on one machine was, bound as the table, 1.004x the old
table's on two others. A change of that size is shown only where it holds on another machine: run the A/B again in a
call that starts one.

**The first arm again (A/A).** Unless `--no-control`, the A/B times one more arm, `FIRST (again)`: a second plan of
the first arm, the same configs and switches, built like every other arm (each arm is its own plan, its own
workspace, from the same weights). On an H100 at GPT-2 124M bf16 (2026-12-06, card 5e5bef9c) the plan built first
took 0.170-0.172 ms and the one built second 0.176-0.178, whichever arm each was (eight processes: 1.034x, 0.967x,
... in turn; on another card the first built was the slower, by 1%; docs/fused-step.md item 24): where a plan's buffers land
moves a step that short by as much as a config does (which buffers, the residual `x` and the MLP's row `h`:
`lab.step.fused.place`, docs/fused-step.md item 25). So an arm is called faster or slower only where its ratio's
interval lies beyond both 1 and the A/A's interval (`against_control`); within them it is the same. The arms are
built in an order rotated by the process (`--processes`: the i-th process starts at the i-th arm), so that no arm
keeps the same place among the allocations from process to process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from lab.contract import intervals as I
from lab.measure.timing import flat, rotating_rounds
from lab.step.fused import configs as C
from lab.step.fused import traffic as T


@dataclass(frozen=True)
class Arm:
    """One variant of the step: config fields and launch switches by kernel."""

    label: str
    configs: dict[str, dict[str, int]] = field(default_factory=dict)  # kernel -> config field -> value
    switches: dict[str, dict[str, int]] = field(default_factory=dict)  # kernel (or "all") -> switch -> value
    options: dict[str, int] = field(default_factory=dict)  # how the plan is built (PLAN_OPTIONS) -> value
    bounds: dict[str, str] = field(default_factory=dict)  # kernel -> ABSENT or IDLE (BOUNDS): a bound, not a step

    @property
    def timing_only(self) -> list[str]:
        """The arm's switches that time a part of the step, not a step (`TIMING_SWITCHES`), as `KERNEL:SWITCH=V`."""
        return [f"{kernel}:{key}={value}" for kernel, switches in self.switches.items()
                for key, value in switches.items() if timing_switch(key, value)]

    @property
    def bound(self) -> bool:
        """Whether the arm is a bound (a kernel left out or idled, or a switch that is timing only): its values are not
        the step's."""
        return bool(self.bounds) or bool(self.timing_only)


BOUNDS = ("ABSENT", "IDLE")  # an arm's `KERNEL:ABSENT=1` / `KERNEL:IDLE=1`: a bound (lab.step.fused.anatomy)
# switches with which a kernel no longer does the step's work (their arms are bounds, whatever else they change):
# LEAVE_OUT other than 0 leaves a stage of the kernel's work out (lab.step.fused.stages); a kernel's FOLD is its plan's
# (`plan:FOLD` changes the fold): bound apart from the plan, the attention is done by no launch or by two
TIMING_SWITCHES: dict[str, Callable[[int], bool]] = {"LEAVE_OUT": lambda v: v != 0, "FOLD": lambda v: True}


def timing_switch(key: str, value: int) -> bool:
    """Whether a switch bound to `value` is timing only (TIMING_SWITCHES)."""
    return key in TIMING_SWITCHES and TIMING_SWITCHES[key](value)


PLAN = "plan"  # an arm's `plan:OPTION=V`: how its plan is built, not a kernel's switch
# an arm's plan options: OPTION -> step.prepare's keyword arguments for its value (RESIDUAL_BF16=0 is the table's fp32)
PLAN_OPTIONS: dict[str, Callable[[int], dict[str, Any]]] = {
    "RESIDUAL_BF16": lambda v: {"residual": torch.bfloat16} if v else {},
    "ARGMAX_FOLD": lambda v: {"argmax_fold": bool(v)},
    "FOLD": lambda v: {"fold": bool(v)},
}


def parse_arm(text: str) -> Arm:
    """An ARM of the command line (the module docstring); ValueError naming what is wrong."""
    arm = Arm(text)
    if text.strip() == "table":
        return arm
    for item in (x.strip() for x in text.split(";")):
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"arm {text!r}: {item!r} is not KERNEL.FIELD=INTEGER or KERNEL:SWITCH=INTEGER")
        if ":" in name and name.split(":", 1)[0].strip() == PLAN:
            key = name.split(":", 1)[1].strip()
            if key not in PLAN_OPTIONS:
                raise ValueError(f"arm {text!r}: {item!r}: no plan option {key!r} (the plan's: {', '.join(PLAN_OPTIONS)})")
            arm.options[key] = int(value)
            continue
        if ":" in name:
            kernel, key = (x.strip() for x in name.split(":", 1))
            if key in BOUNDS:
                if kernel not in C.KERNEL_NAMES:
                    raise ValueError(f"arm {text!r}: {item!r}: {key} names one of the step's kernels "
                                     f"({', '.join(C.KERNEL_NAMES)}), not {kernel!r}")
                if int(value) != 1:
                    raise ValueError(f"arm {text!r}: {item!r}: {key} takes 1 (the table is the arm `table`)")
                if arm.bounds.get(kernel, key) != key:
                    raise ValueError(f"arm {text!r}: {kernel} is both {arm.bounds[kernel]} and {key}")
                arm.bounds[kernel] = key
                continue
            table = arm.switches
        elif "." in name:
            kernel, key = (x.strip() for x in name.split(".", 1))
            table = arm.configs
            if kernel == C.ALL_KERNELS:
                raise ValueError(f"arm {text!r}: {item!r}: a config field names one kernel, not {C.ALL_KERNELS!r}")
        else:
            raise ValueError(f"arm {text!r}: {item!r} names no kernel (KERNEL.FIELD or KERNEL:SWITCH)")
        if kernel != C.ALL_KERNELS and kernel not in C.KERNEL_NAMES:
            raise ValueError(f"arm {text!r}: no kernel {kernel!r} (the step's: {', '.join(C.KERNEL_NAMES)})")
        table.setdefault(kernel, {})[key] = int(value)
    return arm


CONTROL = " (again)"  # the A/A arm's label: the first arm's, then this


def with_control(arms: list[Arm]) -> list[Arm]:
    """The arms and, last, a second of the first (its label + CONTROL): the A/A that shows what a second plan of the
    same configs moves by itself."""
    first = arms[0]
    return [*arms, replace(first, label=first.label + CONTROL)]


def build_order(labels: list[str], shift: int) -> list[str]:
    """The order in which the arms' plans are built (allocated): rotated by `shift` (the process's index)."""
    k = shift % len(labels) if labels else 0
    return labels[k:] + labels[:k]


def bind(base: Any, arm: Arm, prepare: Callable[..., Any]) -> Any:
    """The arm's plan, its own (its own workspace, even for `table`): `base`'s configs with the arm's fields
    (`prepare(overrides=...)`), then its switches bound on the launches of their kernels, then its bounds. ValueError
    for a field the kernel's config has not, or a switch no launch takes."""
    return bounded(unbounded(base, arm, prepare), arm)


def unbounded(base: Any, arm: Arm, prepare: Callable[..., Any]) -> Any:
    """`bind`'s plan before the arm's bounds: its configs, plan options and switches (the step whose kernels a bound
    leaves out or idles, and whose bytes price the bound)."""
    overrides = dict(base.configs)
    for kernel, fields in arm.configs.items():
        cfg = base.configs.get(kernel)
        unknown = sorted(set(fields) - set(getattr(cfg, "__dataclass_fields__", {})))
        if cfg is None or unknown:
            raise ValueError(f"arm {arm.label!r}: {kernel}'s config ({cfg}) has no field {', '.join(unknown)}")
        overrides[kernel] = replace(cfg, **fields)
    keywords = {k: v for option, value in arm.options.items() for k, v in PLAN_OPTIONS[option](value).items()}
    try:
        plan = prepare(overrides, **keywords)
    except ValueError as exc:
        raise ValueError(f"arm {arm.label!r}: {exc}") from None
    from lab.step.fused.step import with_switches

    try:
        return with_switches(plan, arm.switches) if arm.switches else plan
    except ValueError as exc:
        raise ValueError(f"arm {arm.label!r}: {exc}") from None


def bounded(plan: Any, arm: Arm) -> Any:
    """`plan` with the arm's bounds: its ABSENT kernels' launches left out, its IDLE kernels' made idle."""
    from lab.step.fused.anatomy import idled, without

    try:
        absent = [k for k, how in arm.bounds.items() if how == "ABSENT"]
        idle = [k for k, how in arm.bounds.items() if how == "IDLE"]
        plan = without(plan, absent) if absent else plan
        return idled(plan, idle) if idle else plan
    except ValueError as exc:
        raise ValueError(f"arm {arm.label!r}: {exc}") from None


def rounds(plans: dict[str, Any], n: int, timer: Callable[[Any], float]) -> dict[str, list[list[float]]]:
    """Every plan timed once a round, `n` rounds in rotated order (lab.measure.timing.rotating_rounds, as the lab's
    experiments time their methods): each plan's timings, one list a round."""
    def turn(plan: Any) -> Callable[[], list[float]]:
        return lambda: [timer(plan)]

    return rotating_rounds({label: turn(plan) for label, plan in plans.items()}, n)


def _ends(interval: I.Interval | None) -> list[float] | None:
    return None if interval is None else [interval.low, interval.high]


def against_control(ratio_iv: dict[str, I.Interval | None], control: str | None) -> dict[str, str] | None:
    """Each arm against the first and its A/A (`control`'s label; None: no A/A): the lab's one rule
    (lab.contract.intervals.relation) against the span from 1 to the A/A's interval, so "lower" (faster) or "higher"
    only beyond both, "same" where it overlaps them, "unknown" without an interval (the A/A's or its own)."""
    if control is None or control not in ratio_iv:
        return None
    aa = ratio_iv[control]
    span = None if aa is None else I.Interval(min(1.0, aa.low), max(1.0, aa.high))
    return {k: I.relation(span, iv).value for k, iv in ratio_iv.items()}


def _control(labels: list[str]) -> str | None:
    """The A/A arm's label where the arms have one (the first arm's + CONTROL)."""
    return labels[0] + CONTROL if labels and labels[0] + CONTROL in labels else None


def summary(times: dict[str, list[list[float]]]) -> dict[str, Any]:
    """Each arm's median (ms) with its 95% interval, its ratio to the first arm's median with the ratio's interval
    (paired over rounds), and where the arm stands against the first (lab.contract.intervals.versus: "lower" is
    faster; "unknown" with fewer than two rounds) and, where the arms have an A/A, against both (`against_control`)."""
    first = next(iter(times))
    ratio_iv = {k: I.ratio_interval(v, times[first]) for k, v in times.items()}
    med = {k: statistics.median(flat(v)) for k, v in times.items()}
    out = {"median_ms": med, "median_interval_ms": {k: _ends(I.median_interval(v)) for k, v in times.items()},
           "ratio": {k: v / med[first] for k, v in med.items()},
           "ratio_interval": {k: _ends(iv) for k, iv in ratio_iv.items()},
           "against_first": {k: I.versus(iv, 1.0).value for k, iv in ratio_iv.items()},
           "rounds_ms": {k: flat(v) for k, v in times.items()}}
    control = against_control(ratio_iv, _control(list(times)))
    return out if control is None else {**out, "against_control": control}


def summary_over(runs: list[dict[str, list[list[float]]]]) -> dict[str, Any]:
    """`summary`'s figures over several processes' rounds (`runs`: each process's arm -> rounds, the arms in the same
    order): each arm's median of every process's rounds pooled, its ratio to the first arm's, that ratio's interval
    drawn process by process (lab.contract.intervals.clustered_ratio_interval) and the verdict from it, and each
    process's own ratio (`summary` of its rounds alone)."""
    if not runs or any(list(r) != list(runs[0]) for r in runs):
        raise ValueError("summary_over: every process must time the same arms in the same order")
    arms = list(runs[0])
    first = arms[0]
    pooled = {k: [rnd for r in runs for rnd in r[k]] for k in arms}
    med = {k: statistics.median(flat(v)) for k, v in pooled.items()}
    ratio_iv = {k: I.clustered_ratio_interval([r[k] for r in runs], [r[first] for r in runs]) for k in arms}
    each = [summary(r) for r in runs]
    out = {"median_ms": med, "median_interval_ms": {k: _ends(I.median_interval(v)) for k, v in pooled.items()},
           "ratio": {k: v / med[first] for k, v in med.items()},
           "ratio_interval": {k: _ends(iv) for k, iv in ratio_iv.items()},
           "against_first": {k: I.versus(iv, 1.0).value for k, iv in ratio_iv.items()},
           "process_ratios": {k: [e["ratio"][k] for e in each] for k in arms},
           "processes": [{"rounds_ms": e["rounds_ms"], "ratio_interval": e["ratio_interval"]} for e in each]}
    control = against_control(ratio_iv, _control(arms))
    return out if control is None else {**out, "against_control": control}


def _row(out: dict[str, Any], label: str) -> str:
    """One arm's line: median [interval] ms, ratio [interval], and its verdict against the first arm."""
    def ends(key: str, digits: int) -> str:
        iv = out[key][label]
        return " " * (2 * digits + 8) if iv is None else f"[{iv[0]:.{digits}f}, {iv[1]:.{digits}f}]"

    verdict = {"lower": "faster", "higher": "slower", "same": "same", "unknown": "no interval"}
    judged = out.get("against_control", out["against_first"])
    say = ("" if label == next(iter(out["ratio"])) else "A/A" if label.endswith(CONTROL) and "against_control" in out
           else verdict[judged[label]])
    return (f"  {out['median_ms'][label]:9.4f} ms {ends('median_interval_ms', 4)}  {out['ratio'][label]:6.3f}x "
            f"{ends('ratio_interval', 3)}  {say:<11}"
            f"  {label}"
            + ("" if "process_ratios" not in out else
               "  (each process: " + ", ".join(f"{r:.3f}x" for r in out["process_ratios"][label]) + ")"))


def bound_note(arms: list[Arm]) -> str | None:
    """The line printed under the rows where an arm is a bound (ABSENT, IDLE, a switch in TIMING_SWITCHES), None where
    none is."""
    labels = [a.label for a in arms if a.bound]
    return None if not labels else (f"  bounds, not steps (a kernel's launches left out or idled, or a part of its work "
                                    f"left out by a switch that is timing only; their values are not the step's): "
                                    f"{', '.join(labels)}")


def left_out(arms: list[Arm], calls: dict[str, list[Any]]) -> dict[str, dict[str, int]]:
    """Each bound arm's kernels' bytes from memory a step (weights, K and V: lab.step.fused.traffic's calls of the arm's
    plan before its bounds, `calls` by label) and their launches a step: {label: {"bytes": B, "launches": N}}, for the
    arms with a bound."""
    out: dict[str, dict[str, int]] = {}
    for arm in arms:
        if arm.bound:
            mine = [k for k in T.per_kernel(calls[arm.label]) if k.kernel in arm.bounds]
            out[arm.label] = {"bytes": sum(k.weights + k.kv for k in mine), "launches": sum(k.calls for k in mine)}
    return out


def beyond_bytes(arms: list[Arm], median_ms: dict[str, float], left: dict[str, dict[str, int]],
                 copy_gbps: float | None) -> dict[str, dict[str, Any]]:
    """What each bound arm saved against the arm of its own plan, µs a step: `saved_us`, against `against` (the arm with
    the same configs, switches and plan options and no bound, where the A/B has one: `plan:FOLD=0` for
    `plan:FOLD=0;attention:ABSENT=1`, `table` for `proj:ABSENT=1`; else the first arm, whose plan may then differ in
    more than the bound); for an arm that leaves its kernels out (ABSENT only), their bytes at the card's copy rate
    (`bytes_us`) and what leaving them out saved beyond those bytes (`beyond_us`: the launches' and hand-overs' place
    on the chain, where positive); for an arm that idles them (IDLE only) with an ABSENT arm of the same kernels, what
    their launches with their grids cost the chain by themselves (`launches_us` = IDLE - ABSENT, and `per_launch_us`;
    the same configs, switches and plan options on both). An arm with a switch that is timing only (TIMING_SWITCHES)
    has `saved_us` alone: the work its switch leaves out is not bytes this prices. docs/fused-step.md items 28-30 read
    these."""
    first = next(iter(median_ms))
    kinds = {a.label: frozenset(a.bounds.values()) for a in arms if a.bound}

    def plan_of(a: Arm) -> str:  # what an arm changes besides its bounds (and its switches that are timing only)
        switches = {k: {key: v for key, v in sw.items() if not timing_switch(key, v)} for k, sw in a.switches.items()}
        return json.dumps([a.configs, {k: sw for k, sw in switches.items() if sw}, a.options], sort_keys=True)

    def same(a: Arm) -> tuple[Any, ...]:  # an IDLE arm's ABSENT twin: the same kernels bound on the same plan
        return (frozenset(a.bounds), plan_of(a))

    absent_of = {same(a): a.label for a in arms if a.bound and kinds[a.label] == {"ABSENT"}}
    unbound_of = {plan_of(a): a.label for a in reversed(arms) if not a.bound and a.label in median_ms}
    out: dict[str, dict[str, Any]] = {}
    for arm in arms:
        if not arm.bound or arm.label not in median_ms or arm.label not in left:
            continue
        base = unbound_of.get(plan_of(arm), first)
        row: dict[str, Any] = {"against": base, "saved_us": (median_ms[base] - median_ms[arm.label]) * 1e3}
        if kinds[arm.label] == {"ABSENT"} and copy_gbps and not arm.timing_only:
            row["bytes_us"] = left[arm.label]["bytes"] / (copy_gbps * 1e3)
            row["beyond_us"] = row["saved_us"] - row["bytes_us"]
        twin = absent_of.get(same(arm))
        if kinds[arm.label] == {"IDLE"} and twin in median_ms and not arm.timing_only:
            row["launches_us"] = (median_ms[arm.label] - median_ms[twin]) * 1e3
            row["per_launch_us"] = row["launches_us"] / max(1, left[arm.label]["launches"])
        out[arm.label] = row
    return out


def bytes_note(rows: dict[str, dict[str, Any]], left: dict[str, dict[str, int]], copy_gbps: float | None) -> list[str]:
    """The lines printed under the bound note: each bound arm's bytes left out and what it saved beyond them, or what
    its launches cost (`beyond_bytes`), each saying which arm it is priced against."""
    lines = [] if not rows else [f"  each bound against the arm of its plan without the bound (the first arm where the "
                                 f"A/B has none), µs a step (bytes at this card's copy rate, "
                                 f"{'not measured' if not copy_gbps else f'{copy_gbps:,.0f} GB/s'}):"]
    for label, r in rows.items():
        say = f"saved {r['saved_us']:.1f} against {r['against']}"
        if "beyond_us" in r:
            say += (f"; its {left[label]['bytes'] / 1e6:,.1f} MB a step take {r['bytes_us']:.1f} at the copy rate, "
                    f"so {r['beyond_us']:.1f} beyond them")
        if "launches_us" in r:
            say += (f"; its {left[label]['launches']} launches, idle, cost {r['launches_us']:.1f} more than none "
                    f"({r['per_launch_us']:.2f} a launch)")
        lines.append(f"    {label}: {say}")
    return lines


def _child(argv: list[str]) -> tuple[int, str, str]:
    """One process of `--processes`: this tool with `argv`, its exit status, standard output and error."""
    done = subprocess.run([sys.executable, "-m", "lab.step.fused.ab", *argv], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def _processes(args: argparse.Namespace, arms: list[Arm]) -> int:
    """`--processes N`: the A/B in N fresh processes, one after another, judged over all of them (`summary_over`)."""
    argv = ["--size", args.size, "--dtype", args.dtype, "--batch", str(args.batch), "--rounds", str(args.rounds),
            "--rep-ms", str(args.rep_ms), *([] if args.control else ["--no-control"]), *args.arms]
    runs: list[dict[str, list[list[float]]]] = []
    copies: list[float] = []  # each process's copy rate (where an arm is a bound)
    head, meta = "", {}
    for i in range(args.processes):
        rc, out, err = _child(["--shift", str(i), *argv])
        line = next((x for x in out.splitlines() if x.startswith("AB ")), None)
        if rc != 0 or line is None:
            last = (err.strip().splitlines() or out.strip().splitlines() or ["no output"])[-1]
            print(f"python -m lab.step.fused.ab: process {i + 1} of {args.processes} ended with status {rc}: {last}",
                  file=sys.stderr)
            return rc if rc in (1, 2) else 1
        record = json.loads(line[3:])
        head = next((x for x in out.splitlines() if "rotated rounds" in x), head)
        rounds_ms = {k: [[v] for v in vs] for k, vs in record["rounds_ms"].items()}
        runs.append(rounds_ms)
        print(f"process {i + 1} of {args.processes}: " + ", ".join(  # the ratios its own summary printed
            f"{k} {record['ratio'][k]:.3f}x" for k in list(rounds_ms)[1:]), flush=True)
        print("AB-PROCESS " + line[3:], flush=True)  # each process's own record as it ends: kept should a later one fail
        meta = {k: record.get(k) for k in ("size", "dtype", "batch", "pdl", "card", "left_out")}
        copies.extend([record["copy_gbps"]] if record.get("copy_gbps") else [])
    out_all = summary_over(runs)
    copy = max(copies) if copies else None  # the best copy of all, as each process takes its own
    print(head.replace("rotated rounds:", f"rotated rounds in each of {args.processes} processes:"))
    for label in runs[0]:
        print(_row(out_all, label))
    note = bound_note(arms)
    left = meta.get("left_out") or {}
    rows = beyond_bytes(arms, out_all["median_ms"], left, copy)
    for line in ([note] if note else []) + bytes_note(rows, left, copy):
        print(line)
    print("AB " + json.dumps({**meta, **out_all, "copy_gbps": copy, "beyond_bytes": rows}))
    return 0


def plans_on_gpu(size: str, dtype: str, batch: int) -> tuple[Any, Any, bool, Callable[..., Any]]:
    """What this tool times, on the GPU: GPT-2-shaped random weights of `size`, a state mid-decode, whether PDL is on
    (where the device has it), and a function that builds `fused-pdl-prefetch`'s repeatable plan on them (the gemv
    path) with the given config `overrides` (lab.step.fused.tune's weights and state; lab.step.fused.place builds its
    plans with it too)."""
    from lab.contract.profiles import GPT2_SIZES
    from lab.step.fused.step import pdl_supported, prepare
    from lab.step.fused.tune import random_weights, timing_state

    w = random_weights(GPT2_SIZES[size], getattr(torch, dtype), "cuda")
    state = timing_state(w, batch)
    sms = C.device_sms("cuda")
    pdl, _ = pdl_supported(w.device)

    def made(overrides: dict[str, C.Config] | None = None, **kw: Any) -> Any:
        return prepare(state, w, sms=sms, repeatable=True, pdl=pdl, prefetch=True, path="gemv", overrides=overrides,
                       **kw)

    return w, state, pdl, made


def main(argv: list[str] | None = None) -> int:
    from lab.contract.profiles import GPT2_SIZES

    p = argparse.ArgumentParser(prog="python -m lab.step.fused.ab", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="gpt2-124M", choices=list(GPT2_SIZES))
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep-ms", type=int, default=20, help="milliseconds of replays a timing")
    p.add_argument("--processes", type=int, default=1,
                   help="run the A/B in this many fresh processes and judge the arms over all of them")
    p.add_argument("--no-control", dest="control", action="store_false",
                   help="time no second plan of the first arm (the A/A against which the arms are judged)")
    p.add_argument("--shift", type=int, default=0, help=argparse.SUPPRESS)  # --processes: the i-th starts at arm i
    p.add_argument("arms", nargs="+", metavar="ARM", help="table | KERNEL.FIELD=V;KERNEL:SWITCH=V;...")
    args = p.parse_args(argv)
    try:
        arms = [parse_arm(a) for a in args.arms]
    except ValueError as exc:
        print(f"python -m lab.step.fused.ab: {exc}", file=sys.stderr)
        return 2
    if len({a.label for a in arms}) < len(arms):
        print("python -m lab.step.fused.ab: an arm is given twice", file=sys.stderr)
        return 2
    arms = with_control(arms) if args.control else arms
    if args.batch < 1 or args.rounds < 1 or args.rep_ms < 1 or args.processes < 1:
        print("python -m lab.step.fused.ab: --batch, --rounds, --rep-ms and --processes must be positive",
              file=sys.stderr)
        return 2
    if args.processes > 1:
        return _processes(args, arms)
    if not torch.cuda.is_available():
        print("lab.step.fused.ab needs a CUDA device (none visible)", file=sys.stderr)
        return 2
    from lab.step.fused.tune import card_copy_gbps, step_ms

    w, state, pdl, made = plans_on_gpu(args.size, args.dtype, args.batch)

    base = made()  # the tables' configs, which every arm's plan starts from (this plan is not timed)
    by_label = {a.label: a for a in arms}
    shape, position = T.Shape.of(w, args.batch, state.max_len), int(state.pos.item())
    calls: dict[str, list[Any]] = {}  # each arm's launches' bytes before its bounds: what prices a bound
    built: dict[str, Any] = {}
    try:
        for label in build_order(list(by_label), args.shift):
            plan = unbounded(base, by_label[label], made)
            calls[label] = T.calls(shape, T.Layout.of_plan(plan), position)
            built[label] = bounded(plan, by_label[label])
    except ValueError as exc:
        print(f"python -m lab.step.fused.ab: {exc}", file=sys.stderr)
        return 2
    plans = {label: built[label] for label in by_label}  # reported in the order given
    left = left_out(arms, calls)
    # before the rounds (nothing after them can lose them) and after every plan is built (no plan's buffers move)
    copy = card_copy_gbps() if left else None
    for plan in plans.values():  # compiled, captured and warm before any round
        step_ms(plan, 5)
    torch.cuda.synchronize()
    out = summary(rounds(plans, args.rounds, lambda plan: step_ms(plan, args.rep_ms)))
    card = str(getattr(torch.cuda.get_device_properties(0), "uuid", "")) or "unknown"
    print(f"{torch.cuda.get_device_name()} (card {card}), {args.size} {args.dtype} batch {args.batch}, fused-pdl-prefetch's "
          f"repeatable plan{'' if pdl else ' (no PDL on this device)'}, {args.rounds} rotated rounds:")
    for label in plans:
        print(_row(out, label))
    note = bound_note(arms)
    rows = beyond_bytes(arms, out["median_ms"], left, copy)
    for line in ([note] if note else []) + bytes_note(rows, left, copy):
        print(line)
    print("AB " + json.dumps({"size": args.size, "dtype": args.dtype, "batch": args.batch, "pdl": pdl, "card": card,
                              "built": list(built), **out, "left_out": left, "copy_gbps": copy,
                              "beyond_bytes": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
