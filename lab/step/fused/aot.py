"""Compile every kernel of the fused step for a GPU without one: errors, registers, spills, PTX and SASS facts.

    python -m lab.step.fused.aot                                  # fp32 and bf16, batches 1 and 64, sm_90
    python -m lab.step.fused.aot --dtype bfloat16 --batch 8 --pdl --arch 90
    python -m lab.step.fused.aot --dtype bfloat16 --batch 1 --pdl --prefetch     # the fused-pdl-prefetch variant
    python -m lab.step.fused.aot --batch 1 --anatomy     # each kernel in every variant of lab.step.fused.stages
    python -m lab.step.fused.aot --model gpt2-1.5B --dtype bfloat16 --batch 1 --pdl --prefetch --switch ln_qkv:KV_AT_ONCE=1
                                  # two layers of GPT-2 1.5B's shapes, a switch bound by name as an A/B arm binds it

Triton compiles ahead of time for a named target (`triton.compile(ASTSource, target=GPUTarget)`)
with the ptxas bundled in its wheel, so a CPU host can check what the interpreter cannot: that
each kernel lowers to PTX and a cubin for Hopper, how many registers a thread needs (occupancy),
whether anything spills, that weights are read with 16-byte vector loads, that the fp32 step
uses no tensor-core instruction (IEEE fp32 FMA only), that PDL builds contain griddepcontrol, and (disassembled by
the wheel's nvdisasm) how many machine instructions a program runs after its PDL wait, on the chain, which of its
loads come a round trip late, and what issuing that path in every program of the launch costs at least
(`issue_after_wait_us`).
On the gemm path (lab.step.fused.rule) only its Triton kernels are compiled: its GEMMs are the library's.
The arguments are specialised as the JIT would on a device: 16-byte aligned pointers, integers
equal to 1 as constants, multiples of 16 marked divisible.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from typing import Any

import torch

from lab.contract.profiles import GPT2_SIZES
_PTR = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.int64: "*i64",
        torch.int32: "*i32"}


@dataclass(frozen=True)
class Compiled:
    name: str
    variant: str
    registers: int | None
    spill_bytes: int | None
    shared_bytes: int
    vector_loads: int  # ld.global.v2/v4 instructions in the PTX
    tensor_core_ops: int  # mma / wgmma instructions
    grid_dependency_ops: int  # griddepcontrol instructions (PDL)
    loads_after_wait: int | None = None  # ld.global after griddepcontrol.wait (None: no wait, PDL off)
    atomics: int = 0  # atom instructions (the persistent kernel's grid barrier: arrivals, leaving, the reset)
    acquires: int = 0  # acquire loads (ld.*.acquire: the barrier's waits)
    unpredicated_atomics: int = 0  # atoms and acquire loads not guarded by a predicate (a barrier's are one thread's)
    # global loads after the first CTA barrier that follows the PDL wait (None: no wait): a second round trip on the
    # chain, after a reduction, where the first one could have carried them (proj's and fc2's residual: none now)
    loads_after_barrier: int | None = None
    # SASS instructions from the PDL wait to the first EXIT: the path a program runs on the chain once its predecessor
    # has finished (None: no wait, or no disassembler in the Triton wheel)
    post_wait_instructions: int | None = None
    # CTA barriers (BAR.SYNC) on that path: each reduction across warps takes two, and each change of a tile's layout
    # through shared memory one or more (a bf16 input read in another layout than its products took 16 in fc2)
    barriers_after_wait: int | None = None
    # global loads on that path issued after its first exchange between threads that follows its first load (`late_loads`):
    # at batch 1 a second round trip after the wait (the position in bf16 ln_qkv, the residual in fp32 proj and fc2,
    # unless their AT_ONCE switches are bound; lm_head's later chunks and the argmax's second level by design)
    late_loads_after_wait: int | None = None
    # the folded ln_qkv's last program of a head (attention._fold_attention): SASS instructions from the exit the head's
    # other programs take after counting in to its own exit, and the CTA barriers among them: the head's attention, on
    # the chain of every layer (None: not a folded ln_qkv, or no disassembler)
    tail_instructions: int | None = None
    tail_barriers: int | None = None
    # ... and its global loads issued after its first exchange between threads (a shuffle or a CTA barrier) that follows
    # its first load: at batch 1 a second round trip on that chain, where one could have carried them (V's, after the
    # scores that wait for K, unless KV_AT_ONCE: attention._fold_attention)
    tail_late_loads: int | None = None
    # cp.async.bulk.prefetch.L2 instructions in the PTX (the folded ln_qkv's KV_L2: the heads' K and V asked into L2)
    l2_prefetches: int = 0
    # the launch's grid (programs) and warps a program, and how many of its programs run a fold tail (a head's last, per
    # batch block): what `issue_after_wait_us` multiplies the paths by
    programs: int = 0
    warps: int = 0
    tail_programs: int = 0
    # whether the path after the PDL wait branches back (a loop, as lm_head's over its chunks): then its instructions
    # counted once are not those it runs, and `issue_after_wait_us` says nothing
    loops_after_wait: bool = False
    # that loop's SASS instructions (aot.loop_after_wait: what a program runs once a chunk of K, as lm_head's) and the
    # shuffles among them (a sum across the threads that hold a row, every chunk, unless lm_head's SUM_ONCE); None: no loop
    loop_instructions: int | None = None
    loop_shuffles: int | None = None


def compile_launch(launch: Any, arch: int = 90) -> Any:
    """triton.compile one bound launch (lab.step.fused.step.Launch) for cuda:arch, without a device."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, meta = launch.kernel, dict(launch.meta)
    options = {"num_warps": meta.pop("num_warps", 4)}
    if meta.pop("launch_pdl", False):
        options["launch_pdl"] = True
    if "maxnreg" in meta:  # a register cap (the persistent kernel's: lab.step.fused.persistent)
        options["maxnreg"] = meta.pop("maxnreg")
    signature: dict[str, str] = {}
    constants: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, name in enumerate(fn.arg_names):
        if i >= len(launch.args):  # a constexpr: the launch's value, else the kernel's default
            signature[name], constants[name] = "constexpr", meta.get(name, fn.params[i].default)
            continue
        value = launch.args[i]
        if isinstance(value, torch.Tensor):
            signature[name] = _PTR[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool) or (isinstance(value, int) and value == 1):
            signature[name], constants[name] = "constexpr", value
        elif isinstance(value, int):
            signature[name] = "i32"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32"
    return triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget("cuda", arch, 32),
                          options=options)


