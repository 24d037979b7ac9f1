"""Greedy GPT-2 decoding, three ways: the reference, a growing-cache step, and the fixed-shape step.

The fixed-shape step (`decode_step`) keeps everything that varies in device buffers of a
`DecodeState`: the token being fed, the position, the output tokens and the KV cache. It writes the
cache at the device-side position, attends over the whole buffer with unreached slots masked, writes
its own argmax back as the next input and advances the position on the device. Nothing on the host
depends on values, so the step is the same work at every position: Dynamo compiles it once and a
CUDA graph can capture it. The price: attention reads all `max_len` slots every step.

Layouts: tokens [B, 1]; one cache tensor per layer, [2, B, H, max_len, dh] (K and V side by side,
so one indexed write stores both; a whole tensor rather than a view of a bigger one, so Inductor
can write it in place instead of copying the buffer); output [B, max_len]. The output buffer holds the prompt in slots [0, T)
and each generated token at the slot after the one it was fed from. Weights are in the
[out, in] layout of nn.Linear (see lab.step.model), and attention is written out (matmul, mask, softmax,
matmul): on an H200 in fp32, PyTorch's fused memory-efficient attention kernel took 33 us per layer
for a single query, three times the explicit form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable

import torch
import torch.nn.functional as F

from lab.step.model import LayerWeights, Weights


@dataclass
class DecodeState:
    """All state of a fixed-shape decode, as long-lived device buffers with stable addresses."""

    tok: torch.Tensor  # [B, 1] int64: the token fed to the next step
    pos: torch.Tensor  # [1] int64: the position of `tok`
    out: torch.Tensor  # [B, max_len] int64: prompt, then generated tokens
    caches: tuple[torch.Tensor, ...]  # per layer [2, B, H, max_len, dh]: keys and values
    slots: torch.Tensor  # [max_len] int64: 0..max_len-1, constant (for masks)

    @property
    def batch(self) -> int:
        return int(self.tok.shape[0])

    @property
    def max_len(self) -> int:
        return int(self.out.shape[1])

    def buffers(self) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                out.update({f"{f.name}.{i}": t for i, t in enumerate(value)})
            else:
                out[f.name] = value
        return out

    def snapshot(self) -> dict[str, torch.Tensor]:
        """Copies of every buffer (for save/restore around warm-up and capture)."""
        return {name: t.clone() for name, t in self.buffers().items()}

    def restore(self, saved: dict[str, torch.Tensor]) -> None:
        """Copy saved values back into the same buffers (addresses unchanged)."""
        with torch.no_grad():
            for name, t in self.buffers().items():
                t.copy_(saved[name])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.buffers().values())


def new_state(w: Weights, batch: int, max_len: int) -> DecodeState:
    dev, dt = w.device, w.dtype
    shape = (2, batch, w.n_head, max_len, w.head_dim)
    return DecodeState(
        tok=torch.zeros(batch, 1, dtype=torch.long, device=dev),
        pos=torch.zeros(1, dtype=torch.long, device=dev),
        out=torch.zeros(batch, max_len, dtype=torch.long, device=dev),
        caches=tuple(torch.zeros(shape, dtype=dt, device=dev) for _ in range(w.n_layer)),
        slots=torch.arange(max_len, dtype=torch.long, device=dev),
    )


def _ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def _mlp(x: torch.Tensor, lw: LayerWeights, eps: float) -> torch.Tensor:
    h = _ln(x, lw.ln2_w, lw.ln2_b, eps)
    return F.linear(F.gelu(F.linear(h, lw.fc_w, lw.fc_b), approximate="tanh"), lw.fc2_w, lw.fc2_b)


def _qkv_stacked(x: torch.Tensor, lw: LayerWeights, n_head: int, eps: float) -> torch.Tensor:
    """[B, T, E] -> q, k, v stacked as [3, B, H, T, dh]."""
    B, T, E = x.shape
    h = _ln(x, lw.ln1_w, lw.ln1_b, eps)
    qkv = F.linear(h, lw.attn_w, lw.attn_b).view(B, T, 3, n_head, E // n_head)
    return qkv.permute(2, 0, 3, 1, 4)


def _qkv(x: torch.Tensor, lw: LayerWeights, n_head: int, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[B, T, E] -> q, k, v each [B, H, T, dh]."""
    q, k, v = _qkv_stacked(x, lw, n_head, eps).unbind(0)
    return q, k, v


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masked: torch.Tensor | None) -> torch.Tensor:
    """q [B,H,Tq,dh] over k,v [B,H,S,dh]; `masked` ([S] or [Tq, S]) True where a slot must not be read."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [B, H, Tq, S]
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # [B, H, Tq, dh]


def _proj(att: torch.Tensor, lw: LayerWeights) -> torch.Tensor:
    B, H, T, dh = att.shape
    return F.linear(att.transpose(1, 2).reshape(B, T, H * dh), lw.proj_w, lw.proj_b)


def _logits(x: torch.Tensor, w: Weights) -> torch.Tensor:
    return _ln(x, w.ln_f_w, w.ln_f_b, w.eps) @ w.wte.t()


# ---------------------------------------------------------------------------- prefill (eager, once)

@torch.no_grad()
def prefill(state: DecodeState, w: Weights, prompt: torch.Tensor) -> torch.Tensor:
    """Run the prompt [B, T] through the model, fill cache slots [0, T), pick the first token.

    Afterwards out[:, :T] is the prompt, out[:, T] and tok hold the first generated token, pos = T.
    Returns the logits of the last prompt position [B, V].
    """
    B, T = prompt.shape
    if B != state.batch:
        raise ValueError(f"prompt batch {B} does not match the state's batch {state.batch}")
    if T + 1 > state.max_len:
        raise ValueError(f"prompt of {T} tokens does not fit a cache of {state.max_len} slots")
    positions = torch.arange(T, device=prompt.device)
    x = F.embedding(prompt, w.wte) + w.wpe[positions]
    causal = positions[None, :] > positions[:, None]  # [T, T] True above the diagonal
    for i, lw in enumerate(w.layers):
        q, k, v = _qkv(x, lw, w.n_head, w.eps)
        state.caches[i][0, :, :, :T] = k
        state.caches[i][1, :, :, :T] = v
        x = x + _proj(_attend(q, k, v, causal), lw)
        x = x + _mlp(x, lw, w.eps)
    logits = _logits(x[:, -1:], w)[:, 0]
    first = logits.argmax(-1)
    state.out.zero_()
    state.out[:, :T] = prompt
    state.out[:, T] = first
    state.tok.copy_(first[:, None])
    state.pos.fill_(T)
    return logits


def prefilled(w: Weights, prompt: torch.Tensor, max_len: int) -> DecodeState:
    """A new state of `max_len` slots for the prompt's batch, the prompt prefilled (`prefill`)."""
    state = new_state(w, prompt.shape[0], max_len)
    prefill(state, w, prompt)
    return state


