"""The GEMV kernels of the fused step: the five projections, each with the row work around it fused in.

Every matrix-vector product here is a *row-block GEMV*: a program owns BN output rows (a [BN, K]
block of an [out, in] weight matrix) and BB batch rows; it walks K in chunks of BK, multiplies
the weight tile by the input chunk and sums over K with `tl.sum` (plain fp32 multiply-add: no tf32,
no tensor cores, so fp32 results match eager's to rounding). Weights of any float dtype are
widened to fp32 as they are loaded; every accumulation is fp32. The grid is 1-D, batch fastest
(`pid_b = pid % NBB`), so the programs that share one weight tile run side by side and all but
the first read it from L2. A program serves at most BB batch rows (4 by default): above that the
weights are read once per row tile, which is why large batches take the library-GEMM path
(lab.step.fused.rule).

Each program also redoes the cheap row work its input needs (layer-norm statistics of a 768-wide
row, or combining the attention splits): a few KB from L2 instead of another launch.

PREFETCH (the `fused-pdl-prefetch` variant): every weight a program needs is loaded before the PDL
wait, not only the first tile: with a config whose BK covers the whole row (lab.step.fused.configs.
prefetch_config) the program's whole weight slice (2-16 KB), and in every GEMV kernel the bias and
the layer-norm parameters, which the default kernels load after the wait (a DRAM round trip on the
critical path of every launch). The slice stays in the weights' dtype until it is used (half the
registers in bf16), and a one-chunk layer norm reuses the row it loaded for the statistics. Where
configs.ln_fold says so, the layer norm before ln_qkv and ln_fc is folded into their product (`_ln_gemv_one`:
the row scaled by g, and two fp32 constants a row of W, W g and W beta + bias, made when the plan is bound), so
that the products do not wait for the statistics. So under
PDL a kernel streams its weights while the previous one finishes, and what is left after the wait
is activation traffic from L2 and arithmetic. Only weights move before the wait: nothing any kernel
writes, so the variant is as safe as the default ordering, in or out of a graph.

Byte counts in the docstrings are for GPT-2 124M (E=768, H=12, dh=64, 4E=3072, V=50257) at batch 1
in fp32; bf16 weights and cache halve the weight and cache terms.
"""

from __future__ import annotations

import triton
import triton.language as tl

from lab.step.fused.attention import _attention_chunk, _fold_attention, _kv_to_l2, _qkv_block_row, _words_put
from lab.step.fused.rows import (_INPUT, _WEIGHTS, _add_pair, _argmax_advance, _gelu, _ln_apply, _ln_stats, _load_vec, _load_x,
                                  _made, _pdl_launch, _pdl_wait, _row_blocks, _row_blocks_at, _stored)


# -------------------------------------------------------------------------------------- helpers

@triton.jit
def _weights(ptrs, mask, other, EVICT: tl.constexpr = 0):
    """A load of weights: as any other (EVICT 0), or marked first to leave L2 (EVICT 1: the step streams its weights
    once, through an L2 that holds its activations and the cache)."""
    if EVICT == 1:
        w = tl.load(ptrs, mask=mask, other=other, eviction_policy="evict_first")
    else:
        w = tl.load(ptrs, mask=mask, other=other)
    return w


@triton.jit
def _load_w(w_ptr, n, n_mask, k0, K, BK: tl.constexpr, LEAVE_OUT: tl.constexpr = 0, EVICT: tl.constexpr = 0):
    """The weight tile [1, BN, BK] at columns k0.. (zeros past K), widened to fp32.

    Loaded in the 3-D shape of the product it feeds ([BB, BN, BK], summed over K), so the tile
    never changes layout between the load and the multiply. Made in registers with the weights left out.
    """
    k = k0 + tl.arange(0, BK)
    mask = n_mask[None, :, None] & (k < K)[None, None, :]
    w = _weights(w_ptr + n[None, :, None] * K + k[None, None, :], mask, 0.0, EVICT).to(tl.float32)
    return _made(w, LEAVE_OUT, _WEIGHTS)


@triton.constexpr_function
def _piece(K, i):
    """PIECES: the width of piece i (0, 1 or 2) of a row of K values held as up to three tiles whose widths are powers
    of two, at columns 0, piece 0, piece 0 + piece 1: the largest power of two in K, the largest in what is left, and
    the rest rounded up to one (masked past K); 0 where the row needs fewer. GPT-2's rows: 768 = 512 + 256, 1600 = 1024 +
    512 + 64, 3072 = 2048 + 1024, 6400 = 4096 + 2048 + 256: no column padded, where one tile of next_pow2(K) columns
    pads 25-28% of them (registers held and products made for zeros)."""
    K = int(K)
    widths = []
    for _ in range(2):
        if K:
            widths.append(1 << (K.bit_length() - 1))
            K -= widths[-1]
    if K:
        widths.append(1 << (K - 1).bit_length())
    widths += [0] * (3 - len(widths))
    return widths[int(i)]