def _bundled(tool: str) -> str | None:
    """A CUDA tool in the installed Triton wheel's bin folder (found without importing Triton), or None."""
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "backends", "nvidia", "bin", tool)
    return path if os.access(path, os.X_OK) else None


def ptxas_path() -> str | None:
    """The ptxas in the installed Triton wheel, or None."""
    return _bundled("ptxas")


def ptxas_usage(ptx: str, arch: int = 90) -> tuple[int | None, int | None]:
    """(registers per thread, spill-store bytes) from the bundled ptxas -v."""
    ptxas = ptxas_path()
    if ptxas is None:
        return None, None
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        suffix = "a" if arch >= 90 else ""
        proc = subprocess.run([ptxas, f"-arch=sm_{arch}{suffix}", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
                              capture_output=True, text=True)
    regs = re.search(r"Used (\d+) registers", proc.stderr)
    spills = re.search(r"(\d+) bytes spill stores", proc.stderr)
    return (int(regs.group(1)) if regs else None, int(spills.group(1)) if spills else None)


def sass(cubin: bytes) -> str | None:
    """The machine code of a cubin, disassembled by the nvdisasm in the Triton wheel (None without one)."""
    nvdisasm = _bundled("nvdisasm")
    if nvdisasm is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


_EXIT = r"\bEXIT\b"


def _instructions(code: str) -> list[str]:
    """The instruction lines of a disassembly (those with an address comment)."""
    return [line for line in code.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", line)]


def _first(lines: list[str], pattern: str, start: int = 0) -> int | None:
    """The index of the first of `lines` from `start` on that matches `pattern` (None: none does)."""
    return next((i for i in range(start, len(lines)) if re.search(pattern, lines[i])), None)


def _through_exit(lines: list[str], start: int) -> list[str]:
    """`lines` from `start` to the first EXIT after it, included (to the end where none follows)."""
    end = _first(lines, _EXIT, start)
    return lines[start:(len(lines) if end is None else end + 1)]


def after_wait(code: str | None) -> list[str] | None:
    """The SASS instructions from the PDL wait (griddepcontrol.wait: ACQBULK) to the first EXIT after it, both
    included (None: no code, or no wait)."""
    lines = [] if code is None else _instructions(code)
    wait = _first(lines, r"\bACQBULK\b")
    return None if wait is None else _through_exit(lines, wait)


def fold_tail(code: str | None) -> list[str] | None:
    """The SASS instructions of a folded ln_qkv's last program after its count-in: from the instruction after the
    first EXIT that follows the head counter's atomic (where every other program of the head leaves) to the next EXIT,
    both exits excluded and included (None: no code, or no atomic). With OLDER_FIRST (attention._fold_attention) the
    count-in is the last atomic of the code (the q programs' own come first), and the tail is the new slot's step."""
    lines = [] if code is None else _instructions(code)
    atoms = [i for i, line in enumerate(lines) if re.search(r"\bATOMG?\b", line)]
    atom = atoms[-1] if atoms else None
    leave = None if atom is None else _first(lines, _EXIT, atom)
    return None if leave is None else _through_exit(lines, leave + 1)


def loop_after_wait(code: str | None) -> list[str] | None:
    """The SASS instructions of the first loop between a disassembly's PDL wait (ACQBULK) and the first EXIT after it:
    from the label a branch goes back to, to that branch, included (None without code, a wait or such a branch). What a
    program runs once a chunk (lm_head's walk over K: `projections._ln_gemv`)."""
    lines = [] if code is None else code.splitlines()
    wait = _first(lines, r"\bACQBULK\b")
    if wait is None:
        return None
    end = _first(lines, _EXIT, wait)
    for start, branch in _back_branches(lines):
        if wait <= branch < (len(lines) if end is None else end):
            return _instructions("\n".join(lines[start:branch + 1]))
    return None


def _back_branches(lines: list[str]) -> list[tuple[int, int]]:
    """The loops of a disassembly's lines: (the label's line, the branch's line) for each branch back to a label above
    it, in the branches' order."""
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"\s*(\.L_x_\d+):", line))}
    loops = []
    for i, line in enumerate(lines):
        target = re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", line)
        if target and labels.get(target.group(1), len(lines)) < i:
            loops.append((labels[target.group(1)], i))
    return loops


