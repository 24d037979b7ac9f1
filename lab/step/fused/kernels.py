"""The Triton kernels of the hand-fused decode step (see lab.step.fused.step for the whole step).

Every matrix-vector product here is a *row-block GEMV*: a program owns BN output rows (a [BN, K]
block of an [out, in] weight matrix) and BB batch rows; it walks K in chunks of BK, multiplies
the weight tile by the input chunk and sums over K with `tl.sum` (plain fp32 multiply-add: no tf32,
no tensor cores, so fp32 results match eager's to rounding). Weights of any float dtype are
widened to fp32 as they are loaded; every accumulation is fp32. The grid is 1-D, batch fastest
(`pid_b = pid % NBB`), so the programs that share one weight tile run side by side and all but
the first read it from L2.

Each program also redoes the cheap row work its input needs (layer-norm statistics of a 768-wide
row, or combining the attention splits): a few KB from L2 instead of another launch.

Programmatic dependent launch (USE_PDL, Hopper+): each kernel first tells the hardware that the
next kernel may be launched (`gdc_launch_dependents`), loads what no earlier kernel writes (the
first weight tile), and only then waits for the previous kernel (`gdc_wait`) before it reads an
activation, the position or the cache. With USE_PDL off both calls compile to nothing.

PREFETCH (the `fused-pdl-prefetch` variant): every weight a program needs is loaded before that
wait, not only the first tile: with a config whose BK covers the whole row (lab.step.fused.configs.
prefetch_config) the program's whole weight slice (2-16 KB), and in every GEMV kernel the bias and
the layer-norm parameters, which the default kernels load after the wait (a DRAM round trip on the
critical path of every launch). The slice stays in the weights' dtype until it is used (half the
registers in bf16), and a one-chunk layer norm reuses the row it loaded for the statistics. So under
PDL a kernel streams its weights while the previous one finishes, and what is left after the wait
is activation traffic from L2 and arithmetic. Only weights move before the wait: nothing any kernel
writes, so the variant is as safe as the default ordering, in or out of a graph.

Byte counts in the docstrings are for GPT-2 124M (E=768, H=12, dh=64, 4E=3072, V=50257) at batch 1
in fp32; bf16 weights and cache halve the weight and cache terms.
"""

from __future__ import annotations

import triton
import triton.language as tl


# ---------------------------------------------------------------------------------------- helpers

