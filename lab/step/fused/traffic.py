"""What each launch of the fused step moves, in bytes per call: weights, KV cache read and written, activations.

Declared once, here, for both projection paths (lab.step.fused.rule) and in launch order (`calls` lists one
step's launches as `lab.step.fused.step.prepare` binds them), as a function of the model shape, the batch,
the weights' element size and the step's position; no Triton, no torch, no device.

Per call, four separate terms:
- `weights`: the weight bytes the call reads (matrix, bias, layer-norm parameters; the first launch also
  gathers the embedding: B rows of wte and the one row of wpe at the position, shared by every sequence);
- `kv_read`, `kv_write`: the K and V cache bytes. Attention at position p reads the p + 1 reached slots (the
  slots past p are masked in the load and cost no traffic), except the prefetch variant's EARLY attention,
  which reads every slot of the cache (max_len), and the folded attention (`Layout.fold`: in ln_qkv's last program
  of each head), which reads the reached slots; on the gemm path the slot p comes from the QKV GEMM's
  output (an activation), so attention reads p slots of the cache and writes slot p;
- `act_in`, `act_out`: every other read and write, each tensor once: the fp32 residual stream, q and h of the
  gemv path, the attention partials, the gemm path's GEMM inputs and outputs (in the weights' dtype), the
  logits, the per-block argmax candidates (8 B each), tokens (int64). The 8-byte position each kernel reads
  is not counted, nor a row that several programs of one launch re-read from L2.

On the gemm path the bytes of a library call depend on its form (lab.step.fused.layout, `Layout.forms`): a
plain-GEMM form with a bias copies the bias rows into the output first (B x N written) and the GEMM reads
them back (beta 1: B x N read); lm_head through cuBLASLt's epilogue reads a zero bias (N, as an activation:
it is no model weight). W or its transposed copy: the same bytes.

So over a step: sum(weights) is every weight tensor once, less wpe but its one row, plus the B wte rows the
embedding gathers (the lm_head reads wte whole again); sum(kv_read) at position p is ceilings.step_bytes's
cache term at p + 1 slots (tests/test_traffic.py checks both against lab.step.ceilings.step_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.step.fused import layout as LY

FP32 = 4  # the residual stream, q, h and the attention partials are fp32 on both paths
INDEX = 8  # tokens are int64; an argmax candidate is an fp32 value + an int32 index

# The Triton function each launch runs (its name in a profile); the gemm path's library calls have none.
FUNCTIONS = {"ln_qkv": "ln_qkv_kernel", "attention": "attention_kernel", "proj": "proj_residual_kernel",
             "ln_fc": "ln_fc_gelu_kernel", "fc2": "fc2_residual_kernel", "lm_head": "lm_head_kernel",
             "argmax": "argmax_advance_kernel", "add_ln": "add_ln_kernel", "combine": "combine_kernel",
             "gelu": "gelu_kernel", "block_argmax": "block_argmax_kernel"}
LIBRARY = ("qkv_gemm", "proj_gemm", "fc_gemm", "fc2_gemm", "lm_head_gemm")  # torch.addmm / torch.mm calls
# The launches of every layer, per path: what the latency fit is over (lab.step.fused.breakdown)
LAYER_KERNELS = {"gemv": ("ln_qkv", "attention", "proj", "ln_fc", "fc2"),
                 "gemm": ("add_ln", "qkv_gemm", "attention", "combine", "proj_gemm", "fc_gemm", "gelu", "fc2_gemm")}


@dataclass(frozen=True)
class Shape:
    """The model and state a step runs on: what its bytes depend on."""

    n_layer: int
    n_embd: int
    n_head: int
    vocab: int
    batch: int
    elem: int  # bytes per weight (and cache) element: 4 fp32, 2 bf16/fp16
    max_len: int

    @classmethod
    def of(cls, w: Any, batch: int, max_len: int) -> Shape:
        """From a lab.step.model.Weights (duck-typed: no torch needed here)."""
        return cls(w.n_layer, w.n_embd, w.n_head, int(w.wte.shape[0]), batch, w.wte.element_size(), max_len)


@dataclass(frozen=True)
class Layout:
    """What the plan chose that changes the bytes: the path, the attention splits, the lm_head's blocks."""

    path: str  # gemv, gemv-prefetch or gemm (lab.step.fused.rule.Path)
    n_splits: int  # attention splits (partials per batch row and head)
    lm_blocks: int  # argmax candidates per batch row
    early_attention: bool = False  # the prefetch variant's attention reads every slot of its split
    fold: bool = False  # ln_qkv attends (lab.step.fused.step.prepare's fold): no attention launch, proj reads att
    # the PREFETCH path's layer norms folded into ln_qkv's and ln_fc's products (lab.step.fused.configs.ln_fold)
    ln_fold: bool = False
    # lm_head's last program takes the argmax (lab.step.fused.step.prepare's argmax_fold): no argmax launch
    argmax_fold: bool = False
    # the gemm path's library calls: (launch name, form) where not the default (lab.step.fused.layout.DEFAULT)
    forms: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of_plan(cls, plan: Any) -> Layout:
        """From a lab.step.fused.step.FusedPlan: its workspace's shapes, its attention launch's switches and the
        forms its library calls were bound in."""
        ws = plan.workspace
        early = any(getattr(x, "name", "") == "attention" and bool(getattr(x, "meta", {}).get("EARLY"))
                    for x in plan.launches)
        forms = {x.name: x.form for x in plan.launches if getattr(x, "form", "")}
        return cls(str(plan.path), int(ws.part_m.shape[2]), int(ws.lm_val.shape[1]), early,
                   fold=bool(getattr(plan, "fold", False)), ln_fold=bool(getattr(plan, "ln_fold", False)),
                   argmax_fold=bool(getattr(plan, "argmax_fold", False)),
                   forms=tuple(sorted((k, v) for k, v in forms.items() if v != LY.DEFAULT[LY.BY_LAUNCH[k].name])))

    def form(self, launch: str) -> str:
        """The form of library call `launch` (its default where `forms` does not name it)."""
        return dict(self.forms).get(launch, str(LY.DEFAULT[LY.BY_LAUNCH[launch].name]))


