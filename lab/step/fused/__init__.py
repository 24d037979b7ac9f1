"""The hand-fused decode step (`fused`, `fused-pdl`, `fused-pdl-prefetch`): GPT-2's decode step as 62 Triton launches.

- `lab.step.fused.step`: the step (`fused_step`, `fused_step_pdl`, `fused_step_pdl_prefetch`, and `bind`,
  which lab.step.methods' rows use), its plan and workspace; the module docstring gives the kernel
  count and the byte budget.
- `lab.step.fused.kernels`: the Triton kernels by name; they live in `projections` (the GEMV kernels),
  `attention` (flash-decoding, the split combine) and `rows` (layer norm + residual, GELU, argmax), one
  docstring each (what it fuses, bytes, launches).
- `lab.step.fused.rule`: which projection path a plan takes at a (batch, size, dtype): the GEMV kernels, or
  the library's GEMMs with the Triton row kernels around them (`lab.step.fused.library`); declared, with reasons.
- `lab.step.fused.layout`: on the gemm path, how each projection calls the library (cuBLASLt's bias epilogue or
  the plain GEMM, on W or a transposed copy): the forms, the declared default (the CPU's), and the selection
  that `library.choose_forms` times on CUDA when a plan is built (the `fused_layouts` note records it). Its
  benefit is unmeasured until an H200 run.
- `lab.step.fused.configs`: block sizes (heuristics + the tuned table) and the byte budget; no Triton.
- `lab.step.fused.traffic`: each launch's bytes per call (weights, KV cache, activations), on both paths; no Triton.
- `lab.step.fused.breakdown`: a profiled step kernel by kernel (time, bytes, achieved bandwidth, the latency fit).
- `lab.step.fused.tune`: `python -m lab.step.fused.tune` times candidate configs on a GPU (`--pdl --prefetch`: as
  `fused-pdl-prefetch` runs).
- `lab.step.fused.check`: side-by-side runs against the eager step (free-running, and teacher-forced in bf16).
- `lab.step.fused.aot`: `python -m lab.step.fused.aot` compiles every kernel for sm_90 without a GPU (registers,
  spills, the loads left after the PDL wait).
- `lab.step.fused.stages` and `lab.step.fused.anatomy`: each kernel's LEAVE_OUT switch (weights, input, stores, the
  PDL wait), the variants that leave one stage out and what their times say; the launches lab.experiments.fused_anatomy
  times (issue 31: where each ~4 us kernel goes).
- `lab.step.fused.persistent` and `lab.step.fused.grid`: the step with one persistent kernel a layer (14 launches),
  its phases separated by a grid barrier; run only in a child process with a watchdog (lab.experiments.fused_persistent).

Importing this package does not import Triton; `lab.step.fused.step` does.
"""

from __future__ import annotations


def triton_import_error() -> str | None:
    """Why Triton cannot be imported here (None when it can): the fused step's one prerequisite."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install raising something else
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None