def loops_after_wait(code: str | None) -> bool:
    """Whether a disassembly branches back between its PDL wait (ACQBULK) and the first EXIT after it: a branch to a
    label defined above the branch (False without code or a wait)."""
    return loop_after_wait(code) is not None


def _operands(line: str) -> tuple[str, list[str]]:
    """A SASS instruction line's opcode and operands, its guard (`@P0`, `@!P5`) and address comment left out."""
    text = re.sub(r"/\*[0-9a-f]+\*/", "", line).strip().rstrip(";").strip()
    text = re.sub(r"^@!?U?P\w+\s+", "", text)
    op, _, rest = text.partition(" ")
    return op, [x.strip() for x in rest.split(",") if x.strip()]


def polls_as_one(code: str | None) -> list[bool] | None:
    """For each polling loop of a disassembly (a branch back to a label above it, over a body that reloads memory with
    strong loads: `ld.volatile`, LDG...STRONG.SYS), whether the predicate it branches on is set only from registers that
    a shared-memory load (LDS) wrote in the body: one value the program's threads read alike, so that they leave the
    loop together (attention._unflagged). A predicate set from a thread's own global load can differ from thread to
    thread, and the threads then meet different CTA barriers. None without code; [] where no loop polls."""
    if code is None:
        return None
    lines = code.splitlines()
    found: list[bool] = []
    for start, branch in _back_branches(lines):
        guard = re.search(r"@!?(P\d)\s+BRA\b", lines[branch])
        body = [_operands(x) for x in _instructions("\n".join(lines[start:branch]))]
        if guard is None or not any(re.fullmatch(r"LDG\S*\.STRONG\.SYS", op) for op, _ in body):
            continue
        setter = next((j for j in range(len(body) - 1, -1, -1) if body[j][1][:1] == [guard.group(1)]
                       and not body[j][0].startswith(("LDG", "STG", "BRA"))), None)
        if setter is None:
            found.append(False)
            continue
        sources = [x for x in body[setter][1][1:] if re.fullmatch(r"R\d+", x)]
        writers = [next((body[j][0] for j in range(setter - 1, -1, -1) if body[j][1][:1] == [reg]), "")
                   for reg in sources]
        found.append(bool(writers) and all(w.startswith("LDS") for w in writers))
    return found