@dataclass(frozen=True)
class Call:
    """One launch of the step and its bytes."""

    kernel: str  # the launch's name (lab.step.fused.launch: Launch.name / LibraryCall.name)
    weights: int
    kv_read: int = 0
    kv_write: int = 0
    act_in: int = 0
    act_out: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.kv_read + self.kv_write + self.act_in + self.act_out

    @property
    def function(self) -> str | None:
        """The Triton function it runs (None for a library call)."""
        return FUNCTIONS.get(self.kernel)


def calls(s: Shape, layout: Layout, position: int) -> list[Call]:
    """Every launch of one step at `position` (the slot it writes), in launch order, with its bytes."""
    if not 0 <= position < s.max_len:
        raise ValueError(f"fused traffic: position {position} outside a {s.max_len}-slot cache")
    if layout.path == "gemm":
        return _gemm(s, layout, position)
    if layout.path not in ("gemv", "gemv-prefetch"):
        raise ValueError(f"fused traffic: unknown path {layout.path!r} (gemv, gemv-prefetch, gemm)")
    return _gemv(s, layout, position)


def _terms(s: Shape, layout: Layout) -> tuple[int, int, int, int, int]:
    E, B, w = s.n_embd, s.batch, s.elem
    row, kv_row = B * E * FP32, 2 * B * E * w  # one fp32 activation row per sequence; K and V of one slot
    partials = B * s.n_head * layout.n_splits * (E // s.n_head + 2) * FP32
    embed = (B + 1) * E * w  # B rows of wte, the one wpe row at the position
    return row, kv_row, partials, embed, B * layout.lm_blocks * INDEX


def _gemv(s: Shape, layout: Layout, position: int) -> list[Call]:
    E, F, B, V, w = s.n_embd, 4 * s.n_embd, s.batch, s.vocab, s.elem
    row, kv_row, partials, embed, cands = _terms(s, layout)
    slots = s.max_len if layout.early_attention and not layout.fold else position + 1
    # a layer norm's parameters before a GEMV: its scale and shift and the GEMV's bias in the weights' dtype, or, where
    # the PREFETCH path folds it, its scale and the folded constants c1, c2 in fp32 (projections._ln_gemv_one)
    folded = layout.path == "gemv-prefetch" and layout.ln_fold

    def ln_params(n: int) -> int:
        return E * w + 2 * n * FP32 if folded else (n + 2 * E) * w

    out = []
    for i in range(s.n_layer):
        first = i == 0  # layer 0 embeds: wte/wpe rows and the tokens in, the residual out
        # folded: ln_qkv's last program of each head reads q back and K and V of the reached slots, and writes att
        attends = (slots * kv_row, row, row) if layout.fold else (0, 0, 0)
        out += [Call("ln_qkv", 3 * E * E * w + ln_params(3 * E) + (embed if first else 0), kv_read=attends[0],
                     kv_write=kv_row, act_in=(B * INDEX if first else row) + attends[1],
                     act_out=row + (row if first else 0) + attends[2])]
        if not layout.fold:
            out.append(Call("attention", 0, kv_read=slots * kv_row, act_in=row, act_out=partials))
        out += [Call("proj", (E * E + E) * w, act_in=(row if layout.fold else partials) + row, act_out=row),
                Call("ln_fc", F * E * w + ln_params(F), act_in=row, act_out=B * F * FP32),
                Call("fc2", (E * F + E) * w, act_in=B * F * FP32 + row, act_out=row)]
    if layout.argmax_fold:  # lm_head's last program reads the candidates back and writes the tokens
        return out + [Call("lm_head", (V * E + 2 * E) * w, act_in=row + cands,
                           act_out=B * V * w + cands + 2 * B * INDEX)]
    return out + [Call("lm_head", (V * E + 2 * E) * w, act_in=row, act_out=B * V * w + cands),
                  Call("argmax", 0, act_in=cands, act_out=2 * B * INDEX)]


def _gemm(s: Shape, layout: Layout, position: int) -> list[Call]:
    E, F, B, V, w = s.n_embd, 4 * s.n_embd, s.batch, s.vocab, s.elem
    row, kv_row, partials, embed, cands = _terms(s, layout)
    low = B * E * w  # a GEMM input or output row per sequence, in the weights' dtype

    def add_ln(embed_here: bool) -> Call:  # x (+ y) -> x, layer_norm(x) -> xn
        return Call("add_ln", 2 * E * w + (embed if embed_here else 0),
                    act_in=B * INDEX if embed_here else row + low, act_out=row + low)

    def gemm(launch: str, k: int, n: int) -> Call:  # out [B, n] = a [B, k] @ W.T (+ bias [n]), in its form
        has_bias = LY.BY_LAUNCH[launch].bias is not None
        form = layout.form(launch)
        copied = B * n * w if LY.copies_bias(form, has_bias) else 0  # written by the copy, read back by the GEMM
        zero = n * w if LY.zero_bias(form, has_bias) else 0
        return Call(launch, (n * k + (n if has_bias else 0)) * w, act_in=B * k * w + copied + zero,
                    act_out=B * n * w + copied)

    out = []
    for i in range(s.n_layer):
        out += [add_ln(i == 0),
                gemm("qkv_gemm", E, 3 * E),
                Call("attention", 0, kv_read=position * kv_row, kv_write=kv_row, act_in=3 * low, act_out=partials),
                Call("combine", 0, act_in=partials, act_out=low),
                gemm("proj_gemm", E, E),
                add_ln(False),
                gemm("fc_gemm", E, F),
                Call("gelu", 0, act_in=B * F * w, act_out=B * F * w),
                gemm("fc2_gemm", F, E)]
    return out + [add_ln(False),
                  gemm("lm_head_gemm", E, V),
                  Call("block_argmax", 0, act_in=B * V * w, act_out=cands),
                  Call("argmax", 0, act_in=cands, act_out=2 * B * INDEX)]


@dataclass(frozen=True)
class KernelTraffic:
    """One kernel's launches in a step: how many, and their bytes summed over the step."""

    kernel: str
    calls: int
    weights: int
    kv: int  # read + written
    activations: int  # in + out

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.activations

    @property
    def per_call(self) -> float:
        return self.total / self.calls


def per_kernel(step: list[Call]) -> list[KernelTraffic]:
    """The step's calls grouped by kernel, in order of first launch."""
    order = list(dict.fromkeys(c.kernel for c in step))
    out = []
    for name in order:
        mine = [c for c in step if c.kernel == name]
        out.append(KernelTraffic(name, len(mine), sum(c.weights for c in mine),
                                 sum(c.kv_read + c.kv_write for c in mine), sum(c.act_in + c.act_out for c in mine)))
    return out
