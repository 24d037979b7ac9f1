"""The row kernels of the fused step: layer norm (with the embedding or a residual add), GELU, the argmax.

The helpers at the top (residual rows, parameter vectors, layer-norm statistics, GELU) are shared with
the GEMV kernels (lab.step.fused.projections). The kernels below them work on whole rows of the
activations and read no weight matrix:

- `argmax_advance_kernel`: the step's last launch on both projection paths (the token, `out`, `pos`).
- `add_ln_kernel`, `gelu_kernel`, `block_argmax_kernel`: the elementwise work of the library-GEMM path
  (lab.step.fused.library), fused around its `torch.addmm` calls: the residual add and the next layer
  norm in one launch, GELU in place on the FC output, and the per-block argmax of the logits.

Every value is computed in fp32; what a kernel hands to a library GEMM is stored in the weights' dtype
(the GEMM's input), the residual stream stays fp32 (as on the GEMV path).
"""

from __future__ import annotations

import triton
import triton.language as tl

from lab.step.fused.stages import Stage

# the stages a launch may leave out (its LEAVE_OUT switch, a bit set: lab.step.fused.stages, lab.step.fused.anatomy)
_WEIGHTS = tl.constexpr(Stage.WEIGHTS.value)
_INPUT = tl.constexpr(Stage.INPUT.value)
_STORE = tl.constexpr(Stage.STORE.value)
_WAIT = tl.constexpr(Stage.WAIT.value)
_ATTEND = tl.constexpr(Stage.ATTEND.value)
_FENCE = tl.constexpr(Stage.FENCE.value)


# -------------------------------------------------------------------------------------- helpers

@triton.jit
def _pdl_launch(USE_PDL: tl.constexpr):
    """Under PDL: the next kernel may launch now; it waits in its own gdc_wait (nothing without PDL)."""
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _pdl_wait(USE_PDL: tl.constexpr, LEAVE_OUT: tl.constexpr = 0):
    """Under PDL: wait for the previous kernel to finish and its writes to be visible (nothing without PDL, or with
    the wait left out: Stage.WAIT)."""
    if USE_PDL and (_WAIT & LEAVE_OUT) == 0:
        tl.extra.cuda.gdc_wait()


@triton.jit
def _made(x, LEAVE_OUT: tl.constexpr, STAGE: tl.constexpr):
    """x as loaded; where LEAVE_OUT holds STAGE, a tile of its shape and dtype made without touching memory (from the
    program's id, so nothing folds the arithmetic on it away): the loads that made x are then dead, compiled out."""
    if (STAGE & LEAVE_OUT) != 0:
        x = (tl.zeros_like(x) + tl.program_id(0) * 1e-6).to(x.dtype)
    return x


@triton.jit
def _stored(mask, value, LEAVE_OUT: tl.constexpr):
    """A store's mask; with the stores left out (Stage.STORE) also `value != value`, false for every number but
    unknown to the compiler: the value is still computed, nothing is written."""
    if (_STORE & LEAVE_OUT) != 0:
        mask = mask & (value != value)
    return mask


@triton.jit
def idle_kernel(USE_PDL: tl.constexpr):
    """Nothing but PDL's two calls: launched with a kernel's grid and warps, the floor of launching, ramping up and
    draining that grid (lab.step.fused.anatomy)."""
    _pdl_launch(USE_PDL)
    _pdl_wait(USE_PDL)


@triton.jit
def _row_blocks(NBB, B, N, BB: tl.constexpr, BN: tl.constexpr):
    """This program's place in a 1-D grid of cdiv(N, BN) * NBB programs (`_row_blocks_at` its id)."""
    return _row_blocks_at(tl.program_id(0), NBB, B, N, BB, BN)


@triton.jit
def _row_blocks_at(pid, NBB, B, N, BB: tl.constexpr, BN: tl.constexpr):
    """Task `pid`'s place in a 1-D grid of cdiv(N, BN) * NBB tasks, batch fastest (the tasks that share
    one block of BN output rows, one weight tile, run side by side): (pid_n, its BB batch rows b, its BN output
    rows n, b < B, n < N). A launch's program is one task; a persistent program walks several."""
    pid_n = pid // NBB
    b = (pid % NBB) * BB + tl.arange(0, BB)
    n = pid_n * BN + tl.arange(0, BN)
    return pid_n, b, n, b < B, n < N


