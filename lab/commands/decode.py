"""`python -m lab decode --method {reference,growing,fixed} --prompt 464,3290,318 [--prompt ...] --steps N`."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("decode", help="greedy-decode prompts and print the generated token ids")
    p.add_argument("--profile", default="cpu", help="profile whose model to use (smoke, cpu, gpu)")
    p.add_argument("--method", choices=("reference", "growing", "fixed"), default="fixed")
    p.add_argument("--prompt", action="append", required=True,
                   help="comma-separated token ids; repeat for a batch (equal lengths)")
    p.add_argument("--steps", type=int, default=20, help="tokens to generate")
    p.add_argument("--weights", help="local GPT-2 checkpoint folder, or 'random'")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def parse_prompt(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--prompt {text!r}: expected comma-separated integers") from None


def main(args: argparse.Namespace) -> int:
    from lab import decode, profiles
    from lab.model import build_model, extract_weights, resolve_weights

    profile = profiles.get(args.profile)
    if args.steps < 1:
        raise ValueError(f"--steps {args.steps}: must be at least 1")
    prompt = decode.check_prompts([parse_prompt(p) for p in args.prompt], profile.model.vocab_size)
    if prompt.shape[1] + args.steps > profile.model.n_positions:
        raise ValueError(f"--steps {args.steps}: prompt + steps exceed the model's {profile.model.n_positions} positions")
    provenance = resolve_weights(profile.model, args.weights)
    device = profile.device
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        device = "cpu"
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
