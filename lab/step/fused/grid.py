"""A grid-wide barrier for the persistent layer kernel (lab.step.fused.persistent), split in two halves.

`_arrive` says this program's writes of a phase are done; `_wait` spins until every program of the grid has
arrived as often as the phase's number says; between the two a program may load what no phase writes (the next
phase's weights), so the barrier's latency overlaps the weight stream. The counter is cumulative within a launch
(phase k waits for k x P arrivals, every program waits at every barrier, so no program can arrive twice before
another arrived once), and `_leave` resets it: the last program to leave zeroes both counters, so every launch
starts from zero (a graph replays the same launch).

Memory ordering is CUDA cooperative groups' grid sync: a CTA-wide barrier, then one thread's release add (the
scalar atomic: Triton executes it in one thread and broadcasts its result); the spin reads the counter with
volatile loads (no L1), then one acquire read of it (ld.global.gpu.acquire) orders every later load after the other
programs' writes, and a CTA-wide barrier hands that to every thread (lab.step.fused.aot counts these instructions in
the PTX, and tests/test_fused_persistent.py asserts them). The acquire also invalidates the SM's L1,
so a row this program read in an earlier phase is not served stale.

A grid barrier needs every program of the grid resident at once: the kernel's grid is at most what the device
holds at the compiled kernel's occupancy (lab.step.fused.persistent.max_programs), and it runs only in a child
process with a watchdog (lab.experiments.fused_persistent), since a program that never arrives hangs the GPU.
In Triton's interpreter the programs run one after another, so a barrier there works with one program only.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _arrive(bar_ptr):
    """This program's writes so far are done (visible to any program that waits after this arrival)."""
    tl.debug_barrier()
    tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")


@triton.jit
def _wait(bar_ptr, target):
    """Spin until `target` arrivals are counted, then acquire them (nothing when target is 0)."""
    if target > 0:
        seen = tl.load(bar_ptr, volatile=True)
        while seen < target:
            seen = tl.load(bar_ptr, volatile=True)
        # the acquire: Triton 3.6 makes an atomic add of 0 an acquire load (ld.global.gpu.acquire) and drops it where
        # its value is unused, so the loop uses it (the counter only grows within a launch: it reads once)
        seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
        while seen < target:
            seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()


@triton.jit
def _leave(bar_ptr, P):
    """The end of a launch: the last of the P programs to leave zeroes the counters (bar_ptr[0], bar_ptr[1])."""
    tl.debug_barrier()
    left = tl.atomic_add(bar_ptr + 1, 1, sem="acq_rel", scope="gpu")
    if left == P - 1:
        tl.atomic_xchg(bar_ptr, 0, sem="relaxed", scope="gpu")
        tl.atomic_xchg(bar_ptr + 1, 0, sem="relaxed", scope="gpu")