def late_loads(path: list[str]) -> int:
    """The global loads (LDG) among SASS instructions (a path after a PDL wait, or a fold tail) issued after the first
    exchange between threads (SHFL, or a CTA barrier) that follows the first of them: loads whose round trip starts only
    after the first ones' has ended and been reduced over (0 where they have no load, or every load comes before such an
    exchange)."""
    first = _first(path, r"\bLDG\b")
    exchange = None if first is None else _first(path, r"\bSHFL\b|\bBAR\.SYNC", first)
    return 0 if exchange is None else sum(bool(re.search(r"\bLDG\b", line)) for line in path[exchange:])


LAYER_KERNELS = ("ln_qkv", "attention", "proj", "ln_fc", "fc2")  # launched once a layer (ln_qkv: but layer 0's)
ISSUE_PER_CYCLE = 4  # warp instructions an SM issues a cycle: one from each of its four schedulers (sm_90)
H200_SM_MHZ = 1980.0  # the H200's SM clock, held under load (NVML, 2026-12-02); `main`'s default


def issue_after_wait_us(c: Compiled, sms: int, clock_mhz: float) -> float | None:
    """The least time a launch's programs take to issue what they run after the PDL wait, where they all wait at once:
    every program's warps the path after the wait, and the fold's last programs their tails as well, over `sms` SMs
    issuing ISSUE_PER_CYCLE warp instructions a cycle at `clock_mhz` (a predicated-off instruction issues too). A floor
    on what follows the wait that shorter latencies cannot lower: only fewer instructions, or fewer programs and warps
    running them, can (None: no PDL wait, no disassembler, or a loop after the wait)."""
    if c.post_wait_instructions is None or c.loops_after_wait:
        return None
    warp_instructions = c.warps * (c.programs * c.post_wait_instructions + c.tail_programs * (c.tail_instructions or 0))
    return warp_instructions / (sms * ISSUE_PER_CYCLE) / clock_mhz


# What bounds the programs an SM holds at once on sm_90 (CUDA's occupancy rules, compute capability 9.0): registers are
# given to a warp in units of 256, from 65,536 an SM; shared memory from 228 KB an SM, 1 KB of it reserved for each
# program; at most 64 warps and 32 programs an SM
SM_REGISTERS, REGISTER_UNIT, SM_SHARED, SHARED_RESERVED, SM_WARPS, SM_PROGRAMS = 65536, 256, 233472, 1024, 64, 32


