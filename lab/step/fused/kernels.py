"""The Triton kernels of the hand-fused decode step, by name (see lab.step.fused.step for the whole step).

The kernels live by what they are:
- lab.step.fused.projections: the row-block GEMV kernels (ln_qkv, proj, ln_fc, fc2, lm_head), each with
  the row work around its matrix fused in (layer norm, bias, GELU, residual, the cache write);
- lab.step.fused.attention: flash-decoding over the cache (attention) and the combine of its splits;
- lab.step.fused.rows: the row kernels (the argmax and bookkeeping; the layer norm + residual, GELU
  and block-argmax kernels that the library-GEMM path puts around torch.addmm).

Programmatic dependent launch (USE_PDL, Hopper+): each kernel first tells the hardware that the
next kernel may be launched (`gdc_launch_dependents`), loads what no earlier kernel writes (weights,
parameters), and only then waits for the previous kernel (`gdc_wait`) before it reads an
activation, the position or the cache. With USE_PDL off both calls compile to nothing. A library
GEMM between two Triton kernels is launched without the attribute, so it starts after its
predecessor completes; a Triton kernel after it still waits in its own `gdc_wait` before reading.

LEAVE_OUT (the gemv path's kernels, lab.step.fused.stages): a bit set of stages to leave out when timing where a
kernel's time goes (lab.step.fused.anatomy); 0, the default, compiles to the kernel without the switch.
`idle_kernel` is PDL's two calls alone, launched with a kernel's grid and warps.
"""

from __future__ import annotations

import triton

from lab.step.fused.attention import attention_kernel, combine_kernel
from lab.step.fused.projections import (fc2_residual_kernel, lm_head_kernel, ln_fc_gelu_kernel, ln_qkv_kernel,
                                        proj_residual_kernel)
from lab.step.fused.rows import add_ln_kernel, argmax_advance_kernel, block_argmax_kernel, gelu_kernel, idle_kernel

KERNELS = {
    "ln_qkv": ln_qkv_kernel,
    "attention": attention_kernel,
    "proj": proj_residual_kernel,
    "ln_fc": ln_fc_gelu_kernel,
    "fc2": fc2_residual_kernel,
    "lm_head": lm_head_kernel,
    "argmax": argmax_advance_kernel,
    # the library-GEMM path's Triton kernels (lab.step.fused.library)
    "add_ln": add_ln_kernel,
    "combine": combine_kernel,
    "gelu": gelu_kernel,
    "block_argmax": block_argmax_kernel,
}
__all__ = ["KERNELS", "idle_kernel", "triton"]