@triton.jit
def _load_vec(ptr, idx, N):
    """A parameter vector (bias, layer-norm weight or shift) at idx, widened to fp32 (zeros past N)."""
    return tl.load(ptr + idx, mask=idx < N, other=0.0).to(tl.float32)


@triton.jit
def _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, k, E, EMBED: tl.constexpr, LEAVE_OUT: tl.constexpr = 0):
    """Residual rows [BB, len(k)] in fp32: from the residual buffer (fp32, or the weights' dtype: step.prepare's
    `residual`), or (EMBED) wte[tok] + wpe[pos] (made in registers
    with the input left out: Stage.INPUT)."""
    mask = b_mask[:, None] & (k < E)[None, :]
    if EMBED:
        tok = tl.load(tok_ptr + b, mask=b_mask, other=0)
        x = tl.load(wte_ptr + tok[:, None] * E + k[None, :], mask=mask, other=0.0).to(tl.float32)
        x += tl.load(wpe_ptr + pos * E + k, mask=k < E, other=0.0).to(tl.float32)[None, :]
    else:
        x = tl.load(x_ptr + b[:, None] * E + k[None, :], mask=mask, other=0.0).to(tl.float32)  # (a bf16 residual)
    return _made(x, LEAVE_OUT, _INPUT)


@triton.jit
def _add_pair(a, a2, b, b2):
    return a + b, a2 + b2


@triton.jit
def _ln_stats(x, k_mask, E: tl.constexpr, eps, FAST: tl.constexpr = False):
    """Mean and 1/std of each row of x [BB, BE] (columns past E left out; biased variance, as torch), from one
    reduction of the sum and the sum of squares: one pass of the program's threads and barriers, not two in a row
    (the mean, then the squares about it). var = E[x^2] - mean^2 loses digits only where |mean| is large beside the spread, which a
    residual row's is not (the fp32 step's tokens stay eager's: tests/test_fused.py, the interpreter's cases).

    FAST (the PREFETCH kernels, where every thread of a program computes its rows' statistics on the chain after the
    PDL wait): the sums scaled by the constant 1/E and 1/std the hardware's reciprocal square root (as torch's CUDA
    layer norm takes it), where correctly rounded divisions and a square root took about 40 machine instructions, each
    with a branch to a slow path. Otherwise correctly rounded: the gemm path's add_ln (see `_gelu`), the chunked GEMV
    kernels and lm_head (lab.step.fused.projections._ln_gemv)."""
    x = tl.where(k_mask[None, :], x, 0.0)
    total, squares = tl.reduce((x, x * x), 1, _add_pair)
    if FAST:
        mean = total * (1.0 / E)
        var = tl.maximum(squares * (1.0 / E) - mean * mean, 0.0)
        rstd = tl.math.rsqrt(var + eps)
    else:
        mean = tl.div_rn(total, E * 1.0)
        var = tl.maximum(tl.div_rn(squares, E * 1.0) - mean * mean, 0.0)
        rstd = tl.div_rn(1.0, tl.sqrt_rn(var + eps))
    return mean, rstd


@triton.jit
def _ln_apply(x, mean, rstd, g_ptr, beta_ptr, k, E):
    """Layer norm of a chunk x [BB, BK] at columns k, with the row statistics."""
    g = tl.load(g_ptr + k, mask=k < E, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + k, mask=k < E, other=0.0).to(tl.float32)
    return (x - mean[:, None]) * rstd[:, None] * g[None, :] + beta[None, :]


