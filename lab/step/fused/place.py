"""Which of a plan's own buffers makes one plan of the fused step faster than another plan of the same configs:

    python -m lab.step.fused.place --size gpt2-124M --dtype bfloat16
    python -m lab.step.fused.place --size gpt2-1.5B --dtype bfloat16 --plans 6 --rounds 7
    python -m lab.step.fused.place --size gpt2-124M --dtype float32 --sweep x h --count 32 --stride 512

Why (docs/fused-step.md item 24): on an H100 at GPT-2 124M bf16 two plans of the same configs, each with its own buffers, took
0.170 and 0.177 ms, the one built first the faster, whichever arm it was. Two plans share the weights and the decode
state; what each has of its own is its workspace (`step.Workspace`: the residual x, the query, the attention's
partials, the MLP's hidden row, the logits, ...) and the constants it derives when it is bound (the folded layer
norms' c1 and c2, `step.ln_folded`). So only those can land in a different place.

What it does, in one process on a GPU: builds PLANS plans of `fused-pdl-prefetch`'s repeatable plan (the A/B tool's:
`lab.step.fused.ab`, random weights, a state mid-decode, PDL where the device has it), all of the tables' configs, and
times them in ROUNDS rotated rounds. Unless the slowest is slower than the fastest beyond their intervals (the lab's one
rule), there is nothing to take apart and it says so. Otherwise it takes the fastest (F) and the slowest (S) apart:
for each of F's own buffers (a workspace field, or a kernel's argument such as `ln_qkv.c1_ptr`, all layers' together)
a plan that is F with S's buffer in its place, and S with F's; with all of them swapped too. Every one of them is
timed in the same rotated rounds (`ab.rounds`), and each buffer is judged by how much of the gap between F and S its
swap carries: the buffer whose place is the step's moves F to S's time and S to F's. Prints a line an arm and one JSON
line (`PLACE {...}`) with every round and every buffer's address in every plan (hexadecimal), so that a later reading
can ask what the fast places have in common.

`--sweep BUFFER` asks instead where one buffer is fast: one plan, with BUFFER (a workspace buffer: x, h, ...) at COUNT
places STRIDE bytes apart in one block (the first 4 KB-aligned) and at its own, timed in rotated rounds in an order
shuffled once, so that a drift over a round does not fall on the places in address order (`sweep`): each place's
ratio to the plan's own, with its interval.

A swapped plan is a correct plan (tests/test_fused_interpreter.py runs one against a plan of its own): it computes the
same values into another's buffer, and the plans run one at a time.

What it found (docs/fused-step.md item 25; H100s, 2026-12-06): at 124M the residual `x` carries the gap (four cards), the MLP's
row `h` part of it in bf16; swept, `x` at 124M bf16 moves the step by 2.3-2.9%, the same places fast twice over.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import statistics
import sys
from dataclasses import replace
from typing import Any, Callable

import torch

from lab.contract import intervals as I
from lab.measure.timing import flat
from lab.step.fused import ab
from lab.step.fused.launch import Launch

Positions = list[tuple[int, int]]  # (launch index, argument index) of every launch that takes a buffer
ALL = "all of them"  # the arm that swaps every one of the plan's own buffers


def _params(kernel: Any) -> list[str]:
    """A Triton kernel's parameter names (a JIT function's, or in Triton's interpreter its Python function's)."""
    fn = getattr(kernel, "fn", kernel)
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _fields(plan: Any) -> dict[int, str]:
    """The plan's workspace tensors, by identity: each one's field name."""
    return {id(t): name for name, t in vars(plan.workspace).items() if isinstance(t, torch.Tensor)}


def owned(plan: Any, shared: list[torch.Tensor]) -> dict[str, Positions]:
    """The plan's own buffers, each with where its launches take it: a workspace field by its name, any other tensor
    argument that is not one of `shared` (the weights' and the state's) by its kernel and parameter name
    (`ln_qkv.c1_ptr`: every layer's launch's together). Empty tensors (a path's unused buffers) are left out."""
    fields = _fields(plan)
    common = {id(t) for t in shared}
    out: dict[str, Positions] = {}
    for i, launch in enumerate(plan.launches):
        if not isinstance(launch, Launch):
            continue
        names = _params(launch.kernel)
        for j, arg in enumerate(launch.args):
            if not isinstance(arg, torch.Tensor) or arg.numel() == 0 or id(arg) in common:
                continue
            name = fields.get(id(arg)) or f"{launch.name}.{names[j] if j < len(names) else j}"
            out.setdefault(name, []).append((i, j))
    return out


def _rebound(plan: Any, tensors: dict[tuple[int, int], torch.Tensor]) -> Any:
    """`plan` with each (launch, argument) of `tensors` taking that tensor, and the workspace field whose tensor it
    replaced taking it too (so that the plan still returns the logits it wrote). ValueError for a tensor not of the
    argument's shape and dtype."""
    launches = list(plan.launches)
    fields: dict[str, torch.Tensor] = {}
    mine = _fields(plan)
    for (i, j), tensor in tensors.items():
        args = list(launches[i].args)
        if not isinstance(tensor, torch.Tensor) or tensor.shape != args[j].shape or tensor.dtype != args[j].dtype:
            raise ValueError(f"launch {i} ({launches[i].name}) argument {j}: not a tensor of its shape and dtype")
        if id(args[j]) in mine:
            fields[mine[id(args[j])]] = tensor
        args[j] = tensor
        launches[i] = replace(launches[i], args=tuple(args))
    return replace(plan, launches=launches, workspace=replace(plan.workspace, **fields))


def swapped(plan: Any, other: Any, positions: Positions) -> Any:
    """`plan` with `other`'s tensors at `positions` (a buffer's, from `owned`). ValueError where the plans are not
    alike (the same launches of the same kernels, the same shapes there)."""
    if [x.name for x in plan.launches] != [x.name for x in other.launches]:
        raise ValueError("swapped: the two plans do not make the same launches")
    try:
        return _rebound(plan, {(i, j): other.launches[i].args[j] for i, j in positions})
    except ValueError as exc:
        raise ValueError(f"swapped: {exc}") from None


def moved(plan: Any, positions: Positions, tensor: torch.Tensor) -> Any:
    """`plan` with `tensor` at every one of `positions` (one buffer's). ValueError where it is not of its shape."""
    try:
        return _rebound(plan, {(i, j): tensor for i, j in positions})
    except ValueError as exc:
        raise ValueError(f"moved: {exc}") from None


def candidates(like: torch.Tensor, count: int, stride: int, align: int = 4096) -> list[torch.Tensor]:
    """`count` copies of `like` in one block of memory, the first at an `align`-byte boundary and each `stride` bytes
    after the one before (a multiple of 16, so every copy is aligned for the kernels' vector loads): the places a
    sweep tries. Where `stride` is less than the buffer's bytes the copies overlap, each holding what the next one's
    copy left of it: a step writes every workspace buffer before it reads it, but for ln_qkv's head counters, which
    are zeros in every copy and left at zero."""
    if stride % 16 or stride < 16 or count < 1:
        raise ValueError(f"candidates: a stride of {stride} bytes (a positive multiple of 16) and {count} copies")
    nbytes = like.numel() * like.element_size()
    block = torch.empty((count - 1) * stride + nbytes + align, dtype=torch.uint8, device=like.device)
    start = -block.data_ptr() % align
    out = []
    for k in range(count):
        copy = block[start + k * stride:start + k * stride + nbytes].view(like.dtype).view(like.shape)
        out.append(copy.copy_(like))
    return out


def sweep(plan: Any, name: str, positions: Positions, count: int, stride: int, n_rounds: int,
          timer: Callable[[Any], float], say: Callable[[str], None] = print, seed: int = 0) -> dict[str, Any]:
    """The plan with its buffer `name` at each of `count` places `stride` bytes apart (`candidates`), and its own, timed
    in rotated rounds in an order shuffled once (seeded), so that a drift over a round does not fall on the places in
    address order: each place's median, ratio to the plan's own and the ratio's interval, and address."""
    own = {id(plan.launches[i].args[j]) for i, j in positions}
    if len(own) != 1:
        raise ValueError(f"sweep: {name} is {len(own)} tensors (a workspace buffer is one)")
    i, j = positions[0]
    arms = {"own": plan, **{f"+{k * stride}": moved(plan, positions, c)
                            for k, c in enumerate(candidates(plan.launches[i].args[j], count, stride))}}
    order = list(arms)
    random.Random(seed).shuffle(order)
    times = ab.rounds({k: arms[k] for k in order}, n_rounds, timer)
    rows = {k: {"address": hex(arms[k].launches[i].args[j].data_ptr()), "median_ms": statistics.median(flat(times[k])),
                **_against(times, k, "own"), "rounds_ms": flat(times[k])} for k in arms}
    for k, v in rows.items():
        iv = v["ratio_interval"]
        say(f"  {k:>8}  {v['address']}  {v['median_ms']:9.4f} ms  {v['ratio']:6.3f}x"
            + ("" if iv is None else f" [{iv[0]:.3f}, {iv[1]:.3f}]") + ("" if k == "own" else f"  {v['relation']}"))
    med = [v["median_ms"] for v in rows.values()]
    return {"buffer": name, "stride": stride, "count": count, "order": order, "places": rows,
            "spread": max(med) / min(med)}


def places(plan: Any, buffers: dict[str, Positions]) -> dict[str, list[str]]:
    """Each buffer's address(es) in this plan, hexadecimal, in launch order without repeats."""
    return {name: list(dict.fromkeys(hex(plan.launches[i].args[j].data_ptr()) for i, j in pos))
            for name, pos in buffers.items()}


def hybrids(fast: tuple[str, Any], slow: tuple[str, Any], buffers: dict[str, Positions]) -> dict[str, Any]:
    """F and S, then F with each of S's buffers, S with each of F's, and each with all of the other's (`ALL`)."""
    (f, fplan), (s, splan) = fast, slow
    out = {f: fplan, s: splan}
    for (a, aplan), (b, bplan) in ((fast, slow), (slow, fast)):
        for name, pos in buffers.items():
            out[f"{a} with {b}'s {name}"] = swapped(aplan, bplan, pos)
        out[f"{a} with {b}'s {ALL}"] = swapped(aplan, bplan, [p for pos in buffers.values() for p in pos])
    return out


def _against(times: dict[str, list[list[float]]], arm: str, base: str) -> dict[str, Any]:
    iv = I.ratio_interval(times[arm], times[base])
    return {"ratio": statistics.median(flat(times[arm])) / statistics.median(flat(times[base])),
            "ratio_interval": None if iv is None else [iv.low, iv.high], "relation": I.versus(iv, 1.0).value}


def spread(times: dict[str, list[list[float]]]) -> tuple[str, str, dict[str, Any]]:
    """The fastest and the slowest plan (by median) and the slowest against the fastest (ratio, interval, relation)."""
    med = {k: statistics.median(flat(v)) for k, v in times.items()}
    fast, slow = min(med, key=med.__getitem__), max(med, key=med.__getitem__)
    return fast, slow, _against(times, slow, fast)


def verdicts(times: dict[str, list[list[float]]], fast: str, slow: str,
             buffers: list[str]) -> dict[str, dict[str, Any]]:
    """Each buffer (and ALL): F with S's against F, S with F's against S, and the share of the gap each swap carries
    (1: it moves the plan the whole way to the other's time; 0: not at all). A buffer `moves` the step where both swaps
    move their plan toward the other beyond the intervals (F with S's slower than F, S with F's faster than S)."""
    med = {k: statistics.median(flat(v)) for k, v in times.items()}
    gap = med[slow] - med[fast]
    out: dict[str, dict[str, Any]] = {}
    for name in [*buffers, ALL]:
        to_slow, to_fast = f"{fast} with {slow}'s {name}", f"{slow} with {fast}'s {name}"
        up, down = _against(times, to_slow, fast), _against(times, to_fast, slow)
        out[name] = {"fast_with_slow": up, "slow_with_fast": down,
                     "share": [(med[to_slow] - med[fast]) / gap, (med[slow] - med[to_fast]) / gap] if gap else None,
                     "moves": up["relation"] == "higher" and down["relation"] == "lower"}
    return out


def study(made: Callable[[], Any], shared: list[torch.Tensor], n_plans: int, n_rounds: int,
          timer: Callable[[Any], float], say: Callable[[str], None] = print,
          warm: Callable[[Any], Any] = lambda plan: None) -> dict[str, Any]:
    """The whole study (the module docstring) with `made` building one plan, `warm` readying one (after all are built,
    as the A/B tool does) and `timer` timing one: a record with the plans' rounds and places, and, where the slowest is
    slower beyond the intervals, the swaps' rounds and verdicts."""
    plans = {f"plan {i + 1}": made() for i in range(n_plans)}
    for plan in plans.values():
        warm(plan)
    buffers = owned(next(iter(plans.values())), shared)
    pilot = ab.rounds(plans, n_rounds, timer)
    fast, slow, apart = spread(pilot)
    record: dict[str, Any] = {"plans": {k: {"median_ms": statistics.median(flat(v)), "rounds_ms": flat(v)}
                                        for k, v in pilot.items()},
                              "places": {k: places(p, buffers) for k, p in plans.items()},
                              "fastest": fast, "slowest": slow, "apart": apart}
    for k, v in record["plans"].items():
        say(f"  {v['median_ms']:9.4f} ms  {k}")
    if apart["relation"] != "higher":
        say(f"the slowest plan ({slow}) is {apart['ratio']:.3f}x the fastest ({fast}), within their intervals: "
            "nothing to take apart on this device")
        return record
    say(f"{slow} is {apart['ratio']:.3f}x {fast}: each of its {len(buffers)} own buffers swapped, both ways, "
        f"{n_rounds} rotated rounds:")
    arms = hybrids((fast, plans[fast]), (slow, plans[slow]), buffers)
    times = ab.rounds(arms, n_rounds, timer)
    found = verdicts(times, fast, slow, list(buffers))
    for name, v in found.items():
        share = "" if v["share"] is None else f"  carries {v['share'][0]:+.0%} / {v['share'][1]:+.0%} of the gap"
        say(f"  {v['fast_with_slow']['ratio']:6.3f}x / {v['slow_with_fast']['ratio']:6.3f}x{share}"
            f"{'  MOVES THE STEP' if v['moves'] else ''}  {name}")
    record.update(swaps={k: flat(v) for k, v in times.items()}, buffers=found,
                  moves=[k for k, v in found.items() if v["moves"] and k != ALL])
    return record


def main(argv: list[str] | None = None) -> int:
    from lab.contract.profiles import GPT2_SIZES

    p = argparse.ArgumentParser(prog="python -m lab.step.fused.place", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="gpt2-124M", choices=list(GPT2_SIZES))
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--plans", type=int, default=4, help="plans of the same configs built and timed first")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep-ms", type=int, default=20, help="milliseconds of replays a timing")
    p.add_argument("--sweep", metavar="BUFFER", nargs="+",
                   help="instead: one plan with this workspace buffer (x, h, ...) at COUNT places STRIDE bytes apart; "
                        "several in turn (a name given twice sweeps again: the allocator mostly hands back the same "
                        "block, so whether each place's time holds)")
    p.add_argument("--count", type=int, default=32, help="--sweep: places tried")
    p.add_argument("--stride", type=int, default=512, help="--sweep: bytes between places (a multiple of 16)")
    args = p.parse_args(argv)
    if args.batch < 1 or args.rounds < 2 or args.rep_ms < 1 or args.plans < 2:
        print("python -m lab.step.fused.place: --batch and --rep-ms must be positive, --plans and --rounds at least 2",
              file=sys.stderr)
        return 2
    if args.sweep is not None and (args.count < 1 or args.stride < 16 or args.stride % 16):
        print("python -m lab.step.fused.place: --count must be positive and --stride a positive multiple of 16",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("lab.step.fused.place needs a CUDA device (none visible)", file=sys.stderr)
        return 2
    from lab.step.fused.tune import step_ms

    w, state, pdl, made = ab.plans_on_gpu(args.size, args.dtype, args.batch)
    shared = w.tensors() + list(state.buffers().values())  # the weights and the state: no plan's own

    card = str(getattr(torch.cuda.get_device_properties(0), "uuid", "")) or "unknown"
    meta = {"size": args.size, "dtype": args.dtype, "batch": args.batch, "pdl": pdl, "card": card,
            "device": torch.cuda.get_device_name()}
    where = (f"{torch.cuda.get_device_name()} (card {card}), {args.size} {args.dtype} batch {args.batch}, "
             f"fused-pdl-prefetch's repeatable plan{'' if pdl else ' (no PDL on this device)'}")
    if args.sweep is not None:
        plan = made()
        buffers = owned(plan, shared)
        unknown = [name for name in args.sweep if name not in buffers]
        if unknown:
            print(f"python -m lab.step.fused.place: --sweep {unknown[0]}: no such buffer of this plan (its own: "
                  f"{', '.join(buffers)})", file=sys.stderr)
            return 2
        step_ms(plan, 5)
        sweeps = []
        for k, name in enumerate(args.sweep):
            print(f"{where}, {name} at {args.count} places {args.stride} bytes apart, {args.rounds} rounds:", flush=True)
            try:
                sweeps.append(sweep(plan, name, buffers[name], args.count, args.stride, args.rounds,
                                    lambda p: step_ms(p, args.rep_ms), lambda line: print(line, flush=True), seed=k))
            except ValueError as exc:
                print(f"python -m lab.step.fused.place: {exc}", file=sys.stderr)
                return 2
        print("PLACE " + json.dumps({**meta, "sweeps": sweeps}))
        return 0
    print(f"{where}, {args.plans} plans, {args.rounds} rotated rounds:", flush=True)
    record = study(made, shared, args.plans, args.rounds,
                   lambda plan: step_ms(plan, args.rep_ms), lambda line: print(line, flush=True),
                   warm=lambda plan: step_ms(plan, 5))  # compiled, captured and warm before any round
    print("PLACE " + json.dumps({**meta, **record}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
