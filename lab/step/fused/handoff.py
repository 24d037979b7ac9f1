"""The hand-over by counters: a layer kernel waits for its predecessor's programs to count in, not for its grid to end.

Under PDL each kernel of the fused step waits in `gdc_wait` until the previous grid has completed and its memory is
flushed: the grid's last program must exit, the hardware must see the grid done and release the dependent one.
With `flags` (lab.step.fused.step.prepare) every kernel after the first counts its programs in on a counter of its
own instead, and the next kernel waits for that count:

    launch j      waits for  flags[j] == programs of launch j - 1     (the first launch: PDL's wait, as before)
                  counts in  flags[j + 1] += 1, once each program's stores are issued
                  zeroes     flags[j - 1] (launch j - 2's counter), program 0, once its own wait is over

A program arrives as the persistent kernel's barrier does (lab.step.fused.grid): a CTA barrier, then one thread's
release add at GPU scope. It waits with one thread (thread 0) reading the counter until the count is reached, then an
acquire load of it (which also invalidates the SM's L1, so no row read earlier is served stale), then a CTA barrier
that hands the acquire to every thread: CUDA cooperative groups' grid sync, the spin paced by `nanosleep` so that a
grid of waiting programs does not flood the counter's L2 slice while the producer runs. Triton's interpreter cannot
run inline PTX, so there (SPIN_ASM off) the wait is lab.step.fused.grid's, every thread reading.

Why this cannot hang: under PDL a kernel is launched only once every program of its predecessor has started (each
calls `gdc_launch_dependents` first), so the programs it waits for are resident or done; without PDL the
predecessor has completed before the kernel starts. Why the counters are zero when a step begins: launch j zeroes
launch j - 2's counter after its own wait, when every program of launch j - 1 has passed its wait on it; the argmax
(the step's last launch, one program, no successor) zeroes lm_head's and the last fc2's; the next step's first
launch waits on PDL's grid dependency (the argmax completed). Every reset is ordered before the next step's
arrivals by the chain of release and acquire between them. The counters are int32, one per launch and one more.

Only the gemv path's folded plan (four kernels a layer, lm_head, argmax: lab.step.fused.step) hands over this way:
the attention launch of the five-kernel plan and the gemm path's library calls keep PDL's wait.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import triton
import triton.language as tl

from lab.step.fused.grid import _arrive, _wait
from lab.step.fused.launch import Launch

# the HANDOFF bits of a launch (a constexpr of each gemv-path kernel; 0: PDL's wait, no counter)
WAIT = 1  # wait for flags[-1] (the predecessor's counter) instead of gdc_wait
ARRIVE = 2  # count this program in on flags[0] at its end
RESET = 4  # program 0 zeroes flags[-2] (launch j - 2's counter) after its wait
RESET_OWN = 8  # program 0 also zeroes flags[-1] (the last launch: nobody after it does)
SLEEP_NS = 32  # nanosleep between two reads of the counter (thread 0 of each waiting program)

_WAIT = tl.constexpr(WAIT)
_ARRIVE = tl.constexpr(ARRIVE)
_RESET = tl.constexpr(RESET)
_RESET_OWN = tl.constexpr(RESET_OWN)

# thread 0 reads the counter (relaxed, at GPU scope: not from L1) until it holds the target, pausing between reads,
# then acquires it; the other threads go straight to the CTA barrier that follows
_SPIN = tl.constexpr(f"""{{
.reg .pred p;
.reg .u32 t;
.reg .s32 v;
mov.u32 t, %tid.x;
mov.s32 $0, 0;
setp.ne.u32 p, t, 0;
@p bra DONE;
SPIN:
ld.relaxed.gpu.global.s32 v, [$1];
setp.ge.s32 p, v, $2;
@p bra SEEN;
nanosleep.u32 {SLEEP_NS};
bra SPIN;
SEEN:
ld.acquire.gpu.global.s32 v, [$1];
mov.s32 $0, v;
DONE:
}}""")


@triton.jit
def _handoff_wait(flags, wait_for, HANDOFF: tl.constexpr, SPIN_ASM: tl.constexpr):
    """Wait until the predecessor's `wait_for` programs have counted in on flags[-1], then (program 0) zero the
    counters that are done with (RESET, RESET_OWN)."""
    if SPIN_ASM:
        tl.inline_asm_elementwise(_SPIN, "=r,l,r", [flags - 1, wait_for], dtype=tl.int32, is_pure=False, pack=1)
        tl.debug_barrier()
    else:
        _wait(flags - 1, wait_for)
    first = tl.program_id(0) == 0  # a predicate, not a branch (a branch cost bf16 lm_head 87 registers, a spill)
    if (_RESET & HANDOFF) != 0:
        tl.atomic_xchg(flags - 2, 0, mask=first, sem="relaxed", scope="gpu")
    if (_RESET_OWN & HANDOFF) != 0:
        tl.atomic_xchg(flags - 1, 0, mask=first, sem="relaxed", scope="gpu")


@triton.jit
def _handoff_arrive(flags, HANDOFF: tl.constexpr):
    """The end of a program: count it in on flags[0] once every thread's stores are issued (ARRIVE)."""
    if (_ARRIVE & HANDOFF) != 0:
        _arrive(flags)


def bits(j: int, n: int) -> int:
    """The HANDOFF bits of launch j of n."""
    if j == 0:
        return ARRIVE
    out = WAIT | (RESET if j >= 2 else 0)
    return out | RESET_OWN if j == n - 1 else out | ARRIVE


def chain(launches: Sequence[Launch], flags: Any, spin_asm: bool) -> list[Launch]:
    """`launches` (a step, in order) handing over by counters: each gets its view of `flags` (int32, len(launches) + 1,
    zero), the number of programs it waits for (its predecessor's grid) and its HANDOFF bits."""
    n = len(launches)
    if flags.numel() != n + 1:
        raise ValueError(f"hand-over: {flags.numel()} counters for {n} launches (one a launch and one more)")
    out = []
    for j, launch in enumerate(launches):
        wait_for = _programs(launches[j - 1]) if j else 0
        out.append(replace(launch, meta={**launch.meta, "flags": flags[j + 1:], "wait_for": wait_for,
                                         "HANDOFF": bits(j, n), "SPIN_ASM": spin_asm}))
    return out


def _programs(launch: Launch) -> int:
    total = 1
    for g in launch.grid:
        total *= g
    return total