@triton.jit
def _gelu(y, FAST: tl.constexpr = False):
    """gelu(y), tanh approximation: y/2 (1 + tanh(u)), u = sqrt(2/pi) (y + 0.044715 y^3). With tanh(u) =
    2 sigmoid(2u) - 1 that is y * sigmoid(2u) = y / (1 + exp(-2u)): no cancellation near 0, exact limits at +-inf.

    FAST (ln_fc's PREFETCH path, whose every thread computes GELU on the reduction's results it holds): the fast
    division (a reciprocal and a multiply, within 2 ulp), where a correctly rounded one took about 10 machine
    instructions more a value. Otherwise correctly rounded: the chunked ln_fc and the gemm path's gelu kernel (one value
    a thread). With both fast on the gemm path too, GPT-2 1.5B's bf16 step at batch 8 fell below the teacher-forced
    rule on the H200 (agreement 0.4453 against at least 0.4487; 0.4570 correctly rounded), so that path keeps what it
    was measured with."""
    if FAST:  # exp(-2u) = 2^(y (A + B y^2)): the three constant factors folded into two, one multiply a value less
        A: tl.constexpr = -2.0 * 1.4426950408889634 * 0.7978845608028654
        out = tl.fdiv(y, 1.0 + tl.exp2(y * (A + (A * 0.044715) * (y * y))))
    else:
        u = 0.7978845608028654 * (y + 0.044715 * y * y * y)
        out = tl.div_rn(y, 1.0 + tl.exp(-2.0 * u))
    return out


# ----------------------------------------------------------------------------- the step's last launch

@triton.jit
def argmax_advance_kernel(part_val, part_idx, tok_ptr, out_ptr, pos_ptr, new_pos_ptr, MAXLEN, B: tl.constexpr,
                          NBLK: tl.constexpr,
                          BB: tl.constexpr, BP: tl.constexpr, USE_PDL: tl.constexpr):
    """The argmax over the lm_head's row blocks + the step's bookkeeping, in one program.

    For every batch row: token = index of the largest partial (first on ties: blocks are in index
    order); tok[b] = token; out[b, pos + 1] = token (nothing is written past the end). Then
    new_pos = pos + 1 (the step passes new_pos_ptr = pos_ptr: the position advances on the device).
    One program, so no other program can read pos after it moved.
    Bytes: reads 8 B per lm_head program per batch row (about 6 KB at batch 1); writes 16 B.
    Launches per step: 1 (none where lm_head's last program does this work: its ARGMAX_FOLD). Grid: 1 program.
    """
    _pdl_launch(USE_PDL)
    _pdl_wait(USE_PDL)
    _argmax_advance(part_val, part_idx, tok_ptr, out_ptr, pos_ptr, new_pos_ptr, MAXLEN, B, NBLK, BB, BP, False)


@triton.jit
def _candidates(ptrs, mask, other, CG: tl.constexpr):
    """A load of the lm_head programs' candidates: as any other, or through L2 (CG: `.cg`)."""
    if CG:
        x = tl.load(ptrs, mask=mask, other=other, cache_modifier=".cg")
    else:
        x = tl.load(ptrs, mask=mask, other=other)
    return x


@triton.jit
def _argmax_advance(part_val, part_idx, tok_ptr, out_ptr, pos_ptr, new_pos_ptr, MAXLEN, B: tl.constexpr,
                    NBLK: tl.constexpr, BB: tl.constexpr, BP: tl.constexpr, CG: tl.constexpr):
    """argmax_advance_kernel's work, by one program. CG: the candidates read through L2 (`.cg`), as a program that
    counted itself in after the programs that wrote them must read them (lab.step.fused.projections.lm_head_kernel's
    ARGMAX_FOLD)."""
    pos = tl.load(pos_ptr)
    j = tl.arange(0, BP)
    for b0 in range(0, B, BB):
        b = b0 + tl.arange(0, BB)
        b_mask = b < B
        mask = b_mask[:, None] & (j < NBLK)[None, :]
        val = _candidates(part_val + b[:, None] * NBLK + j[None, :], mask, float("-inf"), CG)
        blk = tl.argmax(val, axis=1, tie_break_left=True)
        tok = _candidates(part_idx + b * NBLK + blk, b_mask, 0, CG).to(tl.int64)
        tl.store(tok_ptr + b, tok, mask=b_mask)
        tl.store(out_ptr + b * MAXLEN + pos + 1, tok, mask=b_mask & (pos + 1 < MAXLEN))
    tl.store(new_pos_ptr, pos + 1)


# ------------------------------------------------------------------------- the library-GEMM path's rows