@triton.jit
def _load_w(w_ptr, n, n_mask, k0, K, BK: tl.constexpr):
    """The weight tile [1, BN, BK] at columns k0.. (zeros past K), widened to fp32.

    Loaded in the 3-D shape of the product it feeds ([BB, BN, BK], summed over K), so the tile
    never changes layout between the load and the multiply.
    """
    k = k0 + tl.arange(0, BK)
    mask = n_mask[None, :, None] & (k < K)[None, None, :]
    return tl.load(w_ptr + n[None, :, None] * K + k[None, None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _load_w_raw(w_ptr, n, n_mask, K, BK: tl.constexpr):
    """The weight slice [1, BN, BK] at columns 0.. in the weights' own dtype (PREFETCH: widened at use)."""
    k = tl.arange(0, BK)
    mask = n_mask[None, :, None] & (k < K)[None, None, :]
    return tl.load(w_ptr + n[None, :, None] * K + k[None, None, :], mask=mask, other=0.0)


@triton.jit
def _load_vec(ptr, idx, N):
    """A parameter vector (bias, layer-norm weight or shift) at idx, widened to fp32 (zeros past N)."""
    return tl.load(ptr + idx, mask=idx < N, other=0.0).to(tl.float32)


@triton.jit
def _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, k, E, EMBED: tl.constexpr):
    """Residual rows [BB, len(k)] in fp32: from the residual buffer, or (EMBED) wte[tok] + wpe[pos]."""
    mask = b_mask[:, None] & (k < E)[None, :]
    if EMBED:
        tok = tl.load(tok_ptr + b, mask=b_mask, other=0)
        x = tl.load(wte_ptr + tok[:, None] * E + k[None, :], mask=mask, other=0.0).to(tl.float32)
        x += tl.load(wpe_ptr + pos * E + k, mask=k < E, other=0.0).to(tl.float32)[None, :]
    else:
        x = tl.load(x_ptr + b[:, None] * E + k[None, :], mask=mask, other=0.0)
    return x


@triton.jit
def _ln_stats(x, k_mask, E: tl.constexpr, eps):
    """Mean and 1/std of each row of x [BB, BE] (two passes over registers, biased variance, as torch)."""
    mean = tl.div_rn(tl.sum(x, axis=1), E * 1.0)
    diff = tl.where(k_mask[None, :], x - mean[:, None], 0.0)
    var = tl.div_rn(tl.sum(diff * diff, axis=1), E * 1.0)
    return mean, tl.div_rn(1.0, tl.sqrt_rn(var + eps))


@triton.jit
def _ln_apply(x, mean, rstd, g_ptr, beta_ptr, k, E):
    """Layer norm of a chunk x [BB, BK] at columns k, with the row statistics."""
    g = tl.load(g_ptr + k, mask=k < E, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + k, mask=k < E, other=0.0).to(tl.float32)
    return (x - mean[:, None]) * rstd[:, None] * g[None, :] + beta[None, :]


@triton.jit
def _ln_gemv(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, g_ptr, beta_ptr, w_ptr, w_first, b, b_mask, n, n_mask,
             E: tl.constexpr, eps, EMBED: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             BE: tl.constexpr):
    """acc [BB, BN] = layer_norm(x[b]) @ W[n].T, with the first weight tile already loaded (w_first)."""
    ke = tl.arange(0, BE)
    mean, rstd = _ln_stats(_load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, ke, E, EMBED),
                           ke < E, E, eps)
    acc = tl.zeros([BB, BN], dtype=tl.float32)
    w = w_first
    for k0 in range(0, E, BK):
        k = k0 + tl.arange(0, BK)
        a = _ln_apply(_load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, k, E, EMBED), mean, rstd,
                      g_ptr, beta_ptr, k, E)
        acc += tl.sum(a[:, None, :] * w, axis=2)
        w = _load_w(w_ptr, n, n_mask, k0 + BK, E, BK)  # the next tile (all masked after the last)
    return acc


@triton.jit
def _ln_gemv_one(x, k_mask, E: tl.constexpr, eps, g, beta, w_raw):
    """PREFETCH, one chunk: acc [BB, BN] = layer_norm(x) @ W.T with x [BB, BE] the whole row already
    loaded, g and beta [BE] and the weight slice [1, BN, BE] loaded before the wait."""
    mean, rstd = _ln_stats(x, k_mask, E, eps)
    a = (x - mean[:, None]) * rstd[:, None] * g[None, :] + beta[None, :]
    return tl.sum(a[:, None, :] * w_raw.to(tl.float32), axis=2)


# ------------------------------------------------------------------------------- kernel 1 of 5

