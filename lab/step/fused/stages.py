"""The stages a launch of a fused-step kernel may leave out, the variants that leave them out, and what their times say.

`Stage` is a kernel's `LEAVE_OUT` switch (a bit set, a constexpr: with 0, the default and what the step runs, each
kernel compiles to what it was without the switch). `VARIANTS` are the launches lab.step.fused.anatomy makes of one
bound launch, and `PARTS` the stages' costs as differences of two variants' times (`parts`). No Triton, no torch.

Why these variants (each timed as a CUDA graph of back-to-back launches of one kernel, so a launch waits for the
previous one as in the step; the step's activations stay in L2 and its weights, larger than L2, do not):
- `idle_one` (one program doing nothing) is a graph node's launch and drain; `idle` (the kernel's grid and warps
  doing nothing) adds dispatching and retiring the whole grid: `ramp` = idle - idle_one.
- `no_weights` makes the weight tiles in registers: `weights` = full - no_weights is what streaming the matrix
  costs beyond what overlaps the rest; less its bytes at the copy bandwidth (`stream_excess`) it is the stream's
  first DRAM round trip and the tail of its last wave (the programs that finish last).
- `no_input` makes the activations read after the wait in registers (`input`: the L2 round trip of the row, h,
  the attention partials, q, K and V), `no_store` predicates every store off at run time (`store`: the writes and
  the kernel's drain of them); `arithmetic` leaves out everything but the arithmetic and its reductions (layer-norm
  statistics, the sum over K, the split combine): `arithmetic` = arithmetic - idle.
- under programmatic dependent launch: `pdl` (each launch starts while the previous drains, then waits for it),
  `pdl_no_wait` (the same without the wait: independent launches, overlapped as far as resources allow) and
  `pdl_idle` (PDL's two calls alone): `pdl_overlap` = full - pdl is what PDL saves a launch, `wait` = pdl -
  pdl_no_wait what waiting for the predecessor costs.
The differences are not additive (stages overlap); each says what leaving that stage out would save. Two caveats:
what a variant computes is dead code elsewhere too (proj's `input` takes combining the attention splits with it,
`arithmetic` keeps only what feeds a store), and a variant compiles to its own registers and layout (`python -m
lab.step.fused.aot --anatomy` prints them: attention without its input holds 255 registers a thread against 128).

`STEP_VARIANTS` are the same switches thrown in every launch of a whole step at once (lab.step.fused.anatomy.
step_variant), timed as one CUDA graph of the step (its weights, larger than L2, come from HBM replay after replay):
- `full`: the step as its method runs it (PDL, prefetch, folds).
- `no_weights`: every weight made in registers: the step with no weight bytes to read, what its chain of kernels
  costs at unlimited bandwidth; full - no_weights is what the bytes add beyond what overlaps the chain.
- `arithmetic`: weights, inputs and stores left out: the arithmetic and reductions on the chain.
- `idle`: every launch the idle kernel with its grid and warps (and PDL's two calls under PDL): the chain of launches
  and hand-overs alone, the floor of any step of that many launches with those grids.
- `no_wait` (under PDL only): no launch waits for its predecessor, so they overlap as far as resources allow: full -
  no_wait is what the dependencies cost. Its values are garbage (a launch reads what may not be written yet).
- `no_wait:KERNEL` (under PDL only): the same for one kernel's launches only (STEP_WAITS): full - no_wait:KERNEL is
  what waiting before that kernel costs the step, in all its launches (the wait on its predecessor's last program,
  the flush of its writes, the start of the programs that were not resident yet).

`Stage.ATTEND` is in no variant here: the folded ln_qkv (lab.step.fused.attention._fold_attention) with its heads'
attention left out after the count-in (the hand-over kept, att not written: proj reads the last step's), timed as an
arm of the A/B tool against the step as it runs, `python -m lab.step.fused.ab ... table "ln_qkv:LEAVE_OUT=16"`: the
difference is what the attention after the count-in costs the step, on the chain of every layer. That build has its
own registers, fewer, which could let more of ln_qkv's programs be resident at once; at GPT-2's shapes as the tables
bound them on 2026-12-05 it lets none (`python -m lab.step.fused.aot` prints the registers; docs/fused-step.md item 16).
`Stage.FENCE` with it, `"ln_qkv:LEAVE_OUT=48"`, makes the count-in's atomic relaxed (no release fence before it, no
acquire after: the hand-over unordered, timing only): against `"ln_qkv:LEAVE_OUT=16"`, what the fence costs the step
(docs/fused-step.md item 31).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from enum import IntFlag
from typing import Sequence

from lab.contract import intervals


class Stage(IntFlag):
    WEIGHTS = 1  # the weight matrix's tiles made in registers: its bytes and DRAM round trips out
    INPUT = 2  # the activations read after the wait (residual row, h, attention partials, q, K and V) made so
    STORE = 4  # every output store predicated off at run time: computed, nothing written
    WAIT = 8  # under PDL, no wait for the previous kernel (the launches become independent)
    ATTEND = 16  # the folded ln_qkv: the head's last program counts in and zeroes the counter, but does not attend
    FENCE = 32  # the folded ln_qkv's count-in relaxed: no release fence before its atomic, no acquire after (unordered)


@dataclass(frozen=True)
class Variant:
    name: str
    leave_out: Stage = Stage(0)
    pdl: bool = False
    idle: bool = False  # the idle kernel (PDL's calls only) with the launch's grid and warps
    one_program: bool = False  # ... with a grid of one program
    only: str = ""  # a step variant's: the stages left out in this kernel's launches only (lab.step.fused.anatomy)


VARIANTS = (Variant("full"), Variant("idle", idle=True), Variant("idle_one", idle=True, one_program=True),
            Variant("no_weights", Stage.WEIGHTS), Variant("no_input", Stage.INPUT), Variant("no_store", Stage.STORE),
            Variant("arithmetic", Stage.WEIGHTS | Stage.INPUT | Stage.STORE), Variant("pdl", pdl=True),
            Variant("pdl_no_wait", Stage.WAIT, pdl=True), Variant("pdl_idle", idle=True, pdl=True))
BY_NAME = {v.name: v for v in VARIANTS}
KERNELS = ("ln_qkv", "attention", "proj", "ln_fc", "fc2", "lm_head")  # the step's kernels, as the step names them
# the kernels whose waits a step variant leaves out one at a time: the PDL step's (it folds the attention into ln_qkv)
STEP_WAITS = tuple(k for k in KERNELS if k != "attention")
STEP_VARIANTS = (Variant("full"), Variant("no_weights", Stage.WEIGHTS),
                 Variant("arithmetic", Stage.WEIGHTS | Stage.INPUT | Stage.STORE), Variant("idle", idle=True),
                 Variant("no_wait", Stage.WAIT, pdl=True),  # pdl here: a PDL step's only (the step's own PDL is kept)
                 *(Variant(f"no_wait:{k}", Stage.WAIT, pdl=True, only=k) for k in STEP_WAITS))
PARTS = {"ramp": ("idle", "idle_one"), "weights": ("full", "no_weights"), "input": ("full", "no_input"),
         "store": ("full", "no_store"), "arithmetic": ("arithmetic", "idle"), "pdl_overlap": ("full", "pdl"),
         "wait": ("pdl", "pdl_no_wait")}


def applies(kernel: str, variant: Variant) -> bool:
    """Whether `variant` is a different launch for `kernel` (attention reads no weight matrix)."""
    return not (kernel == "attention" and variant.leave_out == Stage.WEIGHTS)


@dataclass(frozen=True)
class Part:
    """One stage's cost in one kernel: the difference of two variants' medians (us a launch), its 95% interval."""

    kernel: str
    part: str
    us: float
    ci: intervals.Interval | None


def parts(kernel: str, times: dict[str, Sequence[Sequence[float]]], weight_us: float | None = None) -> list[Part]:
    """The parts of `kernel` from its variants' per-round times (us a launch; a variant not timed is left out), with
    `stream_excess` (weights less `weight_us`, the matrix's bytes at the copy bandwidth) where that is given."""
    def median(name: str) -> float:
        return statistics.median([x for r in times[name] for x in r])

    out = [Part(kernel, part, median(a) - median(b), intervals.difference_interval(times[a], times[b]))
           for part, (a, b) in PARTS.items() if a in times and b in times]
    weights = next((p for p in out if p.part == "weights"), None)
    if weights is not None and weight_us is not None:
        ci = None if weights.ci is None else intervals.Interval(weights.ci.low - weight_us, weights.ci.high - weight_us)
        out.append(Part(kernel, "stream_excess", weights.us - weight_us, ci))
    return out