# ---------------------------------------------------------------------------- the fixed-shape step

def decode_step(state: DecodeState, w: Weights) -> torch.Tensor:
    """One greedy step at the device-side position: same work at every position. Returns logits [B, V]."""
    pos = state.pos
    x = F.embedding(state.tok, w.wte) + w.wpe.index_select(0, pos)  # [B, 1, E]
    unreached = state.slots > pos  # [max_len]: slots beyond the position are masked, never sliced
    for i, lw in enumerate(w.layers):
        qkv = _qkv_stacked(x, lw, w.n_head, w.eps)  # [3, B, H, 1, dh]
        kv = state.caches[i]  # [2, B, H, max_len, dh]
        kv[:, :, :, pos] = qkv[1:]  # write K and V at the device-side position, in one indexed store
        x = x + _proj(_attend(qkv[0], kv[0], kv[1], unreached), lw)
        x = x + _mlp(x, lw, w.eps)
    logits = _logits(x, w)[:, 0]  # [B, V]
    nxt = logits.argmax(-1, keepdim=True)  # [B, 1]
    state.out.index_copy_(1, pos + 1, nxt)  # record the token in the slot after its input
    state.tok.copy_(nxt)  # feed it to the next step
    state.pos.add_(1)  # advance, on the device
    return logits


# ---------------------------------------------------------------------------- the split step

def decode_core(x: torch.Tensor, write: torch.Tensor, unreached: torch.Tensor, caches: tuple[torch.Tensor, ...],
                w: Weights) -> torch.Tensor:
    """The layers of a step with no indexed operation: the cache write is a full-buffer `where`.

    x [B, 1, E] embedded input; write [max_len] bool (the slot to write); unreached [max_len] bool;
    caches: per layer [2, B, H, max_len, dh]. Compilers that cannot lower indexed loads and stores
    can still compile this part.
    """
    sel = write.view(1, 1, 1, -1, 1)
    for i, lw in enumerate(w.layers):
        qkv = _qkv_stacked(x, lw, w.n_head, w.eps)
        cache = caches[i]
        cache.copy_(torch.where(sel, qkv[1:], cache))
        x = x + _proj(_attend(qkv[0], cache[0], cache[1], unreached), lw)
        x = x + _mlp(x, lw, w.eps)
    return _logits(x, w)[:, 0]