@triton.jit
def add_ln_kernel(x_in, y_ptr, tok_ptr, wte_ptr, wpe_ptr, pos_ptr, ln_w, ln_b, x_out, xn_ptr, B, eps,
                  E: tl.constexpr, BE: tl.constexpr, BB: tl.constexpr, EMBED: tl.constexpr, ADD: tl.constexpr,
                  USE_PDL: tl.constexpr):
    """The residual update and the layer norm after it, BB batch rows per program.

    x = wte[tok] + wpe[pos] (EMBED, layer 0) or x_in + y (ADD: y is the previous GEMM's output, bias
    included) -> x_out (fp32, the residual stream; the step passes x_in = x_out) -> layer_norm(x) -> xn
    in xn's dtype (the next GEMM's input). Used before the QKV GEMM (layer norm 1), before the FC GEMM
    (layer norm 2) and before the lm_head GEMM (the final layer norm).
    Bytes per row: reads and writes E fp32 of residual, reads E of y, writes E of xn, 2E of parameters.
    Grid: cdiv(B, BB) programs.
    """
    b = tl.program_id(0) * BB + tl.arange(0, BB)
    b_mask = b < B
    k = tl.arange(0, BE)
    k_mask = k < E
    mask = b_mask[:, None] & k_mask[None, :]
    _pdl_launch(USE_PDL)
    g = _load_vec(ln_w, k, E)  # parameters: written by nobody, safe before the wait
    beta = _load_vec(ln_b, k, E)
    _pdl_wait(USE_PDL)
    pos = tl.load(pos_ptr)
    rows = b[:, None] * E + k[None, :]
    x = _load_x(x_in, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, k, E, EMBED)
    if ADD:
        x += tl.load(y_ptr + rows, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_out + rows, x, mask=mask)
    mean, rstd = _ln_stats(x, k_mask, E, eps)
    xn = (x - mean[:, None]) * rstd[:, None] * g[None, :] + beta[None, :]
    tl.store(xn_ptr + rows, xn.to(xn_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_kernel(h_ptr, N, BLOCK: tl.constexpr, USE_PDL: tl.constexpr, FAST: tl.constexpr = False):
    """GELU in place on the FC GEMM's output h [B, 4E] (bias included), BLOCK values per program.

    Bytes: reads and writes B * 4E values in the weights' dtype. Grid: cdiv(B * 4E, BLOCK) programs.
    FAST: `_gelu`'s fast form, which only the PREFETCH ln_fc computes; the step never sets it here (a test runs both
    forms against torch's GELU through this kernel).
    """
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < N
    _pdl_launch(USE_PDL)
    _pdl_wait(USE_PDL)
    y = tl.load(h_ptr + i, mask=mask, other=0.0).to(tl.float32)
    tl.store(h_ptr + i, _gelu(y, FAST).to(h_ptr.dtype.element_ty), mask=mask)


@triton.jit
def block_argmax_kernel(logits_ptr, part_val, part_idx, B, NBB, V: tl.constexpr, NBLK: tl.constexpr,
                        BB: tl.constexpr, BN: tl.constexpr, USE_PDL: tl.constexpr):
    """Each block of BN logits' largest value and its index (first on ties), for argmax_advance_kernel.

    What lm_head_kernel does after its GEMV, here after the lm_head GEMM: on the logits as stored,
    so the token is the argmax of the returned logits. Bytes: reads B * V logits, writes 8 B per
    block and row. Grid: cdiv(V, BN) * cdiv(B, BB) programs, batch fastest.
    """
    pid_n, b, n, b_mask, n_mask = _row_blocks(NBB, B, V, BB, BN)
    _pdl_launch(USE_PDL)
    _pdl_wait(USE_PDL)
    val = tl.load(logits_ptr + b[:, None] * V + n[None, :], mask=b_mask[:, None] & n_mask[None, :],
                  other=float("-inf")).to(tl.float32)
    best = tl.argmax(val, axis=1, tie_break_left=True)
    tl.store(part_val + b * NBLK + pid_n, tl.max(val, axis=1), mask=b_mask)
    tl.store(part_idx + b * NBLK + pid_n, pid_n * BN + best, mask=b_mask)
