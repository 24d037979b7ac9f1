"""Does the fused step do what the eager step does? Side-by-side runs for the tests and the lab.

    python -m lab.step.fused.check --model tiny --batch 1 3 --steps 4            # CPU: set TRITON_INTERPRET=1
    python -m lab.step.fused.check --device cuda --model gpt2 --batch 1 8 16 64 --graph

`free_running`: eager `decode_step` and the fused step from the same prefill, each feeding itself;
per step it compares the tokens, the logits, every state buffer (cache, out, tok, pos) and, with
`graph=True`, a captured-and-replayed fused step against the direct one (same kernels, same
launches, no atomics: the replay must give bit-identical logits). `teacher_forced`: a low-precision
step (fused and eager) fed the tokens of the fp32 eager reference, its logits and argmax compared
with the reference's at every step (free-running bf16 sequences diverge after the first near-tie,
which measures the tie, not the error).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

import torch

from lab.step import decode as D
from lab.step.model import Weights
from lab.contract.profiles import ModelSpec

StepFn = Callable[[D.DecodeState, Any], torch.Tensor]


def prompt_for(batch: int, length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=g)


def _rel(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(max |a - b|, max |b|) in fp32."""
    return float((a.float() - b.float()).abs().max()), float(b.float().abs().max())


def free_running(w: Weights, batch: int, steps: int, prompt_len: int = 8, max_len: int | None = None,
                 pdl: bool = False, graph: bool = False, sms: int | None = None,
                 overrides: dict[str, Any] | None = None, seed: int = 0, prefetch: bool = False,
                 path: str | None = None, persistent: dict[str, Any] | None = None,
                 fold: bool | None = None, switches: dict[str, dict[str, int]] | None = None,
                 argmax_fold: bool | None = None) -> dict[str, Any]:
    """Eager vs fused (vs fused replayed from a CUDA graph), `steps` steps after one prefill (`path`: the
    projection path, None for the rule's; `persistent`: the persistent plan, lab.step.fused.persistent.prepare's
    keyword arguments, e.g. {"programs": 132}; `fold`: attention folded into ln_qkv, lab.step.fused.step.prepare's,
    None for its default: folded with PDL, as the lab's methods run; `switches`: compile-time switches bound on the
    plan's launches by kernel, lab.step.fused.step.with_switches, e.g. {"ln_qkv": {"KV_L2": 1}}; `argmax_fold`: the
    argmax taken by lm_head's last program, step.prepare's, None for its table)."""
    from lab.step.fused import persistent as PS
    from lab.step.fused.step import prepare, with_switches

    max_len = max_len or prompt_len + steps + 8  # room for a graph's warm-up steps
    prompt = prompt_for(batch, prompt_len, int(w.wte.shape[0]), seed).to(w.device)
    ref, fused = D.new_state(w, batch, max_len), D.new_state(w, batch, max_len)
    plan = (PS.prepare(fused, w, sms=sms, **{"overrides": overrides, **persistent}) if persistent is not None
            else prepare(fused, w, pdl=pdl, sms=sms, overrides=overrides, prefetch=prefetch, path=path, fold=fold,
                         argmax_fold=argmax_fold))
    plan = with_switches(plan, switches) if switches else plan
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        D.prefill(ref, w, prompt)
        D.prefill(fused, w, prompt)
        for _ in range(steps):
            lr = D.decode_step(ref, w).clone()
            lf = plan().clone()
            dl, scale = _rel(lf, lr)
            dc, cscale = max((_rel(cf, cr) for cf, cr in zip(fused.caches, ref.caches)), key=lambda t: t[0])
            rows.append({"tokens_equal": bool(torch.equal(fused.tok, ref.tok)),
                         "out_equal": bool(torch.equal(fused.out, ref.out)),
                         "pos_equal": bool(torch.equal(fused.pos, ref.pos)),
                         "logit_diff": dl, "logit_scale": scale, "cache_diff": dc, "cache_scale": cscale,
                         "argmax_of_own_logits": bool(torch.equal(fused.tok[:, 0], lf.argmax(-1)))})
        direct = {"out": fused.out.clone(), "logits": lf}
        # a folding plan's heads' counters (and its words, OLDER_FIRST=2's) back at zero after the steps, as the next
        # launch must find them
        heads_zero = all(t is None or bool((t == 0).all()) for t in (plan.workspace.heads, plan.workspace.mail))
    result: dict[str, Any] = {"batch": batch, "steps": steps, "dtype": str(w.dtype).removeprefix("torch."),
                              "path": str(plan.path), "card": plan.card, "prefetch": plan.prefetch, "fold": plan.fold,
                              "ln_fold": plan.ln_fold, "argmax_fold": plan.argmax_fold,
                              "head_major": _bound(plan, "HEAD_MAJOR"),
                              "evict": _bound(plan, "EVICT"), "kv_l2": _bound(plan, "KV_L2"),
                              "kv_at_once": _bound(plan, "KV_AT_ONCE"), "pos_at_once": _bound(plan, "POS_AT_ONCE"),
                              "res_at_once": _bound(plan, "RES_AT_ONCE"), "sum_once": _bound(plan, "SUM_ONCE"),
                              "pieces": _bound(plan, "PIECES"), "older_first": _bound(plan, "OLDER_FIRST"),
                              "heads_zero": heads_zero, "n_layer": w.n_layer,
                              "configs": {k: v.__dict__ for k, v in plan.configs.items()},
                              "kernels_per_step": len(plan.launches), "per_step": rows}
    if graph:
        result["graph"] = _graph_replay(w, plan, fused, prompt, steps, direct)
    return result


