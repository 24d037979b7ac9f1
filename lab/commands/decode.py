"""`python -m lab decode --method {reference,growing,fixed} --prompt 464,3290,318 [--prompt ...] --steps N`.

The generated token ids go to stdout (one line per prompt, or JSON with `--json`); which weights were used
(random with their seed, or the checkpoint's path), the model and the device are said on stderr.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("decode", help="greedy-decode prompts and print the generated token ids")
    p.add_argument("--profile", default="cpu",
                   help="profile whose model and device to use: smoke, cpu or gpu (default: cpu; gpu falls back "
                        "to the CPU without CUDA)")
    p.add_argument("--method", choices=("reference", "growing", "fixed"), default="fixed",
                   help="reference: transformers' greedy generate; growing: the lab's step with a cache that "
                        "grows each step; fixed: the lab's fixed-shape step over a preallocated cache, the one "
                        "that is compiled and captured (default: fixed)")
    p.add_argument("--prompt", action="append", required=True,
                   help="comma-separated token ids; repeat for a batch (equal lengths)")
    p.add_argument("--steps", type=int, default=20, help="tokens to generate (default: 20)")
    p.add_argument("--weights",
                   help="a local GPT-2 checkpoint folder, or 'random' (default: a GPT-2 124M checkpoint in the local "
                        "Hugging Face cache when the profile's model is that shape, else seeded random weights)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (method, profile, device, weights, prompts, tokens) instead of lines")
    return p


def describe_weights(provenance: dict[str, Any]) -> str:
    """Which weights, in words: random with their seed and init std, or the checkpoint's path."""
    model = provenance.get("model", "")
    if provenance.get("source") == "random":
        return (f"random ({model}, seed {provenance['seed']}, init std {provenance['init_std']}; the tokens mean "
                "nothing as text: --weights DIR uses a checkpoint)")
    where = "the Hugging Face cache's checkpoint" if provenance.get("source") == "hf-cache" else "the checkpoint"
    return f"{where} {provenance.get('path')} ({model})"


def parse_prompt(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--prompt {text!r}: expected comma-separated integers") from None


def main(args: argparse.Namespace) -> int:
    from lab.step import decode
    from lab.contract import profiles
    from lab.console import say
    from lab.step.model import build_model, extract_weights, resolve_weights

    profile = profiles.get(args.profile)
    if args.steps < 1:
        raise ValueError(f"--steps {args.steps}: must be at least 1")
    prompt = decode.check_prompts([parse_prompt(p) for p in args.prompt], profile.model.vocab_size)
    if prompt.shape[1] + args.steps > profile.model.n_positions:
        raise ValueError(f"--steps {args.steps}: prompt + steps exceed the model's {profile.model.n_positions} positions")
    provenance = resolve_weights(profile.model, args.weights)
    import torch

    device = "cpu" if profile.device == "cuda" and not torch.cuda.is_available() else profile.device
    say(f"decode: {args.method} step on {device}; weights: {describe_weights(provenance)}")
    model = build_model(profile.model, provenance, device=device)
    if args.method == "reference":
        tokens = decode.generate_reference(model, prompt, args.steps)
    else:
        w = extract_weights(model)
        gen = decode.generate_fixed if args.method == "fixed" else decode.generate_growing
        tokens = gen(w, prompt, args.steps)
    rows = tokens.tolist()
    if args.json:
        print(json.dumps({"method": args.method, "profile": profile.name, "device": device,
                          "weights": provenance["source"], "prompts": prompt.tolist(), "tokens": rows}))
    else:
        for row in rows:
            print(" ".join(str(t) for t in row))
    return 0