def resident(c: Compiled) -> int | None:
    """How many of the launch's programs an SM holds at once, by its registers a thread, warps a program and shared
    memory (None: registers unknown, or no warps)."""
    if c.registers is None or not c.warps:
        return None
    per_warp = -(-c.registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return min(SM_REGISTERS // (per_warp * c.warps), SM_SHARED // (c.shared_bytes + SHARED_RESERVED),
               SM_WARPS // c.warps, SM_PROGRAMS)


def waves(c: Compiled, sms: int) -> float | None:
    """The launch's programs over what `sms` SMs hold at once (`resident`): above 1, its last programs start as the
    first leave (at 2.3, three rounds, the last a third full)."""
    held = resident(c)
    return None if not held or not c.programs else c.programs / (held * sms)


def _barriers(path: list[str]) -> int:
    """The CTA barriers (BAR.SYNC) among SASS instructions."""
    return sum(bool(re.search(r"\bBAR\.SYNC", line)) for line in path)


def _loads_after_barrier(ptx: str) -> int | None:
    """Global loads after the first bar.sync that follows the PDL wait (None without a wait)."""
    if "griddepcontrol.wait" not in ptx:
        return None
    after = ptx.split("griddepcontrol.wait", 1)[1]
    return len(re.findall(r"ld\.global", after.split("bar.sync", 1)[1])) if "bar.sync" in after else 0


def _loads_after_wait(ptx: str) -> int | None:
    """Global loads after the PDL wait: with PREFETCH only activations (no weight) should be left there."""
    if "griddepcontrol.wait" not in ptx:
        return None
    return len(re.findall(r"ld\.global", ptx.split("griddepcontrol.wait", 1)[1]))


def compile_plan(plan: Any, arch: int = 90) -> list[Compiled]:
    """Each distinct Triton kernel of a plan (layer 0's embedding variant of ln_qkv or add_ln apart),
    compiled; the library's GEMMs of the gemm path (LibraryCall) are not Triton's and are left out."""
    out: list[Compiled] = []
    seen: set[tuple[str, Any]] = set()
    heads = getattr(getattr(plan, "workspace", None), "heads", None)  # a folding plan's counters: two a tail
    for launch in plan.launches:
        if not hasattr(launch, "kernel"):
            continue
        key = (launch.name, launch.meta.get("EMBED"))
        if key in seen:
            continue
        seen.add(key)
        kernel = compile_launch(launch, arch)
        ptx = kernel.asm["ptx"]
        regs, spills = ptxas_usage(ptx, arch)
        code = sass(kernel.asm["cubin"])
        path = after_wait(code)
        tail = fold_tail(code) if launch.meta.get("FOLD") else None
        loop = loop_after_wait(code)
        out.append(Compiled(launch.name, "embed" if launch.meta.get("EMBED") else "", regs, spills,
                            int(kernel.metadata.shared), len(re.findall(r"ld\.global(?:\.\w+)*\.v[24]", ptx)),
                            len(re.findall(r"\b(?:w?gmma|mma)\.", ptx)), ptx.count("griddepcontrol."),
                            _loads_after_wait(ptx), len(re.findall(r"\batom\.", ptx)),
                            len(re.findall(r"\bld(?:\.\w+)*\.acquire\b", ptx)),
                            len(re.findall(r"^\s*(?:atom\.|ld(?:\.\w+)*\.acquire\b)", ptx, flags=re.M)),
                            _loads_after_barrier(ptx), None if path is None else len(path),
                            None if path is None else _barriers(path), None if path is None else late_loads(path),
                            None if tail is None else len(tail),
                            None if tail is None else _barriers(tail), None if tail is None else late_loads(tail),
                            len(re.findall(r"\bcp\.async\.bulk\.prefetch\.L2\b", ptx)),
                            math.prod(launch.grid), int(launch.meta.get("num_warps", 4)),
                            int(heads.numel()) // 2 if launch.meta.get("FOLD") and heads is not None else 0,
                            loop is not None, None if loop is None else len(loop),
                            None if loop is None else sum(bool(re.search(r"\bSHFL\b", x)) for x in loop)))
    return out


def plan_for_shapes(model: Any, dtype: torch.dtype, batch: int, max_len: int = 256, pdl: bool = False,
                    sms: int = 132, prefetch: bool = False, path: str | None = None, persistent: bool = False,
                    fold: bool | None = None, card: str = "", residual: torch.dtype | None = None,
                    argmax_fold: bool | None = None) -> Any:
    """A plan over CPU tensors of the model's shapes (no device needed; PDL's device check skipped): `model` is "gpt2",
    "tiny" or a lab.contract.profiles.ModelSpec; `persistent`: lab.step.fused.persistent's, one program an SM;
    `fold`: the attention folded into ln_qkv (lab.step.fused.step.prepare; None: as a PDL plan on a device would,
    FOLD_WITH_PDL); `card`: the card whose per-card tables apply (configs.device_card; "" for none); `residual`: the
    residual stream's dtype and `argmax_fold` the argmax taken by lm_head's last program (step.prepare's)."""
    from lab.step.decode import new_state
    from lab.step.fused import step as S
    from lab.step.fused.tune import random_weights
    from lab.contract.profiles import GPT2, TINY

    spec = {"gpt2": GPT2, "tiny": TINY}[model] if isinstance(model, str) else model
    w = random_weights(spec, dtype, "cpu")
    state = new_state(w, batch, min(max_len, spec.n_positions))
    if persistent:
        from lab.step.fused import persistent as PS

        return PS.prepare(state, w, sms=sms)
    plan = S.prepare(state, w, sms=sms, prefetch=prefetch, path=path, fold=S.folds(fold, pdl), card=card,
                     residual=residual, argmax_fold=argmax_fold)
    if pdl:  # the same launches with PDL's switches on (prepare refuses PDL without a Hopper device)
        plan.launches = [replace(launch, meta={**launch.meta, "USE_PDL": True, "launch_pdl": True})
                         if isinstance(launch, S.Launch) else launch for launch in plan.launches]
    return plan


def anatomy_plan(plan: Any) -> Any:
    """`plan` with its launches replaced by each kernel in every variant that lab.step.fused.anatomy times (named
    kernel:variant): what the switches compile to (the stages left out, PDL's calls)."""
    from lab.step.fused import anatomy as A, stages as ST

    plan.launches = [A.made(launch, v) for name, launch in A.bound(plan).items() for v in ST.VARIANTS
                     if ST.applies(name, v)]
    return plan


def _switch(text: str) -> dict[str, dict[str, int]]:
    """`KERNEL:SWITCH=V` -> {kernel: {switch: V}}, parsed as lab.step.fused.ab parses an arm's switches (its kernel named
    by the step; a config field, which would need the plan prepared again, is refused)."""
    from lab.step.fused.ab import parse_arm

    expected = f"{text!r}: expected KERNEL:SWITCH=V with an integer V, e.g. ln_qkv:KV_L2=1"
    try:
        arm = parse_arm(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{expected} ({exc})") from None
    if arm.configs or not arm.switches:
        raise argparse.ArgumentTypeError(expected + (" (a config field: aot compiles the configs the tables choose)"
                                                     if arm.configs else ""))
    return arm.switches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.step.fused.aot", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2", choices=("gpt2", "tiny", *GPT2_SIZES),
                   help="gpt2 (124M) or tiny, whole; a GPT-2 size by name, two layers of its shapes")
    p.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"], choices=("float32", "bfloat16"))
    p.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    p.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: Hopper)")
    p.add_argument("--pdl", action="store_true")
    p.add_argument("--prefetch", action="store_true", help="the PREFETCH kernels with one-chunk configs")
    p.add_argument("--anatomy", action="store_true", help="each kernel in every variant lab.step.fused.anatomy times")
    p.add_argument("--persistent", action="store_true", help="the persistent plan: one layer kernel with a grid barrier")
    p.add_argument("--fold", action=argparse.BooleanOptionalAction, default=None,
                   help="the attention folded into ln_qkv (four launches a layer; default: with --pdl, as on a device)")
    p.add_argument("--path", default=None, choices=("gemv", "gemm"),
                   help="force a projection path (default: the rule's at each batch, lab.step.fused.rule)")
    p.add_argument("--clock-mhz", type=float, default=H200_SM_MHZ,
                   help="the SM clock the issue floor after each wait is priced at (default: the H200's, which holds "
                        "it under load)")
    p.add_argument("--switch", action="append", default=[], type=_switch, metavar="KERNEL:SWITCH=V",
                   help="a compile-time switch bound on that kernel's launches, as an A/B arm binds it "
                        "(lab.step.fused.step.with_switches), e.g. ln_qkv:KV_AT_ONCE=1, or several joined by ';'; "
                        "repeatable")
    p.add_argument("--card", default="", metavar="NAME",
                   help="build the plan a card of this CUDA name takes (its per-card tables, lab.step.fused.configs."
                        "KV_AT_ONCE_FIRST, SUM_ONCE_FIRST), e.g. 'NVIDIA H100 80GB HBM3'; default: none (the tables every card takes)")
    args = p.parse_args(argv)
    switches: dict[str, dict[str, int]] = {}
    for bound in args.switch:
        for kernel, by_name in bound.items():
            switches.setdefault(kernel, {}).update(by_name)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("lab.step.fused.aot compiles for a GPU: unset TRITON_INTERPRET", file=sys.stderr)
        return 2
    bad = 0
    model = args.model if args.model in ("gpt2", "tiny") else replace(GPT2_SIZES[args.model], n_layer=2)
    for dname in args.dtype:
        for batch in args.batch:
            plan = plan_for_shapes(model, getattr(torch, dname), batch, pdl=args.pdl, prefetch=args.prefetch,
                                   path=args.path, persistent=args.persistent, fold=args.fold, card=args.card)
            plan = anatomy_plan(plan) if args.anatomy else plan
            if switches:
                from lab.step.fused.step import with_switches

                try:
                    plan = with_switches(plan, switches)
                except ValueError as e:
                    print(f"--switch: {e}", file=sys.stderr)
                    return 2
            print(f"{args.model} {dname} batch {batch} sm_{args.arch}{' pdl' if args.pdl else ''}"
                  f"{' prefetch' if args.prefetch else ''}{' fold' if plan.fold else ''} path {plan.path}:")
            layer_us = 0.0
            for c in compile_plan(plan, args.arch):
                cfg = getattr(plan.configs.get(c.name.split(":")[0]), "__dict__", "")
                issue = issue_after_wait_us(c, plan.sms, args.clock_mhz)
                rounds = waves(c, plan.sms)
                if c.name in LAYER_KERNELS and c.variant != "embed":
                    layer_us += issue or 0.0
                print(f"  {c.name:9s} {c.variant:5s} regs {c.registers} spill {c.spill_bytes} B  "
                      f"smem {c.shared_bytes} B  v-loads {c.vector_loads}  mma {c.tensor_core_ops}  "
                      f"gdc {c.grid_dependency_ops}  loads after wait {c.loads_after_wait} (after its first barrier "
                      f"{c.loads_after_barrier})  atomics {c.atomics} acquires "
                      f"{c.acquires} ({c.unpredicated_atomics} unpredicated)  sass after wait "
                      f"{c.post_wait_instructions} ({c.barriers_after_wait} barriers, {c.late_loads_after_wait} loads "
                      "after its first exchange)"
                      + (f"  fold tail {c.tail_instructions} ({c.tail_barriers} barriers, {c.tail_late_loads} "
                         "loads after its first exchange)"
                         if c.tail_instructions is not None else "")
                      + (f"  L2 prefetches {c.l2_prefetches}" if c.l2_prefetches else "")
                      + (f"  loop {c.loop_instructions} a chunk ({c.loop_shuffles} shuffles)"
                         if c.loop_instructions is not None else "")
                      + (f"  issue after wait >= {issue:.2f} us ({c.programs} programs x {c.warps} warps)"
                         if issue is not None else "")
                      + (f"  {resident(c)} an SM, {rounds:.2f} waves" if rounds else "")
                      + f"  {cfg}")
                bad += bool(c.spill_bytes) or c.registers is None
            if layer_us:
                print(f"  issue after the waits, a layer (its launches after the first): >= {layer_us:.2f} us "
                      f"({plan.sms} SMs at {args.clock_mhz:.0f} MHz)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