def _bound(plan: Any, switch: str) -> bool:
    """Whether any of the plan's launches binds `switch` on: HEAD_MAJOR (the folded ln_qkv head by head,
    configs.head_major), EVICT (the weight loads marked to leave L2 first, configs.evict_first), KV_L2 (the folded
    ln_qkv's heads' K and V asked into L2 before its wait, configs.kv_l2), KV_AT_ONCE (the folded attention's K and V
    asked for in one round trip, attention._fold_attention), POS_AT_ONCE (ln_qkv's position asked for with its row,
    projections._ln_qkv), RES_AT_ONCE (proj's and fc2's residual asked for with their input, projections._res_at_once),
    SUM_ONCE (lm_head's products summed over K once, projections._ln_gemv), PIECES (ln_qkv's and ln_fc's rows held as
    tiles of powers of two, projections._piece), OLDER_FIRST (the folded attention over the older slots taken by a
    head's last q program, attention._fold_attention)."""
    return any(bool(getattr(x, "meta", {}).get(switch)) for x in plan.launches)


def _graph_replay(w: Weights, plan: Any, state: D.DecodeState, prompt: torch.Tensor, steps: int,
                  direct: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Capture the fused step (lab.step.graphs.GraphedStep: warm-up, capture, state restored) and replay it."""
    from lab.step.graphs import GraphedStep

    graphed = GraphedStep(lambda s, _w: plan(), state, w)
    with torch.no_grad():
        D.prefill(state, w, prompt)
        graphed.sync_position()
        for _ in range(steps):
            logits = graphed.replay()
        torch.cuda.synchronize()
    return {"out_equal_direct": bool(torch.equal(state.out, direct["out"])),
            "logits_identical_direct": bool(torch.equal(logits, direct["logits"])),
            "capture_s": graphed.capture_s}


def teacher_forced(w_ref: Weights, w_low: Weights, batch: int, steps: int, prompt_len: int = 8,
                   sms: int | None = None, seed: int = 0, prefetch: bool = False,
                   path: str | None = None, overrides: dict[str, Any] | None = None,
                   persistent: dict[str, Any] | None = None, fold: bool | None = None,
                   pdl: bool = False, switches: dict[str, dict[str, int]] | None = None,
                   residual: torch.dtype | None = None, argmax_fold: bool | None = None) -> dict[str, Any]:
    """Fused and eager steps on `w_low` (e.g. bf16), both fed the fp32 eager reference's tokens (`persistent`: the
    persistent plan, `pdl`, `fold`, `switches` and `argmax_fold`, as in `free_running`; `residual`: the fused step's
    residual dtype, step.prepare's)."""
    from lab.step.fused import persistent as PS
    from lab.step.fused.step import prepare, with_switches

    max_len = prompt_len + steps + 2
    prompt = prompt_for(batch, prompt_len, int(w_ref.wte.shape[0]), seed).to(w_ref.device)
    ref, fused, eager = (D.new_state(x, batch, max_len) for x in (w_ref, w_low, w_low))
    plan = (PS.prepare(fused, w_low, sms=sms, **{"overrides": overrides, **persistent}) if persistent is not None
            else prepare(fused, w_low, sms=sms, prefetch=prefetch, path=path, overrides=overrides, fold=fold, pdl=pdl,
                         residual=residual, argmax_fold=argmax_fold))
    plan = with_switches(plan, switches) if switches else plan
    out: dict[str, list[Any]] = {"fused_err": [], "eager_err": [], "fused_vs_eager": [], "scale": [],
                                 "fused_agree": [], "eager_agree": [], "bookkeeping_ok": []}
    with torch.no_grad():
        D.prefill(ref, w_ref, prompt)
        D.prefill(fused, w_low, prompt)
        D.prefill(eager, w_low, prompt)
        for _ in range(steps):
            for s in (fused, eager):  # force the reference's input token (and its out row and position)
                s.tok.copy_(ref.tok)
                s.out.copy_(ref.out)
                s.pos.copy_(ref.pos)
            pos = int(ref.pos.item())
            lr = D.decode_step(ref, w_ref).clone()
            lf = plan().clone()
            le = D.decode_step(eager, w_low).clone()
            err_f, scale = _rel(lf, lr)
            out["fused_err"].append(err_f)
            out["eager_err"].append(_rel(le, lr)[0])
            out["fused_vs_eager"].append(_rel(lf, le)[0])
            out["scale"].append(scale)
            out["fused_agree"].append(float((lf.float().argmax(-1) == lr.argmax(-1)).float().mean()))
            out["eager_agree"].append(float((le.float().argmax(-1) == lr.argmax(-1)).float().mean()))
            own = lf.argmax(-1)
            out["bookkeeping_ok"].append(bool(torch.equal(fused.tok[:, 0], own)) and int(fused.pos.item()) == pos + 1
                                         and bool(torch.equal(fused.out[:, pos + 1], own)))
    return {"batch": batch, "steps": steps, "dtype": str(w_low.dtype).removeprefix("torch."),
            "path": str(plan.path), "fold": plan.fold, "ln_fold": plan.ln_fold, "sum_once": _bound(plan, "SUM_ONCE"),
            "pieces": _bound(plan, "PIECES"), "older_first": _bound(plan, "OLDER_FIRST"),
            "residual": plan.residual, "argmax_fold": plan.argmax_fold, "n_layer": w_low.n_layer,
            "kernels_per_step": len(plan.launches),
            **out}


def same_as_five(w: Weights, batch: int, steps: int, persistent: dict[str, Any], prompt_len: int = 8,
                 sms: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """The persistent plan (lab.step.fused.persistent, `persistent` its keyword arguments) against the five-kernel
    plan on the GEMV path from the same prefill, step by step: the largest logit difference and logit, whether the
    tokens, `out` and `pos` are equal and whether the logits are bit-identical. (They are in Triton's interpreter; on
    a GPU the layer kernel compiles each phase at its own warps, so the reductions may round differently.)"""
    from lab.step.fused import persistent as PS
    from lab.step.fused.step import prepare

    prompt = prompt_for(batch, prompt_len, int(w.wte.shape[0]), seed).to(w.device)
    five, mine = (D.new_state(w, batch, prompt_len + steps + 2) for _ in range(2))
    out = []
    with torch.no_grad():
        D.prefill(five, w, prompt)
        D.prefill(mine, w, prompt)
        a, b = prepare(five, w, sms=sms, path="gemv"), PS.prepare(mine, w, sms=sms, **persistent)
        for _ in range(steps):
            la, lb = a().clone(), b().clone()
            diff, scale = _rel(lb, la)
            out.append({"logit_diff": diff, "logit_scale": scale, "identical": bool(torch.equal(la, lb)),
                        "tokens_equal": all(torch.equal(getattr(five, k), getattr(mine, k)) for k in ("tok", "out",
                                                                                                      "pos"))})
    return out


# Every size a non-power of two (E 48, dh 12, 4E 192, V 500): every masked lane of the kernels is exercised.
ODD = ModelSpec("gpt2-odd", n_layer=2, n_embd=48, n_head=4, vocab_size=500, n_positions=64, init_std=0.3)
# rows of odd length (45: three heads of 15) beside the MLP's even ones (180): a bf16 slice read as packed pairs only
# where its row has an even length (lab.step.fused.projections._load_w_raw)
ODD_K = ModelSpec("gpt2-odd-k", n_layer=1, n_embd=45, n_head=3, vocab_size=101, n_positions=32, init_std=0.3)
# rows of 52 = 32 + 16 + 4 (26 pairs in bf16: 16 + 8 + 2): the PREFETCH kernels' PIECES in three, the third small
# enough to be held flat (lab.step.fused.projections._flat) at the tiles that fold two heads of 26
PIECES3 = ModelSpec("gpt2-pieces", n_layer=1, n_embd=52, n_head=2, vocab_size=101, n_positions=32, init_std=0.3)


def weights_for(model: str, device: str = "cpu", dtype: torch.dtype = torch.float32) -> Weights:
    """Random weights of the smoke model ("tiny"), the odd-shaped ones ("odd", "odd-k", "pieces") or GPT-2 124M
    ("gpt2")."""
    from lab.step import model as M
    from lab.contract.profiles import GPT2, TINY

    spec = {"tiny": TINY, "odd": ODD, "odd-k": ODD_K, "pieces": PIECES3, "gpt2": GPT2}[model]
    m = M.build_model(spec, M.resolve_weights(spec, "random"))
    return M.extract_weights(m, dtype=dtype, device=device)


def parse_configs(text: str | None) -> dict[str, Any]:
    """'{"attention": {"BS": 8}, "fc2": {"BB": 1, "BN": 4, "BK": 64}}' -> config objects."""
    from lab.step.fused import configs as C

    if not text:
        return {}
    kinds = {"attention": C.AttentionConfig, "argmax": C.ArgmaxConfig,
             **{name: C.RowConfig for name in C.LIBRARY_KERNELS if name not in ("attention", "argmax")}}
    names = tuple(dict.fromkeys(C.KERNEL_NAMES + C.LIBRARY_KERNELS))
    try:
        raw = json.loads(text)
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise ValueError(f"unknown kernel {unknown[0]!r} (one of {', '.join(names)})")
        return {name: kinds.get(name, C.GemvConfig)(**fields) for name, fields in raw.items()}
    except (json.JSONDecodeError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a JSON object of kernel configs ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.step.fused.check", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--model", default="tiny", choices=("tiny", "odd", "gpt2"))
    p.add_argument("--batch", type=int, nargs="+", default=[1])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--sms", type=int, default=None, help="pretend this many SMs (smaller grids in the interpreter)")
    p.add_argument("--graph", action="store_true", help="also capture and replay the fused step (CUDA)")
    p.add_argument("--pdl", action="store_true", help="programmatic dependent launch (Hopper+)")
    p.add_argument("--prefetch", action="store_true", help="the PREFETCH kernels (every weight read before the "
                   "PDL wait) with one-chunk configs")
    p.add_argument("--path", default=None, choices=("gemv", "gemm"),
                   help="force a projection path (default: the rule's, lab.step.fused.rule)")
    p.add_argument("--bf16", action="store_true", help="also the teacher-forced bf16 check")
    p.add_argument("--configs", default=None, help='JSON overrides, e.g. \'{"attention": {"BS": 8}}\'')
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device visible", file=sys.stderr)
        return 2
    if args.graph and args.device != "cuda":
        print("--graph needs --device cuda", file=sys.stderr)
        return 2
    try:
        overrides = parse_configs(args.configs)
    except ValueError as exc:
        print(f"--configs: {exc}", file=sys.stderr)
        return 2
    w = weights_for(args.model, args.device, torch.float32)
    report: dict[str, Any] = {"free_running": [free_running(w, b, args.steps, pdl=args.pdl, graph=args.graph,
                                                            sms=args.sms, overrides=overrides, prefetch=args.prefetch,
                                                            path=args.path)
                                               for b in args.batch]}
    if args.bf16:
        low = weights_for(args.model, args.device, torch.bfloat16)
        report["teacher_forced"] = [teacher_forced(w, low, b, args.steps, sms=args.sms, prefetch=args.prefetch,
                                                   path=args.path)
                                    for b in args.batch]
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
