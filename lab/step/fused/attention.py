"""The attention kernels of the fused step: flash-decoding over the KV cache, and the combine of its splits.

`attention_kernel` splits the reached cache slots over programs and writes unnormalised partials;
on the GEMV path the projection kernel combines them as it loads its input (`_attention_chunk`),
on the library-GEMM path `combine_kernel` writes the normalised attention output for the GEMM.
"""

from __future__ import annotations

import triton
import triton.language as tl

from lab.step.fused.rows import _ATTEND, _FENCE, _INPUT, _made, _pdl_launch, _pdl_wait, _stored


@triton.jit
def attention_kernel(q_ptr, cache_ptr, pos_ptr, part_o, part_m, part_l, B, L, scale, E: tl.constexpr,
                     H: tl.constexpr, DH: tl.constexpr, NS: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr,
                     USE_PDL: tl.constexpr, EARLY: tl.constexpr = False, QKV: tl.constexpr = False,
                     LEAVE_OUT: tl.constexpr = 0):
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

    QKV (the library-GEMM path): q_ptr is the QKV GEMM's output [B, 3E] (bias included). The query is
    its first E columns; slot `pos` is not read from the cache but taken from its K and V columns,
    and the program whose split holds `pos` writes them into the cache (no other program of the
    kernel reads that slot, so nothing races): the cache write needs no launch of its own.

    LEAVE_OUT (lab.step.fused.stages, on the gemv path): q, K and V made in registers (INPUT; the position is still
    read), the partials not stored (STORE), no PDL wait (WAIT).
    """
    _attention(tl.program_id(0), q_ptr, cache_ptr, pos_ptr, part_o, part_m, part_l, B, L, scale, E, H, DH, NS, BS,
               BD, USE_PDL, EARLY, QKV, LEAVE_OUT)


@triton.jit
def _attention(pid, q_ptr, cache_ptr, pos_ptr, part_o, part_m, part_l, B, L, scale, E: tl.constexpr, H: tl.constexpr,
               DH: tl.constexpr, NS: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr, USE_PDL: tl.constexpr,
               EARLY: tl.constexpr, QKV: tl.constexpr, LEAVE_OUT: tl.constexpr):
    """attention_kernel's work for task `pid` (a launch's program, or one of a persistent program's tasks)."""
    s = pid % NS
    bh = pid // NS
    b = bh // H
    h = bh % H
    _pdl_launch(USE_PDL)
    _pdl_wait(USE_PDL, LEAVE_OUT)
    d = tl.arange(0, BD)
    d_mask = d < DH
    slot = s * BS + tl.arange(0, BS)
    base = (b * H + h) * L * DH + slot[:, None] * DH + d[None, :]
    if EARLY:  # every slot of the split inside the cache, K and V at once: nothing waits for the position
        inside = (slot < L)[:, None] & d_mask[None, :]
        k_raw = tl.load(cache_ptr + base, mask=inside, other=0.0)
        v_raw = tl.load(cache_ptr + B * H * L * DH + base, mask=inside, other=0.0)
    pos = tl.load(pos_ptr)
    if QKV:
        row = q_ptr + b * 3 * E + h * DH + d
        q = tl.load(row, mask=d_mask, other=0.0).to(tl.float32)
    else:
        q = _made(tl.load(q_ptr + b * E + h * DH + d, mask=d_mask, other=0.0), LEAVE_OUT, _INPUT)
    valid = (slot <= pos) & (slot < L)
    mask = valid[:, None] & d_mask[None, :]
    if QKV:  # slot pos from this step's K and V (written to the cache below), the others from the cache
        fresh = ((slot == pos) & valid)[:, None] & d_mask[None, :]
        old = mask & (slot != pos)[:, None]
    if EARLY:
        k = _made(k_raw.to(tl.float32), LEAVE_OUT, _INPUT)
    elif QKV:
        k_new = tl.load(row + E, mask=d_mask, other=0.0)
        k = tl.where(fresh, k_new.to(tl.float32)[None, :],
                     tl.load(cache_ptr + base, mask=old, other=0.0).to(tl.float32))
    else:
        k = _made(tl.load(cache_ptr + base, mask=mask, other=0.0).to(tl.float32), LEAVE_OUT, _INPUT)  # cache[0, b, h]
    scores = tl.where(valid, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
    m = tl.max(scores, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # a split with no reached slot: l = 0, o = 0
    p = tl.where(valid, tl.exp(scores - m_safe), 0.0)
    if EARLY:  # unreached slots may hold anything (a stale sequence): zero them, p is 0 there
        v = _made(tl.where(mask, v_raw.to(tl.float32), 0.0), LEAVE_OUT, _INPUT)
    elif QKV:
        v_new = tl.load(row + 2 * E, mask=d_mask, other=0.0)
        v = tl.where(fresh, v_new.to(tl.float32)[None, :],
                     tl.load(cache_ptr + B * H * L * DH + base, mask=old, other=0.0).to(tl.float32))
        own = (pos // BS == s) & (pos < L)  # the split holding slot pos stores this step's K and V there
        at = (b * H + h) * L * DH + pos * DH + d
        tl.store(cache_ptr + at, k_new, mask=d_mask & own)
        tl.store(cache_ptr + B * H * L * DH + at, v_new, mask=d_mask & own)
    else:
        v = _made(tl.load(cache_ptr + B * H * L * DH + base, mask=mask, other=0.0).to(tl.float32), LEAVE_OUT,
                  _INPUT)  # V: cache[1, b, h]
    o = tl.sum(p[:, None] * v, axis=0)
    split = (b * H + h) * NS + s
    tl.store(part_o + split * DH + d, o, mask=_stored(d_mask, o, LEAVE_OUT))
    tl.store(part_m + split, m, mask=_stored(True, m, LEAVE_OUT))
    tl.store(part_l + split, tl.sum(p, axis=0), mask=_stored(True, m, LEAVE_OUT))


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


@triton.jit
def combine_kernel(part_o, part_m, part_l, att_ptr, B, NBB, E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                   NS: tl.constexpr, BB: tl.constexpr, BK: tl.constexpr, USE_PDL: tl.constexpr):
    """The library-GEMM path: the NS attention splits combined into att [B, E] (normalised, in att's
    dtype: the projection GEMM's input). What the GEMV projection kernel does as it loads its input.
    Bytes: reads B * H * NS * (dh + 2) fp32 partials, writes B * E values. Grid: cdiv(E, BK) * cdiv(B, BB).
    """
    b = (tl.program_id(0) % NBB) * BB + tl.arange(0, BB)  # batch fastest
    k = (tl.program_id(0) // NBB) * BK + tl.arange(0, BK)
    b_mask = b < B
    _pdl_launch(USE_PDL)
    _pdl_wait(USE_PDL)
    a = _attention_chunk(part_o, part_m, part_l, b, b_mask, k, E, H, DH, NS, BB, BK)
    tl.store(att_ptr + b[:, None] * E + k[None, :], a.to(att_ptr.dtype.element_ty),
             mask=b_mask[:, None] & (k < E)[None, :])


@triton.jit
def _qkv_block_row(pid_n, E: tl.constexpr, DH: tl.constexpr, BN: tl.constexpr, HEAD_MAJOR: tl.constexpr = False):
    """(row, head): the first of the BN rows (of the [3E, E] QKV matrix) that ln_qkv's row block `pid_n` holds, and
    the head they belong to. In the q-K-V order (every q block, then every K block, then every V block) the row is
    pid_n * BN; HEAD_MAJOR (BN divides DH), the blocks of head h are pid_n = h * 3 * DH / BN ... (h + 1) * 3 * DH / BN -
    1, its q rows first, then its K rows, then its V rows."""
    if HEAD_MAJOR:
        per_head: tl.constexpr = 3 * (DH // BN)
        j = pid_n % per_head
        h = pid_n // per_head
        row = j // (DH // BN) * E + h * DH + j % (DH // BN) * BN
    else:
        row = pid_n * BN
        h = row % E // DH
    return row, h


@triton.jit
def _l2_prefetch(ptr, size):
    """Ask L2 for `size` bytes at `ptr` (`cp.async.bulk.prefetch.L2`, sm_90), from the program's thread 0, where the
    address is 16-byte aligned and the size positive (a multiple of 16: the caller rounds it down). Nothing waits for
    it and nothing reads its result: it changes no value, only where later loads of those bytes are served from.
    Inline assembly: not for Triton's interpreter."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; .reg .b64 a; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; and.b64 a, $1, 15; "
        "setp.eq.and.u64 p, a, 0, p; setp.gt.and.s32 p, $2, 0, p; @p cp.async.bulk.prefetch.L2.global [$1], $2; "
        "mov.u32 $0, 0; }",
        "=r,l,r", [ptr, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _kv_to_l2(pid, cache_ptr, pos_ptr, B, NBB, L, E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
              BB: tl.constexpr, BN: tl.constexpr, HEAD_MAJOR: tl.constexpr = False):
    """KV_L2 (the folded ln_qkv, before its PDL wait): the first q program of each head and batch block asks L2 for the
    K and V of the head's reached slots, its BB batch rows', so that the head's last program, which attends after its
    count-in (`_fold_attention`), finds them in L2 rather than in HBM, where a step's stream of weights has pushed them
    since the step before. The position is read before the wait: this step's or, should the step before still be
    writing it, that one's; a prefetch is a hint either way (the slot this step writes is stored by this launch's K and
    V programs, through L2). Bytes: none beyond what the attention reads, earlier."""
    bb = pid % NBB
    row, h = _qkv_block_row(pid // NBB, E, DH, BN, HEAD_MAJOR)
    if (row % DH == 0) & (row < E):
        ESIZE: tl.constexpr = cache_ptr.dtype.element_ty.primitive_bitwidth // 8
        reached = tl.minimum(tl.load(pos_ptr) + 1, L)
        size = (reached * (DH * ESIZE) // 16 * 16).to(tl.int32)
        for i in tl.static_range(BB):
            b = bb * BB + i
            if b < B:
                at = (b * H + h) * L * DH
                _l2_prefetch(cache_ptr + at, size)  # K: cache[0, b, h, :reached]
                _l2_prefetch(cache_ptr + B * H * L * DH + at, size)  # V: cache[1, b, h, :reached]


_FULL = tl.constexpr(1 << 32)  # a word's flag (OLDER_FIRST=2: bit 32; the value's fp32 bits are bits 0-31)
_LOW = tl.constexpr(0xFFFFFFFF)


@triton.jit
def _word(value):
    """fp32 `value` as a flagged word: its bits in bits 0-31 of an int64, the flag in bit 32 (one 8-byte store carries
    both, so a reader sees the value and its flag together or neither, with no fence)."""
    return (value.to(tl.int32, bitcast=True).to(tl.int64) & _LOW) | _FULL


@triton.jit
def _opened(word):
    """A flagged word's value (its low 32 bits, an fp32's bits)."""
    return (word & _LOW).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _words_put(pid, mail_ptr, out, B, NBB, E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr, BB: tl.constexpr,
               BN: tl.constexpr, HEAD_MAJOR: tl.constexpr, KV_TY: tl.constexpr):
    """OLDER_FIRST=2: ln_qkv's task `pid`'s rows `out` [BB, BN] as flagged words (`_word`) into its batch rows' words
    (mail_ptr, int64 [B, 4E + 2H], zero between launches: q, K and V at their rows' columns 0-3E, each value as the
    attention reads it: q in fp32 as the workspace holds it, K and V rounded to the cache's dtype, KV_TY, and widened
    back), for the head's last count-in to take (`_newest_words`)."""
    b = (pid % NBB) * BB + tl.arange(0, BB)
    row, _ = _qkv_block_row(pid // NBB, E, DH, BN, HEAD_MAJOR)
    n = row + tl.arange(0, BN)
    value = tl.where((n < E)[None, :], out, out.to(KV_TY).to(tl.float32))
    tl.store(mail_ptr + b[:, None] * (4 * E + 2 * H) + n[None, :], _word(value),
             mask=(b < B)[:, None] & (n < 3 * E)[None, :])


@triton.jit
def _count_in(counter, LEAVE_OUT: tl.constexpr, RELAXED: tl.constexpr = False):
    """The fold's count-in on `counter`: one acquire-release atomic add at GPU scope (the program's stores, issued by
    every thread at the CTA barrier before it, visible to whoever reads its answer later; what that one wrote visible
    after it), or relaxed with Stage.FENCE (timing only) or RELAXED (OLDER_FIRST=2: what it hands over is in flagged
    words, which need no fence). Returns what the counter held before."""
    if RELAXED or (_FENCE & LEAVE_OUT) != 0:  # (compile-time switches: the step's build is the acq_rel add)
        seen = tl.atomic_add(counter, 1, sem="relaxed", scope="gpu")
    else:
        seen = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    return seen


@triton.jit
def _online(q, cache_ptr, b, h, reached, pos, B, L, scale, H: tl.constexpr, DH: tl.constexpr, BS: tl.constexpr,
            BD: tl.constexpr, KV_AT_ONCE: tl.constexpr):
    """The online softmax of query row `q` [BD] over head h's cache slots [0, reached) of batch row b, in chunks of BS
    slots read through L2 (`.cg`): (m, den, num), the running max of the scores, the sum of their exps and the
    exp-weighted sum of V [BD], unnormalised; (-inf, 0, 0) where no slot is reached. KV_AT_ONCE: as _fold_attention's
    (its select on `pos`, the position: on the count of slots, which the loop's condition bounds, ptxas folds it)."""
    d = tl.arange(0, BD)
    d_mask = d < DH
    m = tl.full([], float("-inf"), tl.float32)
    den = tl.full([], 0.0, tl.float32)
    num = tl.zeros([BD], dtype=tl.float32)
    s0 = 0
    while s0 < reached:  # (a while loop: the interpreter's range wants constant bounds)
        slot = s0 + tl.arange(0, BS)
        valid = slot < reached
        mask = valid[:, None] & d_mask[None, :]
        base = (b * H + h) * L * DH + slot[:, None] * DH + d[None, :]
        k = tl.load(cache_ptr + base, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
        v = tl.load(cache_ptr + B * H * L * DH + base, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
        if KV_AT_ONCE:  # always k: the select only makes the scores wait for V's loads too
            k = tl.where(pos >= 0, k, v)
        scores = tl.where(valid, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=0))  # finite: every chunk holds a reached slot
        alpha = tl.exp(m - m_new)
        p = tl.where(valid, tl.exp(scores - m_new), 0.0)
        den = den * alpha + tl.sum(p, axis=0)
        num = num * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
        s0 += BS
    return m, den, num


@triton.jit
def _older_slots(q_ptr, cache_ptr, pos, part_o, part_m, part_l, mail_ptr, bb, h, B, L, scale, E: tl.constexpr,
                 H: tl.constexpr, DH: tl.constexpr, NS: tl.constexpr, BB: tl.constexpr, BS: tl.constexpr,
                 BD: tl.constexpr, KV_AT_ONCE: tl.constexpr, WORDS: tl.constexpr, ATTEND: tl.constexpr):
    """OLDER_FIRST's first half, in the head's last q program: head h's attention over the slots before `pos` (written
    by earlier steps, so no program of this launch writes them) for the BB batch rows of block bb, unnormalised, into
    the head's first attention partial (part_o [B, H, NS, DH], part_m and part_l [B, H, NS], split 0), or with WORDS as
    flagged words (mail_ptr's columns 3E + h DH ... for the sum, 4E + 2h and 4E + 2h + 1 for the max and the sum of
    exps): what the slot this step writes is then added to (`_newest_slot`, `_newest_words`). Not ATTEND (Stage.ATTEND
    left out, timing only): nothing computed; with WORDS zeros are put all the same (the last count-in waits for
    them)."""
    d = tl.arange(0, BD)
    d_mask = d < DH
    for i in tl.static_range(BB):
        b = bb * BB + i
        if b < B:
            if ATTEND:
                q = tl.load(q_ptr + b * E + h * DH + d, mask=d_mask, other=0.0, cache_modifier=".cg")
                m, den, num = _online(q, cache_ptr, b, h, tl.minimum(pos, L), pos, B, L, scale, H, DH, BS, BD,
                                      KV_AT_ONCE)
            else:
                m = tl.full([], 0.0, tl.float32)
                den = tl.full([], 0.0, tl.float32)
                num = tl.zeros([BD], dtype=tl.float32)
            if WORDS:
                at = mail_ptr + b * (4 * E + 2 * H)
                tl.store(at + 3 * E + h * DH + d, _word(num), mask=d_mask)
                tl.store(at + 4 * E + 2 * h, _word(m))
                tl.store(at + 4 * E + 2 * h + 1, _word(den))
            elif ATTEND:
                split = (b * H + h) * NS
                tl.store(part_o + split * DH + d, num, mask=d_mask)
                tl.store(part_m + split, m)
                tl.store(part_l + split, den)


@triton.jit
def _new_step(q, k, v, num, m, den, pos, L, scale):
    """The slot `pos` (its K and V rows k, v [BD]; none where pos >= L, a full cache) added to an unnormalised partial
    (num [BD], m, den) over the older slots by one more step of the online softmax, normalised: the head's output row.
    Every load its inputs came from is asked for in one round trip: the sum waits for all of them."""
    # always k (a position is never negative), but the sum then waits for V's and the partial's loads too, so ptxas
    # issues them with q's and K's (without it, some after the sum's first shuffle: a second round trip)
    k = tl.where(pos >= 0, k, v + num + m + den)
    score = tl.where(pos < L, tl.sum(q * k, axis=0) * scale, float("-inf"))
    m_new = tl.maximum(m, score)  # finite: slot pos, or a full cache's older slots
    alpha = tl.exp(m - m_new)  # 0 where no slot is older (m = -inf)
    p = tl.exp(score - m_new)  # 0 for a full cache
    return tl.div_rn(num * alpha + p * v, den * alpha + p)


@triton.jit
def _newest_slot(q_ptr, cache_ptr, pos, part_o, part_m, part_l, att_ptr, bb, h, B, L, scale, E: tl.constexpr,
                 H: tl.constexpr, DH: tl.constexpr, NS: tl.constexpr, BB: tl.constexpr, BD: tl.constexpr):
    """OLDER_FIRST's second half, in the head's last program to count in: the slot `pos` (K and V as this launch's
    programs stored them) added to the partial over the older slots (`_older_slots`) by one more step of the online
    softmax (`_new_step`), normalised, into att [B, E]. Its loads (q, the new K and V rows, the partial) are independent
    and issued together: one round trip, then one sum over the head's width."""
    d = tl.arange(0, BD)
    d_mask = d < DH
    for i in tl.static_range(BB):
        b = bb * BB + i
        if b < B:
            split = (b * H + h) * NS
            q = tl.load(q_ptr + b * E + h * DH + d, mask=d_mask, other=0.0, cache_modifier=".cg")
            fresh = d_mask & (pos < L)  # (a full cache: its slots are all older; nothing is new)
            at = (b * H + h) * L * DH + pos * DH + d
            k = tl.load(cache_ptr + at, mask=fresh, other=0.0, cache_modifier=".cg").to(tl.float32)
            v = tl.load(cache_ptr + B * H * L * DH + at, mask=fresh, other=0.0, cache_modifier=".cg").to(tl.float32)
            num = tl.load(part_o + split * DH + d, mask=d_mask, other=0.0, cache_modifier=".cg")
            m = tl.load(part_m + split, cache_modifier=".cg")
            den = tl.load(part_l + split, cache_modifier=".cg")
            tl.store(att_ptr + b * E + h * DH + d, _new_step(q, k, v, num, m, den, pos, L, scale), mask=d_mask)


@triton.jit
def _unflagged(wq, wk, wv, wo, wm, wl):
    """Whether any of a head's words (`_newest_words`'s: the vectors [BD] and the pair of scalars) is not flagged yet, as
    one value every thread of the program shares: the scalars' flags go into the vectors' reduction, so the answer is
    the reduction's, read by all threads alike. (Each thread loads a scalar itself: with its flags outside the
    reduction, one thread could see a word land that another has not yet, and the program's threads leave the polling
    loop at different rounds, apart at its CTA barriers: it hung, docs/fused-step.md item 35.)"""
    flags = ((wq & wk & wv & wo & (wm & wl)) >> 32).to(tl.int32)
    return tl.min(flags, axis=0) == 0


@triton.jit
def _newest_words(mail_ptr, att_ptr, pos, bb, h, B, L, scale, E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr,
                  BB: tl.constexpr, BD: tl.constexpr, ATTEND: tl.constexpr):
    """OLDER_FIRST=2's second half: `_newest_slot`'s step from the flagged words (`_words_put`, `_older_slots`) rather
    than from memory: head h's q, new K and V rows and the older slots' partial, read (volatile: L1 bypassed) until
    every word is flagged, then zeroed for the next launch; the step's output into att. The program is the head's last
    to count in, so every word it waits for has been issued (each program issues its words before it counts in, after a
    CTA barrier): it cannot wait for a word no program will write. Not ATTEND (timing only): the words taken and zeroed
    all the same, nothing computed."""
    d = tl.arange(0, BD)
    d_mask = d < DH
    for i in tl.static_range(BB):
        b = bb * BB + i
        if b < B:
            row = mail_ptr + b * (4 * E + 2 * H)
            at = row + h * DH + d
            pair = row + 4 * E + 2 * h
            wq = tl.load(at, mask=d_mask, other=_FULL, volatile=True)
            wk = tl.load(at + E, mask=d_mask, other=_FULL, volatile=True)
            wv = tl.load(at + 2 * E, mask=d_mask, other=_FULL, volatile=True)
            wo = tl.load(at + 3 * E, mask=d_mask, other=_FULL, volatile=True)
            wm = tl.load(pair, volatile=True)
            wl = tl.load(pair + 1, volatile=True)
            while _unflagged(wq, wk, wv, wo, wm, wl):
                wq = tl.load(at, mask=d_mask, other=_FULL, volatile=True)  # a word not flagged yet: read them again
                wk = tl.load(at + E, mask=d_mask, other=_FULL, volatile=True)
                wv = tl.load(at + 2 * E, mask=d_mask, other=_FULL, volatile=True)
                wo = tl.load(at + 3 * E, mask=d_mask, other=_FULL, volatile=True)
                wm = tl.load(pair, volatile=True)
                wl = tl.load(pair + 1, volatile=True)
            zero = tl.zeros_like(wq)
            for j in tl.static_range(4):
                tl.store(at + j * E, zero, mask=d_mask)
            tl.store(pair, tl.zeros_like(wm))
            tl.store(pair + 1, tl.zeros_like(wl))
            if ATTEND:
                out = _new_step(_opened(wq), _opened(wk), _opened(wv), _opened(wo), _opened(wm), _opened(wl), pos, L,
                                scale)
                tl.store(att_ptr + b * E + h * DH + d, out, mask=d_mask)


@triton.jit
def _fold_attention(pid, q_ptr, cache_ptr, pos, att_ptr, heads_ptr, B, NBB, L, scale, part_o, part_m, part_l, mail_ptr,
                    E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr,
                    BS: tl.constexpr, BD: tl.constexpr, HEAD_MAJOR: tl.constexpr = False, LEAVE_OUT: tl.constexpr = 0,
                    KV_AT_ONCE: tl.constexpr = False, OLDER_FIRST: tl.constexpr = 0, NS: tl.constexpr = 1):
    """FOLD (the `ln_qkv` launch that also attends): after ln_qkv's program `pid` stored its rows, it counts itself in
    for its head; the last of the head's 3 * DH / BN programs (q, K and V rows, each program one part of one head: BN
    divides DH) then finds every q, K and V row of the head stored, and computes the head's attention for its BB
    batch rows over the reached slots, normalised, into att [B, E]: the projection's input, with no attention launch
    between the two and no splits to combine. HEAD_MAJOR: ln_qkv's row blocks in the order of the heads.

    The hand-over is the threadfence-reduction pattern: a CTA barrier (every thread's stores issued), then one
    acquire-release atomic at GPU scope on the head's counter (`_count_in`); the program that reads 3 * DH / BN - 1
    zeroes it for the next launch (every other program of the head has counted in) and reads what the others wrote
    through L2 (`.cg`). The softmax runs online over chunks of BS slots, up to the position (the rows past `pos` cost no
    traffic; `_online`). Bytes: 4 B of atomic per program; the last one reads q, and K and V of the reached slots, once
    per head and batch row (what the attention launch read), and writes DH fp32 per row.

    `pos` is the position as the program read it after its PDL wait (ln_qkv's `_ln_qkv` returns it: the step does not
    change it), so the last program's first loads after its count-in are q, K and V, not the position before them; and
    the softmax's running max and sum start as scalars, not as reductions of constant tiles (each a reduction across
    warps through shared memory: five CTA barriers on the path, which the compiler does not fold).

    KV_AT_ONCE: K and V of a chunk asked for in one round trip. Their loads are issued together in the PTX, but ptxas
    (Triton 3.6's, sm_90, at every register cap tried from 90 to 255) moves V's after the scores' multiply-adds, which
    wait for K: V's round trip then starts only once K has arrived, and the softmax's reductions hide only part of it.
    With the switch each K value the scores use is selected by `pos >= 0` between itself and its V value: always K
    (a position is never negative), but the compiler cannot know it, so the scores depend on V's loads and ptxas
    issues them with K's (`lab.step.fused.aot`'s `tail_late_loads` counts the tail's loads issued after its first
    exchange between threads). The values are the same; the cost is one select a value and the registers that hold K
    and V at once (GPT-2 124M bf16: 128 a thread against 90).

    OLDER_FIRST (docs/fused-step.md item 35): the attention over the slots before `pos`, which needs q but no K or V of
    this step, is taken by the head's last q program as soon as the head's q programs have counted in on a counter of
    their own (heads_ptr's second half, [cdiv(B, BB), H] after the first), while the head's K and V programs may still
    stream their weights (in the q-K-V order, every q program before any K or V program: ln_qkv's later waves are K and
    V programs); it stores that partial (`_older_slots`, into the attention partials' first split, which a folded plan
    does not otherwise use: NS the splits a head) and counts in on the head's counter with the K and V programs. The
    last of those 2 * DH / BN + 1 count-ins adds the slot `pos` (`_newest_slot`): one round trip and one sum over the
    head's width after the count-in, instead of the whole softmax over the reached slots. The values are those of
    another order of the same sums (the running max starts at the older slots'). Off unless bound.

    OLDER_FIRST=2: the same, with the hand-over to the last count-in in flagged words (mail_ptr, `_words_put`): every
    program has also put its rows there (ln_qkv_kernel), the last q program puts its partial there, and the K and V
    programs and the last q program count in on the head's counter with a relaxed atomic (after a CTA barrier: no
    release fence, so none waits for its stores to be acknowledged); the last takes the head's words once all are
    flagged (`_newest_words`). The q programs' own count-in keeps its fence (the last of them reads q from memory). The
    values are OLDER_FIRST=1's, bit for bit.

    LEAVE_OUT with Stage.ATTEND (lab.step.fused.stages; timing only): the last program zeroes the counter and attends no
    further (att is not written; with OLDER_FIRST neither is the partial), so that the A/B tool can time what the
    attention after the count-in costs. With Stage.FENCE also (timing only: the hand-over is then unordered) the
    count-in's atomic is relaxed: no release fence before it, no acquire after, so that the A/B tool can time what the
    fence costs apart from the atomic's answer (docs/fused-step.md item 31).
    """
    bb = pid % NBB
    row, h = _qkv_block_row(pid // NBB, E, DH, BN, HEAD_MAJOR)
    tl.debug_barrier()  # every thread of the program has issued its stores before one thread counts it in
    counter = heads_ptr + bb * H + h
    if OLDER_FIRST:
        WORDS: tl.constexpr = OLDER_FIRST == 2
        ATTEND: tl.constexpr = (_ATTEND & LEAVE_OUT) == 0  # (a compile-time switch: Stage.ATTEND, timing only)
        if row < E:  # a q program: counts in with the head's q programs; the last of them attends over the older slots
            q_counter = heads_ptr + NBB * H + bb * H + h
            last = _count_in(q_counter, LEAVE_OUT) == DH // BN - 1
            if last:
                tl.store(q_counter, 0)
                tl.debug_barrier()  # every thread reads after the acquire
                _older_slots(q_ptr, cache_ptr, pos, part_o, part_m, part_l, mail_ptr, bb, h, B, L, scale, E, H, DH, NS,
                             BB, BS, BD, KV_AT_ONCE, WORDS, ATTEND)
                tl.debug_barrier()  # every thread's partial issued before the program counts in for the head
                last = _count_in(counter, LEAVE_OUT, WORDS) == 2 * (DH // BN)
        else:
            last = _count_in(counter, LEAVE_OUT, WORDS) == 2 * (DH // BN)
        if last:
            tl.store(counter, 0)
            if WORDS:
                _newest_words(mail_ptr, att_ptr, pos, bb, h, B, L, scale, E, H, DH, BB, BD, ATTEND)
            else:
                tl.debug_barrier()  # every thread reads after the acquire
                if ATTEND:
                    _newest_slot(q_ptr, cache_ptr, pos, part_o, part_m, part_l, att_ptr, bb, h, B, L, scale, E, H, DH,
                                 NS, BB, BD)
    else:
        seen = _count_in(counter, LEAVE_OUT)
        if seen == 3 * (DH // BN) - 1:
            tl.store(counter, 0)
            tl.debug_barrier()  # every thread reads after the acquire
            if (_ATTEND & LEAVE_OUT) == 0:  # (a compile-time switch: the step's build is the code without it)
                d = tl.arange(0, BD)
                d_mask = d < DH
                reached = tl.minimum(pos + 1, L)
                for i in tl.static_range(BB):
                    b = bb * BB + i
                    if b < B:
                        q = tl.load(q_ptr + b * E + h * DH + d, mask=d_mask, other=0.0, cache_modifier=".cg")
                        m, den, num = _online(q, cache_ptr, b, h, reached, pos, B, L, scale, H, DH, BS, BD, KV_AT_ONCE)
                        tl.store(att_ptr + b * E + h * DH + d, tl.div_rn(num, den), mask=d_mask)