@triton.jit
def _load_w_raw(w_ptr, n, n_mask, K: tl.constexpr, BK: tl.constexpr, LEAVE_OUT: tl.constexpr = 0,
                EVICT: tl.constexpr = 0, K0: tl.constexpr = 0):
    """The weight slice at columns K0.. (0 unless a piece: `_pieces_w`) in the weights' own bits (PREFETCH: widened at
    use): [1, BN, BK] as stored, or,
    for bf16 rows of even length, [1, BN, BK // 2] int32, each the packed pair of columns 2j (low half) and 2j + 1
    (high half), which `_dot_slice` widens with one integer instruction each.

    The pairs are read two to a thread (8-byte vectors: `max_contiguous`), so that a thread's pairs are the four
    columns it holds of its input row, loaded as fp32 in 16-byte vectors: the products then take the input where it
    was loaded. Read four pairs to a thread (16-byte vectors), a thread's eight columns were another thread's, and the
    input went through shared memory after the wait (GPT-2 1.5B's fc2: 16 CTA barriers and 124 more instructions
    there, 254 registers a thread against 160)."""
    if w_ptr.dtype.element_ty == tl.bfloat16 and K % 2 == 0:
        k2 = tl.max_contiguous(tl.arange(0, BK // 2), 2)
        if K0 > 0:  # (a piece: `_pieces_w`; added only there, which keeps the hint on the range where there is none)
            k2 += K0 // 2
        mask = n_mask[None, :, None] & (k2 < K // 2)[None, None, :]
        pairs = w_ptr.to(tl.pointer_type(tl.int32))
        w = _weights(pairs + n[None, :, None] * (K // 2) + k2[None, None, :], mask, 0, EVICT)
    else:
        k = K0 + tl.arange(0, BK)
        mask = n_mask[None, :, None] & (k < K)[None, None, :]
        w = _weights(w_ptr + n[None, :, None] * K + k[None, None, :], mask, 0.0, EVICT)
    return _made(w, LEAVE_OUT, _WEIGHTS)


@triton.jit
def _first_tile(task, w_ptr, NBB, B, N, K, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Task `task`'s first weight tile [1, BN, BK] of an [N, K] matrix (what `_ln_qkv` and the others load first;
    all masked, no memory traffic, for a task past the phase's last: its rows are past N)."""
    _, _, n, _, n_mask = _row_blocks_at(task, NBB, B, N, BB, BN)
    return _load_w(w_ptr, n, n_mask, 0, K, BK)


@triton.jit
def _ln_gemv(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, g_ptr, beta_ptr, w_ptr, w_first, b, b_mask, n, n_mask,
             E: tl.constexpr, eps, EMBED: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             BE: tl.constexpr, LEAVE_OUT: tl.constexpr = 0, EVICT: tl.constexpr = 0, SUM_ONCE: tl.constexpr = 0):
    """acc [BB, BN] = layer_norm(x[b]) @ W[n].T, with the first weight tile already loaded (w_first). The statistics
    correctly rounded (`_ln_stats`): the chunked kernels are the reference the persistent kernel matches bit for bit
    (its layer kernel, with the fast forms, spilled under its cap of 128 registers), and lm_head's are a few dozen
    instructions in a kernel that streams 77-154 MB.

    SUM_ONCE (lm_head's switch: on the cards configs.SUM_ONCE_FIRST names, or by name as an A/B arm binds it; README
    items 22-23): the products of every chunk accumulate element by element in a [BB, BN, BK] tile and are summed over
    K once, after the last chunk, instead of once a chunk (a sum over K is a reduction across the threads that hold a
    row: shuffles, every chunk). The same products, summed in another order: not bit for bit the per-chunk sum."""
    ke = tl.arange(0, BE)
    mean, rstd = _ln_stats(_load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, ke, E, EMBED, LEAVE_OUT),
                           ke < E, E, eps)
    acc = tl.zeros([BB, BN], dtype=tl.float32)
    parts = tl.zeros([BB, BN, BK] if SUM_ONCE else [1, 1, 1], dtype=tl.float32)  # (SUM_ONCE's partial sums)
    w = w_first
    for k0 in range(0, E, BK):
        k = k0 + tl.arange(0, BK)
        a = _ln_apply(_load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, k, E, EMBED, LEAVE_OUT), mean, rstd,
                      g_ptr, beta_ptr, k, E)
        if SUM_ONCE:
            parts += a[:, None, :] * w
        else:
            acc += tl.sum(a[:, None, :] * w, axis=2)
        w = _load_w(w_ptr, n, n_mask, k0 + BK, E, BK, LEAVE_OUT, EVICT)  # the next tile (all masked after the last)
    if SUM_ONCE:
        acc = tl.sum(parts, axis=2)
    return acc


@triton.jit
def _dot_slice(a, w_raw):
    """acc [BB, BN] = a [BB, BK] @ W.T for a weight slice held in its own bits (PREFETCH, `_load_w_raw`), in fp32.

    Packed bf16 pairs (int32 [1, BN, BK // 2]) are widened as bf16 is: the low half shifted up (column 2j) and the
    high half masked (column 2j + 1), one integer instruction each, exact; the products of both halves are interleaved
    back into column order before the sum over K, so that it compiles to one chain of fused multiply-adds (summed
    apart, each pair took a multiply, a fused multiply-add and an add). Widened by a cast instead, each high half took
    two instructions, and a slice widened whole kept its fp32 copy live beside the packed one (GPT-2 1.5B's bf16
    ln_fc: 244 registers a thread). Any other slice is used as loaded, widened to fp32."""
    return tl.sum(_products(a, w_raw), axis=2)


@triton.jit
def _products(a, w_raw):
    """The products [BB, BN, BK] of `_dot_slice`, in column order, before their sum over K."""
    if w_raw.dtype == tl.int32:
        BB: tl.constexpr = a.shape[0]
        BK: tl.constexpr = a.shape[1]
        BN: tl.constexpr = w_raw.shape[1]
        lo = (w_raw << 16).to(tl.float32, bitcast=True)
        hi = (w_raw & -65536).to(tl.float32, bitcast=True)
        a_even, a_odd = tl.split(tl.reshape(a, (BB, BK // 2, 2)))
        prod = tl.reshape(tl.join(a_even[:, None, :] * lo, a_odd[:, None, :] * hi), (BB, BN, BK))
    else:
        prod = a[:, None, :] * w_raw.to(tl.float32)
    return prod


@triton.jit
def _ln_gemv_one(x, k_mask, E: tl.constexpr, eps, g, shift, rows, w_raw, FOLD: tl.constexpr):
    """PREFETCH, one chunk: [BB, BN] = layer_norm(x) @ W.T + bias with x [BB, BE] the whole row already loaded, g [BE]
    and the weight slice [1, BN, BE] loaded before the wait.

    FOLD (`configs.ln_fold`): the layer norm folded into the product, layer_norm(x) @ W.T + bias = rstd ((x g) @ W.T -
    mean c1) + c2 with shift = c1 = W g and rows = c2 = W beta + bias [BN] (fp32, made when the plan is bound:
    `step.ln_folded`). So the products start as soon as the row is loaded, beside its statistics rather than after
    them, and each value of the row is scaled once where it was centred, scaled and shifted. Otherwise shift = beta
    [BE] and rows = the bias [BN]: the row normalised, then multiplied."""
    mean, rstd = _ln_stats(x, k_mask, E, eps, True)
    if FOLD:
        acc = _dot_slice(x * g[None, :], w_raw)
        out = rstd[:, None] * (acc - mean[:, None] * shift[None, :]) + rows[None, :]
    else:
        a = (x - mean[:, None]) * rstd[:, None] * g[None, :] + shift[None, :]
        out = _dot_slice(a, w_raw) + rows[None, :]
    return out


@triton.constexpr_function
def _flat(BN, P1, P2):
    """PIECES: whether the third piece is held flat (`_pieces_w`): the BN rows' P2 columns laid end to end in one vector
    of the second piece's width P1 (where BN * P2 fits it, and P2 is a whole number of `_dot_pieces`' groups of four),
    so that its products join the other pieces' before their one sum across the program's threads; otherwise it is a
    tile [BB, BN, P2] of its own, summed apart."""
    return int(P2) >= 4 and int(BN) * int(P2) <= int(P1)


@triton.jit
def _flat_cols(P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr):
    """PIECES, the third piece flat: for each value j of a vector of width P1, the row (j // P2, of the program's BN) and
    the column (P0 + P1 + j % P2) it holds."""
    j = tl.arange(0, P1)
    return j // P2, P0 + P1 + j % P2


@triton.jit
def _dot_pieces(a0, w0, a1, w1, a2, w2, P1: tl.constexpr, P2: tl.constexpr, FLAT: tl.constexpr):
    """PIECES: `_dot_slice` over a row held as up to three pieces (`_piece`): the first piece's products folded onto
    the second's width (summed over P0 // P1 values each thread holds) and added to the second's; the third's, held
    flat (a2 [BB, P1] and w2 [1, 1, P1'] at the second's width: `_flat`), added to its rows' (a select a value); so
    that all take one sum across the program's threads. A third piece not flat sums apart."""
    p0 = _products(a0, w0)
    if P1 > 0:
        BB: tl.constexpr = p0.shape[0]
        BN: tl.constexpr = p0.shape[1]
        P0: tl.constexpr = p0.shape[2]
        p = tl.sum(tl.reshape(p0, (BB, BN, P0 // P1, P1)), axis=2) + _products(a1, w1)
        if FLAT:  # in groups of 4 (a thread's values), so that a select takes a group, not a value
            p = tl.sum(tl.reshape(p, (BB, BN, P1 // 4, 4)), axis=3)
            p2 = tl.sum(tl.reshape(_products(a2, w2), (BB, 1, P1 // 4, 4)), axis=3)
            row = (tl.arange(0, P1 // 4) // (P2 // 4))[None, None, :] == tl.arange(0, BN)[None, :, None]
            p += tl.where(row, p2, 0.0)
        acc = tl.sum(p, axis=2)
    else:
        acc = tl.sum(p0, axis=2)
    if (P2 > 0) and not FLAT:
        acc += tl.sum(_products(a2, w2), axis=2)
    return acc


@triton.jit
def _pieces_vec(ptr, E: tl.constexpr, P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr, FLAT: tl.constexpr):
    """PIECES: a parameter vector of E values (the layer norm's weight or shift) as its pieces [P0], [P1], [P2] (`_piece`;
    the third flat, [P1], each of its values at its column: `_flat_cols`), widened to fp32; an absent piece is a zero
    of one value, never read."""
    v0 = _load_vec(ptr, tl.arange(0, P0), E)
    if P1 > 0:
        v1 = _load_vec(ptr, P0 + tl.arange(0, P1), E)
    else:
        v1 = tl.zeros([1], dtype=tl.float32)
    if FLAT:
        _, col = _flat_cols(P0, P1, P2)
        v2 = _load_vec(ptr, col, E)
    elif P2 > 0:
        v2 = _load_vec(ptr, P0 + P1 + tl.arange(0, P2), E)
    else:
        v2 = tl.zeros([1], dtype=tl.float32)
    return v0, v1, v2


@triton.jit
def _pieces_w(w_ptr, n, n_mask, row0, N, K: tl.constexpr, P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr,
              FLAT: tl.constexpr, LEAVE_OUT: tl.constexpr = 0, EVICT: tl.constexpr = 0):
    """PIECES: the weight slice of rows n (row0, row0 + 1, ...: BN rows of N) as its pieces, each in the weights' own bits
    (`_load_w_raw` at columns 0 and P0 and, unless flat, P0 + P1; flat, the BN rows' last P2 columns end to end, [1, 1,
    P1] or, packed, [1, 1, P1 // 2]: `_flat`); an absent piece is a zero tile of one value, never read."""
    w0 = _load_w_raw(w_ptr, n, n_mask, K, P0, LEAVE_OUT, EVICT)
    if P1 > 0:
        w1 = _load_w_raw(w_ptr, n, n_mask, K, P1, LEAVE_OUT, EVICT, P0)
    else:
        w1 = tl.zeros([1, 1, 1], dtype=tl.float32)
    if FLAT:
        BN: tl.constexpr = n.shape[0]
        if w_ptr.dtype.element_ty == tl.bfloat16 and K % 2 == 0:  # pairs, as `_load_w_raw` reads them
            r, c = _flat_cols(P0 // 2, P1 // 2, P2 // 2)
            mask = (r < BN) & (row0 + r < N) & (c < K // 2)
            w2 = _weights(w_ptr.to(tl.pointer_type(tl.int32)) + (row0 + r) * (K // 2) + c, mask, 0, EVICT)
        else:
            r, c = _flat_cols(P0, P1, P2)
            mask = (r < BN) & (row0 + r < N) & (c < K)
            w2 = _weights(w_ptr + (row0 + r) * K + c, mask, 0.0, EVICT)
        w2 = _made(w2[None, None, :], LEAVE_OUT, _WEIGHTS)
    elif P2 > 0:
        w2 = _load_w_raw(w_ptr, n, n_mask, K, P2, LEAVE_OUT, EVICT, P0 + P1)
    else:
        w2 = tl.zeros([1, 1, 1], dtype=tl.float32)
    return w0, w1, w2


@triton.jit
def _pieces_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, E: tl.constexpr, EMBED: tl.constexpr,
              P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr, FLAT: tl.constexpr, LEAVE_OUT: tl.constexpr = 0):
    """PIECES: the residual rows [BB, E] as their pieces [BB, P0], [BB, P1], [BB, P2] (`_load_x`, zeros past E; the
    third flat, [BB, P1], each value at its column `_flat_cols`: every row's copy of the piece)."""
    x0 = _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, tl.arange(0, P0), E, EMBED, LEAVE_OUT)
    if P1 > 0:
        x1 = _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, P0 + tl.arange(0, P1), E, EMBED, LEAVE_OUT)
    else:
        x1 = tl.zeros([1, 1], dtype=tl.float32)
    if FLAT:
        _, col = _flat_cols(P0, P1, P2)
        x2 = _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, col, E, EMBED, LEAVE_OUT)
    elif P2 > 0:
        x2 = _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, P0 + P1 + tl.arange(0, P2), E, EMBED,
                     LEAVE_OUT)
    else:
        x2 = tl.zeros([1, 1], dtype=tl.float32)
    return x0, x1, x2


@triton.jit
def _ln_prefetched(w_ptr, n, n_mask, row0, ln_w, ln_b, bias_ptr, c1_ptr, c2_ptr, E: tl.constexpr, N: tl.constexpr,
                   LN_FOLD: tl.constexpr, P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr, FLAT: tl.constexpr,
                   LEAVE_OUT: tl.constexpr = 0, EVICT: tl.constexpr = 0):
    """What a PREFETCH kernel with a layer norm before its product (ln_qkv, ln_fc: N output rows, this program's from
    row0) loads before its wait: its weight slice, the norm's weight g and the shift (its bias beta, or with LN_FOLD c1
    [BN]) and the rows' constants (the bias, or with LN_FOLD c2 [BN]), each as its pieces (`_piece`; without PIECES
    P0 = BE, one piece)."""
    w0, w1, w2 = _pieces_w(w_ptr, n, n_mask, row0, N, E, P0, P1, P2, FLAT, LEAVE_OUT, EVICT)
    g0, g1, g2 = _pieces_vec(ln_w, E, P0, P1, P2, FLAT)
    if LN_FOLD:
        s0 = _load_vec(c1_ptr, n, N)
        s1 = s0
        s2 = s0
        rows = _load_vec(c2_ptr, n, N)
    else:
        s0, s1, s2 = _pieces_vec(ln_b, E, P0, P1, P2, FLAT)
        rows = _load_vec(bias_ptr, n, N)
    return w0, w1, w2, g0, g1, g2, s0, s1, s2, rows


@triton.jit
def _ln_gemv_pieces(x0, x1, x2, E: tl.constexpr, eps, g0, g1, g2, s0, s1, s2, rows, w0, w1, w2, FOLD: tl.constexpr,
                    P1: tl.constexpr, P2: tl.constexpr, FLAT: tl.constexpr):
    """PIECES: `_ln_gemv_one` over a row held as its pieces (`_piece`: x, g, shift and the weight slice each as up to
    three tiles, an absent one never read, the last piece zero past E, or flat: `_flat`; with FOLD the shift is c1
    [BN], s1 and s2 not read): the statistics' sums and the products each in one sum across the program's threads where
    the pieces fold onto one width (`_dot_pieces`), in fp32. The same products as the one tile's, summed in another
    order: not bit for bit."""
    if P1 > 0:  # the first piece folded onto the second's width, then one sum across threads (as `_dot_pieces`)
        BB: tl.constexpr = x0.shape[0]
        P0: tl.constexpr = x0.shape[1]
        f0, f1 = tl.reduce((tl.reshape(x0, (BB, P0 // P1, P1)), tl.reshape(x0 * x0, (BB, P0 // P1, P1))), 1, _add_pair)
        f0 += x1
        f1 += x1 * x1
        if FLAT:  # the first row's copy of the third piece
            x2_once = tl.where((tl.arange(0, P1) < P2)[None, :], x2, 0.0)
            f0 += x2_once
            f1 += x2_once * x2_once
        total, squares = tl.reduce((f0, f1), 1, _add_pair)
    else:
        total, squares = tl.reduce((x0, x0 * x0), 1, _add_pair)
    if (P2 > 0) and not FLAT:
        t2, q2 = tl.reduce((x2, x2 * x2), 1, _add_pair)
        total += t2
        squares += q2
    mean = total * (1.0 / E)
    rstd = tl.math.rsqrt(tl.maximum(squares * (1.0 / E) - mean * mean, 0.0) + eps)
    if FOLD:
        acc = _dot_pieces(x0 * g0[None, :], w0, x1 * g1[None, :], w1, x2 * g2[None, :], w2, P1, P2, FLAT)
        out = rstd[:, None] * (acc - mean[:, None] * s0[None, :]) + rows[None, :]  # s0: c1 [BN], not pieces
    else:
        m, r = mean[:, None], rstd[:, None]
        acc = _dot_pieces((x0 - m) * r * g0[None, :] + s0[None, :], w0, (x1 - m) * r * g1[None, :] + s1[None, :], w1,
                          (x2 - m) * r * g2[None, :] + s2[None, :], w2, P1, P2, FLAT)
        out = acc + rows[None, :]
    return out


@triton.jit
def _residual(x_in, b, b_mask, n, n_mask, E: tl.constexpr, LEAVE_OUT: tl.constexpr = 0):
    """x_in[b, n] [BB, BN]: the residual a program adds its product to, loaded right after the wait beside its input
    (one round trip to L2 after the wait, not a second one after the reduction: the PTX had it after its bar.sync)."""
    mask = b_mask[:, None] & n_mask[None, :]
    return _made(tl.load(x_in + b[:, None] * E + n[None, :], mask=mask, other=0.0).to(tl.float32), LEAVE_OUT, _INPUT)


@triton.jit
def _add_residual(res, x_out, acc, bias, b, b_mask, n, n_mask, E: tl.constexpr, LEAVE_OUT: tl.constexpr = 0):
    """x_out[b, n] = res + acc + bias[n] with res = x_in[b, n] (`_residual`): the residual add that ends the
    attention's output projection and the second MLP matrix (the step passes x_in = x_out: in place, each program
    its own rows)."""
    mask = b_mask[:, None] & n_mask[None, :]
    out = res + acc
    out += bias[None, :]
    tl.store(x_out + b[:, None] * E + n[None, :], out, mask=_stored(mask, out, LEAVE_OUT))


@triton.jit
def _res_at_once(w_raw, res):
    """RES_AT_ONCE (proj and fc2, PREFETCH): the weight slice [1, BN, K'] (as `_load_w_raw` holds it) with row n zeroed
    for batch row b where res[b, n] is NaN: [BB, BN, K']. Where it is zeroed the output is NaN either way (res + acc +
    bias), so every value is as without it; but the products now wait for the residual's load, so ptxas issues it with
    the input's, right after the wait, where it put it among the reduction's shuffles (Triton 3.6's ptxas, sm_90: one
    more round trip to L2 before the store, on the chain of two launches a layer). The cost: a select a value of the
    slice held (a packed pair in bf16) before the multiply-adds, and the residual read by every thread that holds its
    rows rather than by one."""
    keep = res == res
    return tl.where(keep[:, :, None], w_raw, tl.zeros_like(w_raw))


# ------------------------------------------------------------------------------- kernel 1 of 4

@triton.jit
def ln_qkv_kernel(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos_ptr, ln_w, ln_b, w_ptr, bias_ptr, c1_ptr, c2_ptr, q_ptr,
                  cache_ptr, B, NBB, L, eps, att_ptr, heads_ptr, scale, part_o, part_m, part_l, mail_ptr,
                  E: tl.constexpr, H: tl.constexpr,
                  DH: tl.constexpr, EMBED: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  BE: tl.constexpr, USE_PDL: tl.constexpr, PREFETCH: tl.constexpr = False,
                  LEAVE_OUT: tl.constexpr = 0, FOLD: tl.constexpr = False, BS: tl.constexpr = 16,
                  BD: tl.constexpr = 16, LN_FOLD: tl.constexpr = False, HEAD_MAJOR: tl.constexpr = False,
                  EVICT: tl.constexpr = 0, KV_L2: tl.constexpr = False, KV_AT_ONCE: tl.constexpr = False,
                  POS_AT_ONCE: tl.constexpr = False, PIECES: tl.constexpr = False,
                  OLDER_FIRST: tl.constexpr = 0, NS: tl.constexpr = 1):
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

    FOLD (lab.step.fused.attention._fold_attention): the last program of each head then computes the head's
    attention into att_ptr, normalised, counting in on heads_ptr (int32 [cdiv(B, BB), H], zero between launches):
    the layer has no attention launch, and `proj` reads att as its input (FOLDED). BS: the slots of one chunk of
    that attention, BD: next_pow2(DH). Without FOLD, att_ptr, heads_ptr and scale are not read.

    OLDER_FIRST (with FOLD): the head's last q program attends over the slots before the position while its K and V
    programs still run, into the attention partials part_o, part_m and part_l (their first split; NS the splits a
    head), and the last count-in adds the new slot (attention._fold_attention; heads_ptr then holds a second
    [cdiv(B, BB), H] of counters, the q programs'). OLDER_FIRST=2: the same, handed over in flagged words instead of
    behind fences: every program also puts its rows in mail_ptr (int64 [B, 4E + 2H], zero between launches;
    attention._words_put). Off unless bound; without it the partials and mail_ptr are not read.

    LN_FOLD (PREFETCH only): the layer norm folded into the product (`_ln_gemv_one`), c1_ptr and c2_ptr its
    constants; otherwise they are not read.

    HEAD_MAJOR (BN divides DH): the programs in the order of the heads, each head's q, K and V row blocks side by
    side (attention._qkv_block_row), instead of every q block, then every K block, then every V block. The GPU starts a
    launch's programs in about the order of their ids, so with FOLD each head's last program, and its attention,
    comes while the later heads' programs still stream their weights, rather than every head's at the end.

    KV_L2 (with FOLD; inline assembly, so never in Triton's interpreter): before its wait, each head's first q program
    asks L2 for the K and V its head's attention will read (attention._kv_to_l2). Off unless bound.

    KV_AT_ONCE (with FOLD): the folded attention asks for K and V of a chunk in one round trip, not V after the
    scores (attention._fold_attention). Off unless bound.

    POS_AT_ONCE (PREFETCH): the position asked for with the input row, not after the layer norm's statistics
    (`_ln_qkv`). Off unless bound.

    PIECES (PREFETCH): the row, its weight slice and the norm's vectors held as tiles whose widths are powers of two
    (`_piece`: 1600 = 1024 + 512 + 64) instead of one tile of next_pow2(E) columns, the rest masked; fewer registers
    (GPT-2 1.5B fp32: three 4-warp programs an SM, not two) and no products of zeros, but a sum a piece. Not bit for bit
    the one tile's sums. Off unless bound.
    """
    pos, out = _ln_qkv(tl.program_id(0), x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos_ptr, ln_w, ln_b, w_ptr, bias_ptr, c1_ptr,
                  c2_ptr, q_ptr, cache_ptr, B, NBB, L, eps, E, H, DH, EMBED, BB, BN, BK, BE, USE_PDL, PREFETCH,
                  LEAVE_OUT, 0, False, LN_FOLD, HEAD_MAJOR, EVICT, FOLD and KV_L2, POS_AT_ONCE, PIECES)
    if FOLD:
        if OLDER_FIRST == 2:
            _words_put(tl.program_id(0), mail_ptr, out, B, NBB, E, H, DH, BB, BN, HEAD_MAJOR,
                       cache_ptr.dtype.element_ty)
        _fold_attention(tl.program_id(0), q_ptr, cache_ptr, pos, att_ptr, heads_ptr, B, NBB, L, scale, part_o, part_m,
                        part_l, mail_ptr, E, H, DH, BB, BN, BS, BD, HEAD_MAJOR, LEAVE_OUT, KV_AT_ONCE, OLDER_FIRST, NS)


@triton.jit
def _ln_qkv(pid, x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos_ptr, ln_w, ln_b, w_ptr, bias_ptr, c1_ptr, c2_ptr, q_ptr,
            cache_ptr, B, NBB, L, eps, E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
            EMBED: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr,
            USE_PDL: tl.constexpr, PREFETCH: tl.constexpr, LEAVE_OUT: tl.constexpr, w_pre, PRELOADED: tl.constexpr,
            LN_FOLD: tl.constexpr = False, HEAD_MAJOR: tl.constexpr = False, EVICT: tl.constexpr = 0,
            KV_L2: tl.constexpr = False, POS_AT_ONCE: tl.constexpr = False, PIECES: tl.constexpr = False):
    """ln_qkv_kernel's work for its task `pid` (a launch's program, or one of a persistent program's tasks).
    PRELOADED (the persistent kernel): `w_pre` is the task's first weight tile, loaded by the caller (`_first_tile`)
    while the program worked on its previous task or waited at the grid barrier. HEAD_MAJOR: as the kernel's. Returns
    the position it read after its wait (the folded attention's).

    POS_AT_ONCE (PREFETCH): the position is read after the wait (no kernel of the step writes it, but one of the step
    before may still run while a launch waits) and places the K and V rows in the cache. ptxas issues its load
    after the layer norm's statistics in bf16 (Triton 3.6's, sm_90: GPT-2 124M and 1.5B), so the stores, and with them
    the fold's count-in, wait for a second round trip. With the switch the row is selected by `pos >= 0` between itself
    and zeros: always itself (a position is never negative), but the products now wait for the position's load too,
    and ptxas issues it with the row's. The values are the same; the cost is a select for each value of the row.

    Returns (pos, out): the position and the task's output rows [BB, BN] in fp32 (the folded attention's OLDER_FIRST=2
    puts them in flagged words)."""
    pid_n, b, n, b_mask, n_mask = _row_blocks_at(pid, NBB, B, 3 * E, BB, BN)  # batch fastest
    row0 = pid_n * BN
    if HEAD_MAJOR:  # the same blocks of BN rows, in the order of the heads
        row0, _ = _qkv_block_row(pid_n, E, DH, BN, HEAD_MAJOR)
        n = row0 + tl.arange(0, BN)
    ke = tl.arange(0, BE)
    _pdl_launch(USE_PDL)
    P0: tl.constexpr = _piece(E, 0) if PIECES else BE
    P1: tl.constexpr = _piece(E, 1) if PIECES else 0
    P2: tl.constexpr = _piece(E, 2) if PIECES else 0
    FLAT: tl.constexpr = _flat(BN, P1, P2)
    if PREFETCH:  # every weight of this program, before the wait (BK == BE: the whole slice; see `_ln_gemv_one`)
        w_first, w_1, w_2, g, g_1, g_2, shift, s_1, s_2, rows = _ln_prefetched(
            w_ptr, n, n_mask, row0, ln_w, ln_b, bias_ptr, c1_ptr, c2_ptr, E, 3 * E, LN_FOLD, P0, P1, P2, FLAT,
            LEAVE_OUT, EVICT)
    elif PRELOADED:
        w_first = w_pre
    else:
        w_first = _load_w(w_ptr, n, n_mask, 0, E, BK, LEAVE_OUT)  # weights: written by nobody, safe before the wait
    if KV_L2:  # the kernel's KV_L2: its head's K and V asked into L2 for the folded attention, before the wait
        _kv_to_l2(pid, cache_ptr, pos_ptr, B, NBB, L, E, H, DH, BB, BN, HEAD_MAJOR)
    _pdl_wait(USE_PDL, LEAVE_OUT)
    pos = tl.load(pos_ptr)
    if EMBED:
        if pid_n == 0:  # one row block stores the embedded residual for the later kernels
            x0 = _load_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, ke, E, True, LEAVE_OUT)
            tl.store(x_ptr + b[:, None] * E + ke[None, :], x0,
                     mask=_stored(b_mask[:, None] & (ke < E)[None, :], x0, LEAVE_OUT))
    if PREFETCH:
        x, x_1, x_2 = _pieces_x(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, b, b_mask, E, EMBED, P0, P1, P2, FLAT,
                                LEAVE_OUT)
        if POS_AT_ONCE:  # always x: the select only makes the products wait for the position's load too
            x = tl.where(pos >= 0, x, 0.0)
        if PIECES:
            out = _ln_gemv_pieces(x, x_1, x_2, E, eps, g, g_1, g_2, shift, s_1, s_2, rows, w_first, w_1, w_2, LN_FOLD,
                                  P1, P2, FLAT)
        else:
            out = _ln_gemv_one(x, ke < E, E, eps, g, shift, rows, w_first, LN_FOLD)
    else:
        acc = _ln_gemv(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos, ln_w, ln_b, w_ptr, w_first, b, b_mask, n, n_mask,
                       E, eps, EMBED, BB, BN, BK, BE, LEAVE_OUT)
        out = acc + tl.load(bias_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    part = n // E  # 0: q, 1: k, 2: v
    col = n % E
    is_q = n_mask & (part == 0)
    tl.store(q_ptr + b[:, None] * E + col[None, :], out, mask=_stored(b_mask[:, None] & is_q[None, :], out, LEAVE_OUT))
    # cache [2, B, H, L, DH]: K at index 0, V at 1; slot `pos` (nothing is written past the end)
    kv = tl.maximum(part - 1, 0)
    h = col // DH
    d = col % DH
    off = ((kv[None, :] * B + b[:, None]) * H + h[None, :]) * L * DH + pos * DH + d[None, :]
    is_kv = n_mask & (part > 0) & (pos < L)
    tl.store(cache_ptr + off, out.to(cache_ptr.dtype.element_ty),
             mask=_stored(b_mask[:, None] & is_kv[None, :], out, LEAVE_OUT))
    return pos, out


# ------------------------------------------------------------------------------- kernel 2 of 4

@triton.jit
def _attention_in(part_o, part_m, part_l, b, b_mask, k, E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                  NS: tl.constexpr, BB: tl.constexpr, BK: tl.constexpr, FOLDED: tl.constexpr):
    """The projection's input att[b, k] [BB, BK]: the splits combined, or (FOLDED) att as stored in part_o [B, E]."""
    if FOLDED:  # a row of att, read as the residual rows are
        a = _load_x(part_o, part_o, part_o, part_o, 0, b, b_mask, k, E, False)
    else:
        a = _attention_chunk(part_o, part_m, part_l, b, b_mask, k, E, H, DH, NS, BB, BK)
    return a


@triton.jit
def proj_residual_kernel(part_o, part_m, part_l, w_ptr, bias_ptr, x_in, x_out, B, NBB, E: tl.constexpr,
                         H: tl.constexpr, DH: tl.constexpr, NS: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr,
                         BK: tl.constexpr, USE_PDL: tl.constexpr, PREFETCH: tl.constexpr = False,
                         LEAVE_OUT: tl.constexpr = 0, FOLDED: tl.constexpr = False, EVICT: tl.constexpr = 0,
                         RES_AT_ONCE: tl.constexpr = False):
    """Combine the attention splits + the output projection + bias + the residual add.

    Fuses: softmax normalisation across splits (on load) -> att @ proj_w.T + proj_b -> x + that.
    The step passes x_in = x_out (in place: each program reads and writes only its own rows).
    Bytes (GPT-2 124M, batch 1, fp32): reads the 2.36 MB projection matrix + 3 KB bias; each
    program re-reads the 12 * NS * 66 * 4 B of partials from L2; reads and writes 3 KB of residual.
    Launches per step: one per layer (12). Grid: cdiv(E, BN) * cdiv(B, BB) programs.

    FOLDED (after an ln_qkv launch with FOLD): part_o is the attention output att [B, E], already normalised, read
    as it is (one L2 round trip, no splits to combine); part_m and part_l are not read.

    RES_AT_ONCE (PREFETCH): the residual asked for with the input, not during the reduction (`_res_at_once`).
    """
    _proj(tl.program_id(0), part_o, part_m, part_l, w_ptr, bias_ptr, x_in, x_out, B, NBB, E, H, DH, NS, BB, BN,
          BK, USE_PDL, PREFETCH, LEAVE_OUT, 0, False, FOLDED, EVICT, RES_AT_ONCE)


@triton.jit
def _proj(pid, part_o, part_m, part_l, w_ptr, bias_ptr, x_in, x_out, B, NBB, E: tl.constexpr, H: tl.constexpr,
          DH: tl.constexpr, NS: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          USE_PDL: tl.constexpr, PREFETCH: tl.constexpr, LEAVE_OUT: tl.constexpr, w_pre, PRELOADED: tl.constexpr,
          FOLDED: tl.constexpr = False, EVICT: tl.constexpr = 0, RES_AT_ONCE: tl.constexpr = False):
    """proj_residual_kernel's work for task `pid` (PRELOADED: as `_ln_qkv`; FOLDED, RES_AT_ONCE: as the kernel)."""
    _, b, n, b_mask, n_mask = _row_blocks_at(pid, NBB, B, E, BB, BN)  # batch fastest
    _pdl_launch(USE_PDL)
    if PREFETCH:  # the whole slice (BK >= E) and the bias, before the wait
        bias = _load_vec(bias_ptr, n, E)
        w_raw = _load_w_raw(w_ptr, n, n_mask, E, BK, LEAVE_OUT, EVICT)
    elif PRELOADED:
        w = w_pre
    else:
        w = _load_w(w_ptr, n, n_mask, 0, E, BK, LEAVE_OUT)
    _pdl_wait(USE_PDL, LEAVE_OUT)
    res = _residual(x_in, b, b_mask, n, n_mask, E, LEAVE_OUT)
    if PREFETCH:
        a = _made(_attention_in(part_o, part_m, part_l, b, b_mask, tl.arange(0, BK), E, H, DH, NS, BB, BK, FOLDED),
                  LEAVE_OUT, _INPUT)
        if RES_AT_ONCE:
            w_raw = _res_at_once(w_raw, res)
        acc = _dot_slice(a, w_raw)
    else:
        acc = tl.zeros([BB, BN], dtype=tl.float32)
        for k0 in range(0, E, BK):
            a = _made(_attention_in(part_o, part_m, part_l, b, b_mask, k0 + tl.arange(0, BK), E, H, DH, NS, BB, BK,
                                    FOLDED), LEAVE_OUT, _INPUT)
            acc += tl.sum(a[:, None, :] * w, axis=2)
            w = _load_w(w_ptr, n, n_mask, k0 + BK, E, BK, LEAVE_OUT)
        bias = _load_vec(bias_ptr, n, E)
    _add_residual(res, x_out, acc, bias, b, b_mask, n, n_mask, E, LEAVE_OUT)


# ------------------------------------------------------------------------------- kernel 3 of 4

@triton.jit
def ln_fc_gelu_kernel(x_ptr, ln_w, ln_b, w_ptr, bias_ptr, c1_ptr, c2_ptr, h_ptr, B, NBB, eps, E: tl.constexpr,
                      F: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr,
                      USE_PDL: tl.constexpr, PREFETCH: tl.constexpr = False, LEAVE_OUT: tl.constexpr = 0,
                      LN_FOLD: tl.constexpr = False, EVICT: tl.constexpr = 0, PIECES: tl.constexpr = False):
    """Layer norm 2 + the first MLP matrix + bias + GELU (tanh approximation).

    Fuses: layer_norm(x) -> @ fc_w.T + fc_b -> gelu -> the hidden activations h [B, 4E] (fp32).
    Bytes (GPT-2 124M, batch 1, fp32): reads the 9.44 MB FC matrix + 12 KB bias + 6 KB norm
    weights (+ the 3 KB residual row per program, from L2); writes 12 KB of h.
    Launches per step: one per layer (12). Grid: cdiv(4E, BN) * cdiv(B, BB) programs.
    LN_FOLD and PIECES: as ln_qkv_kernel's.
    """
    _ln_fc(tl.program_id(0), x_ptr, ln_w, ln_b, w_ptr, bias_ptr, c1_ptr, c2_ptr, h_ptr, B, NBB, eps, E, F, BB, BN, BK,
           BE, USE_PDL, PREFETCH, LEAVE_OUT, 0, False, LN_FOLD, EVICT, PIECES)


@triton.jit
def _ln_fc(pid, x_ptr, ln_w, ln_b, w_ptr, bias_ptr, c1_ptr, c2_ptr, h_ptr, B, NBB, eps, E: tl.constexpr,
           F: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr,
           USE_PDL: tl.constexpr, PREFETCH: tl.constexpr, LEAVE_OUT: tl.constexpr, w_pre, PRELOADED: tl.constexpr,
           LN_FOLD: tl.constexpr = False, EVICT: tl.constexpr = 0, PIECES: tl.constexpr = False):
    """ln_fc_gelu_kernel's work for task `pid` (PRELOADED: as `_ln_qkv`)."""
    pid_n, b, n, b_mask, n_mask = _row_blocks_at(pid, NBB, B, F, BB, BN)  # batch fastest
    _pdl_launch(USE_PDL)
    ke = tl.arange(0, BE)
    P0: tl.constexpr = _piece(E, 0) if PIECES else BE
    P1: tl.constexpr = _piece(E, 1) if PIECES else 0
    P2: tl.constexpr = _piece(E, 2) if PIECES else 0
    FLAT: tl.constexpr = _flat(BN, P1, P2)
    if PREFETCH:  # the whole slice (BK == BE), the bias and the norm parameters (or their fold), before the wait
        w_first, w_1, w_2, g, g_1, g_2, shift, s_1, s_2, rows = _ln_prefetched(
            w_ptr, n, n_mask, pid_n * BN, ln_w, ln_b, bias_ptr, c1_ptr, c2_ptr, E, F, LN_FOLD, P0, P1, P2, FLAT,
            LEAVE_OUT, EVICT)
    elif PRELOADED:
        w_first = w_pre
    else:
        w_first = _load_w(w_ptr, n, n_mask, 0, E, BK, LEAVE_OUT)
    _pdl_wait(USE_PDL, LEAVE_OUT)
    if PREFETCH:
        x, x_1, x_2 = _pieces_x(x_ptr, x_ptr, x_ptr, x_ptr, 0, b, b_mask, E, False, P0, P1, P2, FLAT, LEAVE_OUT)
        if PIECES:
            y = _ln_gemv_pieces(x, x_1, x_2, E, eps, g, g_1, g_2, shift, s_1, s_2, rows, w_first, w_1, w_2, LN_FOLD,
                                P1, P2, FLAT)
        else:
            y = _ln_gemv_one(x, ke < E, E, eps, g, shift, rows, w_first, LN_FOLD)
    else:
        acc = _ln_gemv(x_ptr, x_ptr, x_ptr, x_ptr, 0, ln_w, ln_b, w_ptr, w_first, b, b_mask, n, n_mask,
                       E, eps, False, BB, BN, BK, BE, LEAVE_OUT)
        y = acc + tl.load(bias_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    y = _gelu(y, PREFETCH)  # tanh approximation, as GPT-2's gelu_new (fast on the PREFETCH path only: `_ln_gemv`)
    tl.store(h_ptr + b[:, None] * F + n[None, :], y, mask=_stored(b_mask[:, None] & n_mask[None, :], y, LEAVE_OUT))


# ------------------------------------------------------------------------------- kernel 4 of 4

@triton.jit
def fc2_residual_kernel(h_ptr, w_ptr, bias_ptr, x_in, x_out, B, NBB, E: tl.constexpr, F: tl.constexpr,
                        BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, USE_PDL: tl.constexpr,
                        PREFETCH: tl.constexpr = False, LEAVE_OUT: tl.constexpr = 0, EVICT: tl.constexpr = 0,
                        RES_AT_ONCE: tl.constexpr = False):
    """The second MLP matrix + bias + the residual add.

    Fuses: h @ fc2_w.T + fc2_b -> x + that (x_in = x_out in the step: in place, own rows only).
    Bytes (GPT-2 124M, batch 1, fp32): reads the 9.44 MB FC2 matrix + 3 KB bias (+ the 12 KB h
    row per program, from L2); reads and writes 3 KB of residual.
    Launches per step: one per layer (12). Grid: cdiv(E, BN) * cdiv(B, BB) programs.

    RES_AT_ONCE (PREFETCH): the residual asked for with the input, not during the reduction (`_res_at_once`).
    """
    _fc2(tl.program_id(0), h_ptr, w_ptr, bias_ptr, x_in, x_out, B, NBB, E, F, BB, BN, BK, USE_PDL, PREFETCH,
         LEAVE_OUT, 0, False, EVICT, RES_AT_ONCE)


@triton.jit
def _fc2(pid, h_ptr, w_ptr, bias_ptr, x_in, x_out, B, NBB, E: tl.constexpr, F: tl.constexpr, BB: tl.constexpr,
         BN: tl.constexpr, BK: tl.constexpr, USE_PDL: tl.constexpr, PREFETCH: tl.constexpr, LEAVE_OUT: tl.constexpr,
         w_pre, PRELOADED: tl.constexpr, EVICT: tl.constexpr = 0, RES_AT_ONCE: tl.constexpr = False):
    """fc2_residual_kernel's work for task `pid` (PRELOADED: as `_ln_qkv`; RES_AT_ONCE: as the kernel)."""
    _, b, n, b_mask, n_mask = _row_blocks_at(pid, NBB, B, E, BB, BN)  # batch fastest
    _pdl_launch(USE_PDL)
    if PREFETCH:  # the whole slice (BK >= F) and the bias, before the wait
        bias = _load_vec(bias_ptr, n, E)
        w_raw = _load_w_raw(w_ptr, n, n_mask, F, BK, LEAVE_OUT, EVICT)
    elif PRELOADED:
        w = w_pre
    else:
        w = _load_w(w_ptr, n, n_mask, 0, F, BK, LEAVE_OUT)
    _pdl_wait(USE_PDL, LEAVE_OUT)
    res = _residual(x_in, b, b_mask, n, n_mask, E, LEAVE_OUT)
    if PREFETCH:
        k = tl.arange(0, BK)
        a = _load_x(h_ptr, h_ptr, h_ptr, h_ptr, 0, b, b_mask, k, F, False, LEAVE_OUT)
        if RES_AT_ONCE:
            w_raw = _res_at_once(w_raw, res)
        acc = _dot_slice(a, w_raw)
    else:
        acc = tl.zeros([BB, BN], dtype=tl.float32)
        for k0 in range(0, F, BK):
            k = k0 + tl.arange(0, BK)
            a = _load_x(h_ptr, h_ptr, h_ptr, h_ptr, 0, b, b_mask, k, F, False, LEAVE_OUT)
            acc += tl.sum(a[:, None, :] * w, axis=2)
            w = _load_w(w_ptr, n, n_mask, k0 + BK, F, BK, LEAVE_OUT)
        bias = _load_vec(bias_ptr, n, E)
    _add_residual(res, x_out, acc, bias, b, b_mask, n, n_mask, E, LEAVE_OUT)


# ------------------------------------------------------------------------------- the head

@triton.jit
def lm_head_kernel(x_ptr, ln_w, ln_b, wte_ptr, logits_ptr, part_val, part_idx, B, NBB, eps,
                   tok_ptr, out_ptr, pos_ptr, new_pos_ptr, MAXLEN, done_ptr, E: tl.constexpr,
                   V: tl.constexpr, NBLK: tl.constexpr,
                   BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BE: tl.constexpr,
                   USE_PDL: tl.constexpr, LEAVE_OUT: tl.constexpr = 0, EVICT: tl.constexpr = 0,
                   SUM_ONCE: tl.constexpr = 0, ARGMAX_FOLD: tl.constexpr = 0, NB: tl.constexpr = 1,
                   AB: tl.constexpr = 1, BP: tl.constexpr = 1):
    """The final layer norm + the tied lm_head (x @ wte.T) + each row block's argmax (SUM_ONCE: `_ln_gemv`).

    Fuses: layer_norm(x) -> logits [B, V] in the weights' dtype (what the step returns) -> per
    program, the largest logit of its BN rows and its index (first index on ties, as torch.argmax),
    computed on the logits as stored, so the token is the argmax of the returned logits.
    Bytes (GPT-2 124M, batch 1, fp32): reads the 154.4 MB embedding matrix (the largest single
    read of the step: 31% of its weight bytes) + 6 KB norm weights; writes 201 KB of logits and
    8 B per program of partial argmax. Launches per step: 1. Grid: cdiv(V, BN) * cdiv(B, BB).

    ARGMAX_FOLD (lab.step.fused.step.prepare's `argmax_fold`): the step's last launch, the argmax over the candidates
    and the step's bookkeeping (lab.step.fused.rows.argmax_advance_kernel), is done by this launch's last program.
    Every program, once its candidates are stored, counts itself in on done_ptr (int32 [1], zero between launches): a
    CTA barrier, then one acquire-release atomic at GPU scope, as the folded attention's count-in
    (attention._fold_attention); the program that completes the count zeroes it and, every candidate stored, takes
    the argmax over them (AB batch rows at a time, BP >= NBLK candidates, NB = B rows) and writes tok, out[:, pos + 1]
    and new_pos. Bytes: 4 B of atomic per program; the last reads the candidates back (8 B each). Without it, tok_ptr
    to done_ptr are not read.
    """
    pid_n, b, n, b_mask, n_mask = _row_blocks(NBB, B, V, BB, BN)  # batch fastest
    _pdl_launch(USE_PDL)
    w_first = _load_w(wte_ptr, n, n_mask, 0, E, BK, LEAVE_OUT, EVICT)
    _pdl_wait(USE_PDL, LEAVE_OUT)
    acc = _ln_gemv(x_ptr, x_ptr, x_ptr, x_ptr, 0, ln_w, ln_b, wte_ptr, w_first, b, b_mask, n, n_mask,
                   E, eps, False, BB, BN, BK, BE, LEAVE_OUT, EVICT, SUM_ONCE)
    logits = acc.to(logits_ptr.dtype.element_ty)
    tl.store(logits_ptr + b[:, None] * V + n[None, :], logits,
             mask=_stored(b_mask[:, None] & n_mask[None, :], acc, LEAVE_OUT))
    val = tl.where(n_mask[None, :], logits.to(tl.float32), float("-inf"))
    best = tl.argmax(val, axis=1, tie_break_left=True)
    top = tl.max(val, axis=1)
    tl.store(part_val + b * NBLK + pid_n, top, mask=_stored(b_mask, top, LEAVE_OUT))
    tl.store(part_idx + b * NBLK + pid_n, pid_n * BN + best, mask=_stored(b_mask, top, LEAVE_OUT))
    if ARGMAX_FOLD:
        tl.debug_barrier()  # every thread of the program has issued its stores before one thread counts it in
        seen = tl.atomic_add(done_ptr, 1, sem="acq_rel", scope="gpu")
        if seen == tl.num_programs(0) - 1:
            tl.store(done_ptr, 0)
            tl.debug_barrier()  # every thread reads after the acquire
            _argmax_advance(part_val, part_idx, tok_ptr, out_ptr, pos_ptr, new_pos_ptr, MAXLEN, NB, NBLK, AB, BP,
                            True)

