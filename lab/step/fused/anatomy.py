"""The launches that time where a fused-step kernel's ~4 us go: one bound launch of a plan, made into each variant of
lab.step.fused.stages (the same kernel with its LEAVE_OUT switch, or the idle kernel with its grid and warps).

`bound(plan)` picks each kernel's first launch that does not embed (layer 1's ln_qkv: layer 0's also gathers the
embedding); `made(launch, variant)` is that launch as the variant runs it; `series(launches, n)` the n back-to-back
launches that one CUDA graph holds for a timing (lab.experiments.fused_anatomy), taking turns over `rotated(launch,
copies)`: the launch bound to each copy of what it streams (its weight matrix, attention's cache), so that, as in
the step, whose weights are ten times the L2, those bytes come from HBM and not from the L2 the previous launch
filled. Use a `repeatable` plan (lab.step.fused.step.prepare): every launch then does the same work each time.

`step_variant(plan, variant)` is a whole step with every launch in one of lab.step.fused.stages.STEP_VARIANTS.

`without(plan, kernels)` and `idled(plan, kernels)` are bounds for `python -m lab.step.fused.ab` (`KERNEL:ABSENT=1`,
`KERNEL:IDLE=1`): the step with every launch of those kernels left out, or made the idle kernel with its grid and
warps. Their values are not the step's; their times bound what folding that kernel's work elsewhere could save: no
fold takes the step below the time `without` gives (a fold still reads the kernel's weights), and `idled` says how
much of the kernel's place on the chain is its launch and hand-over rather than its work.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from lab.step.fused.kernels import idle_kernel
from lab.step.fused.launch import Launch
from lab.step.fused.stages import KERNELS, Variant


def bound(plan: Any) -> dict[str, Launch]:
    """Each kernel of lab.step.fused.stages.KERNELS: its first launch in the plan that does not embed."""
    out: dict[str, Launch] = {}
    for launch in plan.launches:
        if isinstance(launch, Launch) and launch.name in KERNELS and not launch.meta.get("EMBED"):
            out.setdefault(launch.name, launch)
    missing = [k for k in KERNELS if k not in out]
    if missing:
        raise ValueError(f"the plan (path {plan.path}) has no launch of {', '.join(missing)}: the gemv path has them")
    return out


def made(launch: Launch, variant: Variant) -> Launch:
    """`launch` as `variant` runs it: PDL on or off (its `USE_PDL` and `launch_pdl`), the stages left out, or the
    idle kernel with the launch's grid (one program for `one_program`) and warps."""
    pdl = {"USE_PDL": variant.pdl, **({"launch_pdl": True} if variant.pdl else {})}
    if variant.idle:
        return Launch(f"{launch.name}:{variant.name}", idle_kernel, (1,) if variant.one_program else launch.grid, (),
                      {"num_warps": launch.meta.get("num_warps", 4), **pdl})
    meta = {k: v for k, v in launch.meta.items() if k != "launch_pdl"}
    return replace(launch, name=f"{launch.name}:{variant.name}", meta={**meta, **pdl, "LEAVE_OUT": int(variant.leave_out)})


def step_variant(plan: Any, variant: Variant) -> list[Launch]:
    """Every launch of `plan` (the gemv path: Triton launches only) as `variant` (lab.step.fused.stages.STEP_VARIANTS)
    runs it, with the plan's own PDL: the idle kernel with each launch's grid, or each launch with the variant's stages
    left out where its kernel has the switch (argmax has none: it stays as it is), in the launches of the variant's
    `only` kernel where it names one."""
    if variant.pdl and not plan.pdl:
        raise ValueError(f"the step variant {variant.name!r} is a PDL step's only")
    as_run = replace(variant, pdl=plan.pdl)
    out: list[Launch] = []
    for launch in plan.launches:
        if not isinstance(launch, Launch):
            raise ValueError(f"the plan (path {plan.path}) calls the library: the step's variants need the gemv path")
        switch = "LEAVE_OUT" in launch.kernel.arg_names and variant.only in ("", launch.name)
        out.append(made(launch, as_run) if as_run.idle or (switch and as_run.leave_out) else launch)
    return out


def _named(plan: Any, kernels: Sequence[str], what: str) -> set[str]:
    """`kernels` as a set, each of which has a launch in `plan`; ValueError naming one that has none."""
    have = {launch.name for launch in plan.launches}
    missing = [k for k in kernels if k not in have]
    if missing:
        raise ValueError(f"{what}: the plan (path {plan.path}) has no launch of {', '.join(missing)}")
    return set(kernels)


def without(plan: Any, kernels: Sequence[str]) -> Any:
    """`plan` with every launch of `kernels` left out (a bound, not the step: what reads their outputs reads stale
    values). Under PDL the launch after a left-out one waits for the one before it."""
    drop = _named(plan, kernels, "leaving kernels out")
    return replace(plan, launches=[launch for launch in plan.launches if launch.name not in drop])


def idled(plan: Any, kernels: Sequence[str]) -> Any:
    """`plan` with every launch of `kernels` made the idle kernel with its grid and warps (PDL's two calls where the
    plan has PDL): the launch and its hand-over kept, its work left out (a bound, not the step)."""
    idle = _named(plan, kernels, "idling kernels")
    library = sorted({launch.name for launch in plan.launches if launch.name in idle and not isinstance(launch, Launch)})
    if library:
        raise ValueError(f"idling kernels: {', '.join(library)} calls the library in this plan: no grid to idle")
    variant = Variant("idle", idle=True, pdl=plan.pdl)
    launches = [made(launch, variant) if isinstance(launch, Launch) and launch.name in idle else launch
                for launch in plan.launches]
    return replace(plan, launches=launches)


# What each kernel streams: the argument rotated over copies
STREAMED = {"ln_qkv": "w_ptr", "attention": "cache_ptr", "proj": "w_ptr", "ln_fc": "w_ptr", "fc2": "w_ptr",
            "lm_head": "wte_ptr"}


def rotated(launch: Launch, copies: Sequence[Any]) -> list[Launch]:
    """`launch` bound to each of `copies` in place of the tensor it streams (STREAMED)."""
    i = launch.kernel.arg_names.index(STREAMED[launch.name])
    return [replace(launch, args=launch.args[:i] + (c,) + launch.args[i + 1:]) for c in copies]


def series(launches: Sequence[Launch], n: int) -> Callable[[], None]:
    """n launches back to back, taking `launches` in turn (what one graph of a timing holds)."""
    def run() -> None:
        for i in range(n):
            launches[i % len(launches)]()

    return run