def decode_step_split(state: DecodeState, w: Weights,
                      core: Callable[..., torch.Tensor] = decode_core) -> torch.Tensor:
    """The fixed-shape step with the indexed bookkeeping eager and the layers in `core`."""
    pos = state.pos
    x = F.embedding(state.tok, w.wte) + w.wpe.index_select(0, pos)
    logits = core(x, state.slots == pos, state.slots > pos, state.caches, w)
    nxt = logits.argmax(-1, keepdim=True)
    state.out.index_copy_(1, pos + 1, nxt)
    state.tok.copy_(nxt)
    state.pos.add_(1)
    return logits


# ---------------------------------------------------------------------------- the growing-cache step

Past = list[tuple[torch.Tensor, torch.Tensor]]


def growing_step(tok: torch.Tensor, pos: int, past: Past, w: Weights) -> tuple[torch.Tensor, Past]:
    """A step whose cache grows by concatenation and whose position is a Python int.

    Its shapes change every call (the cache gets one slot longer) and `pos` is a constant to Dynamo,
    so every call fails a guard: the form of step a graph cannot serve.
    """
    x = F.embedding(tok, w.wte) + w.wpe[pos]
    new_past: Past = []
    for i, lw in enumerate(w.layers):
        q, k, v = _qkv(x, lw, w.n_head, w.eps)
        k = torch.cat([past[i][0], k], dim=2)
        v = torch.cat([past[i][1], v], dim=2)
        new_past.append((k, v))
        x = x + _proj(_attend(q, k, v, None), lw)  # the cache holds exactly the reached slots
        x = x + _mlp(x, lw, w.eps)
    return _logits(x, w)[:, 0], new_past


@torch.no_grad()
def growing_prefill(w: Weights, prompt: torch.Tensor) -> tuple[torch.Tensor, Past]:
    B, T = prompt.shape
    positions = torch.arange(T, device=prompt.device)
    x = F.embedding(prompt, w.wte) + w.wpe[positions]
    causal = positions[None, :] > positions[:, None]
    past: Past = []
    for lw in w.layers:
        q, k, v = _qkv(x, lw, w.n_head, w.eps)
        past.append((k, v))
        x = x + _proj(_attend(q, k, v, causal), lw)
        x = x + _mlp(x, lw, w.eps)
    return _logits(x[:, -1:], w)[:, 0], past


# ---------------------------------------------------------------------------- whole decodes

def check_prompts(prompts: list[list[int]], vocab: int) -> torch.Tensor:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    lengths = {len(p) for p in prompts}
    if len(lengths) != 1:
        raise ValueError(f"prompts in one batch must have equal lengths (got {sorted(lengths)})")
    bad = [t for p in prompts for t in p if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token ids out of range [0, {vocab}): {bad[:5]}")
    return torch.tensor(prompts, dtype=torch.long)


@torch.no_grad()
def generate_fixed(w: Weights, prompt: torch.Tensor, new_tokens: int, max_len: int | None = None,
                   step: Callable[[DecodeState, Weights], Any] = decode_step) -> torch.Tensor:
    """Greedy decoding with the fixed-shape step: [B, new_tokens]."""
    T = prompt.shape[1]
    state = prefilled(w, prompt.to(w.device), max_len or T + new_tokens + 1)
    for _ in range(new_tokens - 1):
        step(state, w)
    return state.out[:, T:T + new_tokens].cpu()


@torch.no_grad()
def generate_growing(w: Weights, prompt: torch.Tensor, new_tokens: int,
                     step: Callable[..., tuple[torch.Tensor, Past]] = growing_step) -> torch.Tensor:
    prompt = prompt.to(w.device)
    logits, past = growing_prefill(w, prompt)
    tok = logits.argmax(-1, keepdim=True)
    out = [tok]
    pos = prompt.shape[1]
    for _ in range(new_tokens - 1):
        logits, past = step(tok, pos, past, w)
        tok = logits.argmax(-1, keepdim=True)
        out.append(tok)
        pos += 1
    return torch.cat(out, dim=1).cpu()


@torch.no_grad()
def generate_reference(model: Any, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """transformers' own greedy `generate`."""
    device = next(model.parameters()).device
    ids = prompt.to(device)
    # No stopping at end-of-text: the lab's steps never stop either, and suppressing the token
    # (min_new_tokens) would change the argmax instead.
    saved = model.config.eos_token_id, model.generation_config.eos_token_id
    model.config.eos_token_id = model.generation_config.eos_token_id = None
    try:
        out: torch.Tensor = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             do_sample=False, num_beams=1, pad_token_id=0)
    finally:
        model.config.eos_token_id, model.generation_config.eos_token_id = saved
    return out[:, prompt.shape[1]:].cpu()
