"""The L2 prefetch beside the chain: weights that a later program will read, asked into L2 before a program's PDL wait.

`cp.async.bulk.prefetch.L2` (sm_90) is one instruction, issued here by one thread of a program: the TMA unit brings a
range of bytes into L2 while the program goes on. Nothing waits for it and nothing reads its result, so it changes no
value the step computes, only where later loads of those bytes are served from. The PREFETCH kernels (lab.step.fused.
projections) issue it after their own weight loads and before their PDL wait, so it streams while they wait for their
predecessor. What each program asks for is a chunk of a weight matrix: chunk `pid // div + first` of `span` bytes,
clipped to the matrix's `total` bytes. Two policies fill in those numbers (`Prefetch`, chosen by step.prepare):

- ahead: a kernel whose grid takes more than one wave of resident programs asks, from each program, for the slice of
  the program one wave later (`first` = the programs resident at once, in row blocks; `span` = one slice). The first
  wave's bytes come before the wait as before; the later waves' now stream while the first computes.
- next: each program asks for its share of the next kernel's weights (`first` = 0), up to a budget, so that the next
  kernel's programs that become resident late find their slices in L2.

In Triton's interpreter there is no L2 and no inline assembly: plans made there never turn it on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import triton
import triton.language as tl

from lab.step.fused.launch import Launch

LINE = 16  # the bulk prefetch's unit: its address and size are multiples of 16 bytes


@dataclass(frozen=True)
class Prefetch:
    """A launch's L2 prefetch: chunk pid // div + first of `span` bytes of a weight matrix of `total` bytes."""
    first: int
    span: int
    total: int
    div: int = 1

    def chunk(self, pid: int) -> tuple[int, int]:
        """(start, bytes) that program `pid` asks for, as `_l2_prefetch` computes them (tests: the same arithmetic)."""
        start = (pid // self.div + self.first) * self.span
        end = min(start + self.span, self.total) // LINE * LINE
        start = start // LINE * LINE
        return start, max(0, end - start)


@triton.jit
def _l2_prefetch(ptr, first, span, total, div, ON: tl.constexpr):
    """Ask L2 for bytes [start, end) of the matrix at `ptr` (`Prefetch.chunk`), from the program's thread 0."""
    if ON:
        start = (tl.program_id(0) // div + first).to(tl.int64) * span
        end = tl.minimum(start + span, total) // 16 * 16
        start = start // 16 * 16
        size = tl.maximum(end - start, 0).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; setp.gt.and.s32 p, $2, 0, p; "
            "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r", [ptr.to(tl.pointer_type(tl.int8)) + start, size], dtype=tl.int32, is_pure=False, pack=1)


MODES = ("off", "ahead", "next", "auto")
PF_ARGS = ("pf_ptr", "pf_first", "pf_span", "pf_total", "pf_div")  # the PREFETCH kernels' runtime arguments for it
NEXT_BUDGET = 24 << 20  # bytes of the next kernel's weights asked for at most (about half an H200's 50 MB L2)


def off(weight: Any) -> tuple[Any, int, int, int, int]:
    """The pf_ arguments of a launch that prefetches nothing (`L2` off: not read)."""
    return (weight, 0, 0, 0, 1)


def _weight(launch: Launch) -> Any:
    names = launch.kernel.arg_names
    return launch.args[names.index("wte_ptr" if launch.name == "lm_head" else "w_ptr")]


def _with(launch: Launch, ptr: Any, p: Prefetch) -> Launch:
    i = launch.kernel.arg_names.index("pf_ptr")
    args = launch.args[:i] + (ptr, p.first, p.span, p.total, p.div) + launch.args[i + len(PF_ARGS):]
    return replace(launch, args=args, meta={**launch.meta, "L2": True})


def ahead(launch: Launch, resident: int) -> Prefetch | None:
    """The prefetch ahead for a launch of which `resident` programs fit the device at once: None where its grid is
    one wave."""
    programs = launch.grid[0]
    if programs <= resident:
        return None
    w = _weight(launch)
    nbb = int(launch.args[launch.kernel.arg_names.index("NBB")])
    es = w.element_size()
    return Prefetch(first=resident // nbb, span=int(launch.meta["BN"]) * int(w.shape[1]) * es,
                    total=w.numel() * es, div=nbb)


def following(launch: Launch, nxt: Launch, budget: int = NEXT_BUDGET) -> Prefetch:
    """Each program's share of the first `budget` bytes of the next launch's weights."""
    w = _weight(nxt)
    total = w.numel() * w.element_size()
    want = min(total, budget)
    return Prefetch(first=0, span=-(-want // launch.grid[0] // LINE) * LINE, total=want)


def apply(launches: list[Any], mode: str, resident: Callable[[Launch], int]) -> tuple[list[Any], list[str]]:
    """The launches with their L2 prefetch set by `mode` (MODES; 'auto': ahead where a grid takes more than one wave,
    else the next kernel's weights), and a line a launch that prefetches saying what. `resident(launch)`: the
    programs of its compiled kernel the device holds at once (lab.step.fused.resident.max_programs)."""
    if mode not in MODES:
        raise ValueError(f"L2 prefetch mode {mode!r}: one of {', '.join(MODES)}")
    out, said = list(launches), []
    if mode == "off":
        return out, said
    for i, launch in enumerate(launches):
        if not isinstance(launch, Launch) or not launch.meta.get("PREFETCH") or "pf_ptr" not in launch.kernel.arg_names:
            continue
        p: Prefetch | None = None
        target = launch
        if mode in ("ahead", "auto"):
            p = ahead(launch, resident(launch))
        nxt = next((n for n in launches[i + 1:] if isinstance(n, Launch) and n.name in _TARGETS), None)
        if p is None and mode in ("next", "auto") and nxt is not None:
            p, target = following(launch, nxt), nxt
        if p is not None:
            out[i] = _with(launch, _weight(target), p)
            said.append(f"{launch.name}: {'its later waves' if target is launch else target.name + ' weights'}, "
                        f"{p.span} B a program from chunk {p.first}")
    return out, said


_TARGETS = ("ln_qkv", "proj", "ln_fc", "fc2", "lm_head")