@triton.jit
def ln_qkv_kernel(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos_ptr, ln_w, ln_b, w_ptr, bias_ptr, q_ptr, cache_ptr,
                  B, NBB, L, eps, E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                  EMBED: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr,
                  USE_PDL: tl.constexpr, PREFETCH: tl.constexpr = False):
    """Layer norm 1 + the QKV projection + bias + the K/V cache write (layer 0: + the embedding).

    GPT-2's query, key and value projections are already one [3E, E] matrix (`attn_w`, the layout
    of the checkpoint's c_attn, kept as [out, in]): one GEMV reads all three, so there is no
    separate "fused QKV" layout left to try.

    Fuses: [embed: wte[tok] + wpe[pos], stored as the residual by the first row block] ->
    layer_norm(x) -> x @ attn_w.T + attn_b over the fused [3E, E] matrix -> q to the workspace,
    k and v straight into cache[layer][0|1, b, h, pos, :] at the device-side position.
    Bytes (GPT-2 124M, batch 1, fp32): reads the 7.08 MB QKV matrix + 9 KB bias + 6 KB of norm
    weights (each program also re-reads the 3 KB residual row from L2); writes 3 KB of q and 6 KB
    of K/V. Launches per step: one per layer (12); layer 0's variant also embeds.
    Grid: cdiv(3E, BN) * cdiv(B, BB) programs.
    """
    pid_n = tl.program_id(0) // NBB  # batch fastest: programs sharing a weight tile run together
    b = (tl.program_id(0) % NBB) * BB + tl.arange(0, BB)
    n = pid_n * BN + tl.arange(0, BN)
    b_mask = b < B
    n_mask = n < 3 * E
    ke = tl.arange(0, BE)
    if USE_PDL:  # the next kernel may launch now; it waits in its own gdc_wait
        tl.extra.cuda.gdc_launch_dependents()
    if PREFETCH:  # every weight of this program, before the wait (BK == BE: the whole slice)
        w_first = _load_w_raw(w_ptr, n, n_mask, E, BK)
        bias = _load_vec(bias_ptr, n, 3 * E)
        g = _load_vec(ln_w, ke, E)
        beta = _load_vec(ln_b, ke, E)
    else:
        w_first = _load_w(w_ptr, n, n_mask, 0, E, BK)  # weights: written by nobody, safe before the wait
    if USE_PDL:  # wait for the previous kernel to finish and its writes to be visible
        tl.extra.cuda.gdc_wait()
    pos = tl.load(pos_ptr)
    if EMBED:
        if pid_n == 0:  # one row block stores the embedded residual for the later kernels
            x0 = _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, ke, E, True)
            tl.store(x_ptr + b[:, None] * E + ke[None, :], x0, mask=b_mask[:, None] & (ke < E)[None, :])
    if PREFETCH:
        x = _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, ke, E, EMBED)
        acc = _ln_gemv_one(x, ke < E, E, eps, g, beta, w_first)
        out = acc + bias[None, :]
    else:
        acc = _ln_gemv(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, ln_w, ln_b, w_ptr, w_first, b, b_mask, n, n_mask,
                       E, eps, EMBED, BB, BN, BK, BE)
        out = acc + tl.load(bias_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    part = n // E  # 0: q, 1: k, 2: v
    col = n % E
    is_q = n_mask & (part == 0)
    tl.store(q_ptr + b[:, None] * E + col[None, :], out, mask=b_mask[:, None] & is_q[None, :])
    # cache [2, B, H, L, DH]: K at index 0, V at 1; slot `pos` (nothing is written past the end)
    kv = tl.maximum(part - 1, 0)
    h = col // DH
    d = col % DH
    off = ((kv[None, :] * B + b[:, None]) * H + h[None, :]) * L * DH + pos * DH + d[None, :]
    is_kv = n_mask & (part > 0) & (pos < L)
    tl.store(cache_ptr + off, out.to(cache_ptr.dtype.element_ty), mask=b_mask[:, None] & is_kv[None, :])


# ------------------------------------------------------------------------------- kernel 2 of 5

@triton.jit
def attention_kernel(q_ptr, cache_ptr, pos_ptr, part_o, part_m, part_l, B, L, scale, E: tl.constexpr,
                     H: tl.constexpr, DH: tl.constexpr, NS: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr,
                     USE_PDL: tl.constexpr, EARLY: tl.constexpr = False):
    """Attention of one query over the cache, split over slots (flash-decoding), unnormalised.

    Program (b, h, s) reads q[b, h] and the K and V of slots [s*BS, (s+1)*BS) that are <= pos
    (slots past the position are masked in the load, so they cost no memory traffic), and writes
    this split's running max m, sum of exp l and the exp-weighted sum of V o (dh floats). The
    projection kernel combines the NS splits as it loads its input, so no extra launch is needed.
    Bytes (GPT-2 124M, batch 1, fp32): 3 KB of q + 6 KB of K/V per reached slot over the 12 heads
    (1.57 MB at a full 256-slot cache); writes 12 * NS * 66 * 4 B of partials.
    Launches per step: one per layer (12). Grid: B * H * NS programs, NS = cdiv(max_len, BS).

    EARLY (the prefetch variant, when the split's K and V fit ~64 values a thread): K and V of every
    slot of the split below max_len are loaded together right after the wait, not masked by the
    position, so no load waits for the position and V does not wait for the softmax (the default
    order is three dependent memory round trips: position, K, then V). Unreached slots are masked
    out of the scores and zeroed in V; the cost is reading them (at most the whole split).
    """
    pid = tl.program_id(0)
    s = pid % NS
    bh = pid // NS
    b = bh // H
    h = bh % H
    if USE_PDL:  # the next kernel may launch now; it waits in its own gdc_wait
        tl.extra.cuda.gdc_launch_dependents()
    if USE_PDL:  # wait for the previous kernel to finish and its writes to be visible
        tl.extra.cuda.gdc_wait()
    d = tl.arange(0, BD)
    d_mask = d < DH
    slot = s * BS + tl.arange(0, BS)
    base = (b * H + h) * L * DH + slot[:, None] * DH + d[None, :]
    if EARLY:  # every slot of the split inside the cache, K and V at once: nothing waits for the position
        inside = (slot < L)[:, None] & d_mask[None, :]
        k_raw = tl.load(cache_ptr + base, mask=inside, other=0.0)
        v_raw = tl.load(cache_ptr + B * H * L * DH + base, mask=inside, other=0.0)
    pos = tl.load(pos_ptr)
    q = tl.load(q_ptr + b * E + h * DH + d, mask=d_mask, other=0.0)
    valid = (slot <= pos) & (slot < L)
    mask = valid[:, None] & d_mask[None, :]
    if EARLY:
        k = k_raw.to(tl.float32)
    else:
        k = tl.load(cache_ptr + base, mask=mask, other=0.0).to(tl.float32)  # K: cache[0, b, h]
    scores = tl.where(valid, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
    m = tl.max(scores, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # a split with no reached slot: l = 0, o = 0
    p = tl.where(valid, tl.exp(scores - m_safe), 0.0)
    if EARLY:  # unreached slots may hold anything (a stale sequence): zero them, p is 0 there
        v = tl.where(mask, v_raw.to(tl.float32), 0.0)
    else:
        v = tl.load(cache_ptr + B * H * L * DH + base, mask=mask, other=0.0).to(tl.float32)  # V: cache[1, b, h]
    o = tl.sum(p[:, None] * v, axis=0)
    split = (b * H + h) * NS + s
    tl.store(part_o + split * DH + d, o, mask=d_mask)
    tl.store(part_m + split, m)
    tl.store(part_l + split, tl.sum(p, axis=0))


@triton.jit
def _attention_chunk(part_o, part_m, part_l, b, b_mask, k, E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                     NS: tl.constexpr, BB: tl.constexpr, BK: tl.constexpr):
    """att[b, k] [BB, BK]: the NS splits of head k // DH combined (softmax normalisation included)."""
    mask = b_mask[:, None] & (k < E)[None, :]
    split0 = (b[:, None] * H + (k // DH)[None, :]) * NS
    d = (k % DH)[None, :]
    m_max = tl.full([BB, BK], float("-inf"), tl.float32)
    for s in range(NS):
        m_max = tl.maximum(m_max, tl.load(part_m + split0 + s, mask=mask, other=0.0))
    num = tl.zeros([BB, BK], dtype=tl.float32)
    den = tl.zeros([BB, BK], dtype=tl.float32)
    for s in range(NS):  # split 0 always holds slot 0, so m_max is finite: empty splits weigh exp(-inf) = 0
        wgt = tl.exp(tl.load(part_m + split0 + s, mask=mask, other=0.0) - m_max)
        num += wgt * tl.load(part_o + (split0 + s) * DH + d, mask=mask, other=0.0)
        den += wgt * tl.load(part_l + split0 + s, mask=mask, other=0.0)
    return tl.div_rn(num, tl.where(mask, den, 1.0))


# ------------------------------------------------------------------------------- kernel 3 of 5

@triton.jit
def proj_residual_kernel(part_o, part_m, part_l, w_ptr, bias_ptr, x_in, x_out, B, NBB, E: tl.constexpr,
                         H: tl.constexpr, DH: tl.constexpr, NS: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr,
                         BK: tl.constexpr, USE_PDL: tl.constexpr, PREFETCH: tl.constexpr = False):
    """Combine the attention splits + the output projection + bias + the residual add.

    Fuses: softmax normalisation across splits (on load) -> att @ proj_w.T + proj_b -> x + that.
    The step passes x_in = x_out (in place: each program reads and writes only its own rows).
    Bytes (GPT-2 124M, batch 1, fp32): reads the 2.36 MB projection matrix + 3 KB bias; each
    program re-reads the 12 * NS * 66 * 4 B of partials from L2; reads and writes 3 KB of residual.
    Launches per step: one per layer (12). Grid: cdiv(E, BN) * cdiv(B, BB) programs.
    """
    b = (tl.program_id(0) % NBB) * BB + tl.arange(0, BB)  # batch fastest
    n = (tl.program_id(0) // NBB) * BN + tl.arange(0, BN)
    b_mask = b < B
    n_mask = n < E
    if USE_PDL:  # the next kernel may launch now; it waits in its own gdc_wait
        tl.extra.cuda.gdc_launch_dependents()
    if PREFETCH:  # the whole slice (BK >= E) and the bias, before the wait
        bias = _load_vec(bias_ptr, n, E)
        w_raw = _load_w_raw(w_ptr, n, n_mask, E, BK)
    else:
        w = _load_w(w_ptr, n, n_mask, 0, E, BK)
    if USE_PDL:  # wait for the previous kernel to finish and its writes to be visible
        tl.extra.cuda.gdc_wait()
    if PREFETCH:
        a = _attention_chunk(part_o, part_m, part_l, b, b_mask, tl.arange(0, BK), E, H, DH, NS, BB, BK)
        acc = tl.sum(a[:, None, :] * w_raw.to(tl.float32), axis=2)
    else:
        acc = tl.zeros([BB, BN], dtype=tl.float32)
        for k0 in range(0, E, BK):
            a = _attention_chunk(part_o, part_m, part_l, b, b_mask, k0 + tl.arange(0, BK), E, H, DH, NS, BB, BK)
            acc += tl.sum(a[:, None, :] * w, axis=2)
            w = _load_w(w_ptr, n, n_mask, k0 + BK, E, BK)
    mask = b_mask[:, None] & n_mask[None, :]
    rows = b[:, None] * E + n[None, :]
    out = tl.load(x_in + rows, mask=mask, other=0.0) + acc
    if PREFETCH:
        out += bias[None, :]
    else:
        out += tl.load(bias_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(x_out + rows, out, mask=mask)


# ------------------------------------------------------------------------------- kernel 4 of 5

@triton.jit
def ln_fc_gelu_kernel(x_ptr, ln_w, ln_b, w_ptr, bias_ptr, h_ptr, B, NBB, eps, E: tl.constexpr, F: tl.constexpr,
                      BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr,
                      USE_PDL: tl.constexpr, PREFETCH: tl.constexpr = False):
    """Layer norm 2 + the first MLP matrix + bias + GELU (tanh approximation).

    Fuses: layer_norm(x) -> @ fc_w.T + fc_b -> gelu -> the hidden activations h [B, 4E] (fp32).
    Bytes (GPT-2 124M, batch 1, fp32): reads the 9.44 MB FC matrix + 12 KB bias + 6 KB norm
    weights (+ the 3 KB residual row per program, from L2); writes 12 KB of h.
    Launches per step: one per layer (12). Grid: cdiv(4E, BN) * cdiv(B, BB) programs.
    """
    b = (tl.program_id(0) % NBB) * BB + tl.arange(0, BB)  # batch fastest
    n = (tl.program_id(0) // NBB) * BN + tl.arange(0, BN)
    b_mask = b < B
    n_mask = n < F
    if USE_PDL:  # the next kernel may launch now; it waits in its own gdc_wait
        tl.extra.cuda.gdc_launch_dependents()
    ke = tl.arange(0, BE)
    if PREFETCH:  # the whole slice (BK == BE), the bias and the norm parameters, before the wait
        w_first = _load_w_raw(w_ptr, n, n_mask, E, BK)
        bias = _load_vec(bias_ptr, n, F)
        g = _load_vec(ln_w, ke, E)
        beta = _load_vec(ln_b, ke, E)
    else:
        w_first = _load_w(w_ptr, n, n_mask, 0, E, BK)
    if USE_PDL:  # wait for the previous kernel to finish and its writes to be visible
        tl.extra.cuda.gdc_wait()
    if PREFETCH:
        x = _load_x(x_ptr, x_ptr, x_ptr, x_ptr, 0, b, b_mask, ke, E, False)
        y = _ln_gemv_one(x, ke < E, E, eps, g, beta, w_first) + bias[None, :]
    else:
        acc = _ln_gemv(x_ptr, x_ptr, x_ptr, x_ptr, 0, ln_w, ln_b, w_ptr, w_first, b, b_mask, n, n_mask,
                       E, eps, False, BB, BN, BK, BE)
        y = acc + tl.load(bias_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    # gelu(y) = y/2 (1 + tanh(u)), u = sqrt(2/pi) (y + 0.044715 y^3). With tanh(u) = 2 sigmoid(2u) - 1
    # that is y * sigmoid(2u) = y / (1 + exp(-2u)): no cancellation near 0, exact limits at +-inf.
    u = 0.7978845608028654 * (y + 0.044715 * y * y * y)
    y = tl.div_rn(y, 1.0 + tl.exp(-2.0 * u))
    tl.store(h_ptr + b[:, None] * F + n[None, :], y, mask=b_mask[:, None] & n_mask[None, :])


# ------------------------------------------------------------------------------- kernel 5 of 5

@triton.jit
def fc2_residual_kernel(h_ptr, w_ptr, bias_ptr, x_in, x_out, B, NBB, E: tl.constexpr, F: tl.constexpr,
                        BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, USE_PDL: tl.constexpr,
                        PREFETCH: tl.constexpr = False):
    """The second MLP matrix + bias + the residual add.

    Fuses: h @ fc2_w.T + fc2_b -> x + that (x_in = x_out in the step: in place, own rows only).
    Bytes (GPT-2 124M, batch 1, fp32): reads the 9.44 MB FC2 matrix + 3 KB bias (+ the 12 KB h
    row per program, from L2); reads and writes 3 KB of residual.
    Launches per step: one per layer (12). Grid: cdiv(E, BN) * cdiv(B, BB) programs.
    """
    b = (tl.program_id(0) % NBB) * BB + tl.arange(0, BB)  # batch fastest
    n = (tl.program_id(0) // NBB) * BN + tl.arange(0, BN)
    b_mask = b < B
    n_mask = n < E
    if USE_PDL:  # the next kernel may launch now; it waits in its own gdc_wait
        tl.extra.cuda.gdc_launch_dependents()
    if PREFETCH:  # the whole slice (BK >= F) and the bias, before the wait
        bias = _load_vec(bias_ptr, n, E)
        w_raw = _load_w_raw(w_ptr, n, n_mask, F, BK)
    else:
        w = _load_w(w_ptr, n, n_mask, 0, F, BK)
    if USE_PDL:  # wait for the previous kernel to finish and its writes to be visible
        tl.extra.cuda.gdc_wait()
    if PREFETCH:
        k = tl.arange(0, BK)
        a = tl.load(h_ptr + b[:, None] * F + k[None, :], mask=b_mask[:, None] & (k < F)[None, :], other=0.0)
        acc = tl.sum(a[:, None, :] * w_raw.to(tl.float32), axis=2)
    else:
        acc = tl.zeros([BB, BN], dtype=tl.float32)
        for k0 in range(0, F, BK):
            k = k0 + tl.arange(0, BK)
            a = tl.load(h_ptr + b[:, None] * F + k[None, :], mask=b_mask[:, None] & (k < F)[None, :], other=0.0)
            acc += tl.sum(a[:, None, :] * w, axis=2)
            w = _load_w(w_ptr, n, n_mask, k0 + BK, F, BK)
    mask = b_mask[:, None] & n_mask[None, :]
    rows = b[:, None] * E + n[None, :]
    out = tl.load(x_in + rows, mask=mask, other=0.0) + acc
    if PREFETCH:
        out += bias[None, :]
    else:
        out += tl.load(bias_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(x_out + rows, out, mask=mask)


# ------------------------------------------------------------------------------- the head

@triton.jit
def lm_head_kernel(x_ptr, ln_w, ln_b, wte_ptr, logits_ptr, part_val, part_idx, B, NBB, eps, E: tl.constexpr,
                   V: tl.constexpr, NBLK: tl.constexpr,
                   BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr,
                   USE_PDL: tl.constexpr):
    """The final layer norm + the tied lm_head (x @ wte.T) + each row block's argmax.

    Fuses: layer_norm(x) -> logits [B, V] in the weights' dtype (what the step returns) -> per
    program, the largest logit of its BN rows and its index (first index on ties, as torch.argmax),
    computed on the logits as stored, so the token is the argmax of the returned logits.
    Bytes (GPT-2 124M, batch 1, fp32): reads the 154.4 MB embedding matrix (the largest single
    read of the step: 31% of its weight bytes) + 6 KB norm weights; writes 201 KB of logits and
    8 B per program of partial argmax. Launches per step: 1. Grid: cdiv(V, BN) * cdiv(B, BB).
    """
    pid_n = tl.program_id(0) // NBB  # batch fastest: programs sharing a weight tile run together
    b = (tl.program_id(0) % NBB) * BB + tl.arange(0, BB)
    n = pid_n * BN + tl.arange(0, BN)
    b_mask = b < B
    n_mask = n < V
    if USE_PDL:  # the next kernel may launch now; it waits in its own gdc_wait
        tl.extra.cuda.gdc_launch_dependents()
    w_first = _load_w(wte_ptr, n, n_mask, 0, E, BK)
    if USE_PDL:  # wait for the previous kernel to finish and its writes to be visible
        tl.extra.cuda.gdc_wait()
    acc = _ln_gemv(x_ptr, x_ptr, x_ptr, x_ptr, 0, ln_w, ln_b, wte_ptr, w_first, b, b_mask, n, n_mask,
                   E, eps, False, BB, BN, BK, BE)
    logits = acc.to(logits_ptr.dtype.element_ty)
    tl.store(logits_ptr + b[:, None] * V + n[None, :], logits, mask=b_mask[:, None] & n_mask[None, :])
    val = tl.where(n_mask[None, :], logits.to(tl.float32), float("-inf"))
    best = tl.argmax(val, axis=1, tie_break_left=True)
    tl.store(part_val + b * NBLK + pid_n, tl.max(val, axis=1), mask=b_mask)
    tl.store(part_idx + b * NBLK + pid_n, pid_n * BN + best, mask=b_mask)


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
    Launches per step: 1. Grid: 1 program.
    """
    if USE_PDL:  # the next kernel may launch now; it waits in its own gdc_wait
        tl.extra.cuda.gdc_launch_dependents()
    if USE_PDL:  # wait for the previous kernel to finish and its writes to be visible
        tl.extra.cuda.gdc_wait()
    pos = tl.load(pos_ptr)
    j = tl.arange(0, BP)
    for b0 in range(0, B, BB):
        b = b0 + tl.arange(0, BB)
        b_mask = b < B
        val = tl.load(part_val + b[:, None] * NBLK + j[None, :], mask=b_mask[:, None] & (j < NBLK)[None, :],
                      other=float("-inf"))
        blk = tl.argmax(val, axis=1, tie_break_left=True)
        tok = tl.load(part_idx + b * NBLK + blk, mask=b_mask, other=0).to(tl.int64)
        tl.store(tok_ptr + b, tok, mask=b_mask)
        tl.store(out_ptr + b * MAXLEN + pos + 1, tok, mask=b_mask & (pos + 1 < MAXLEN))
    tl.store(new_pos_ptr, pos + 1)


KERNELS = {
    "ln_qkv": ln_qkv_kernel,
    "attention": attention_kernel,
    "proj": proj_residual_kernel,
    "ln_fc": ln_fc_gelu_kernel,
    "fc2": fc2_residual_kernel,
    "lm_head": lm_head_kernel,
    "argmax": argmax_advance_kernel,
}
__all__ = ["KERNELS", "triton"]
