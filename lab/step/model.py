"""GPT-2 from transformers, and where its weights came from.

No network, ever: the model is built from `transformers.GPT2Config` with seeded random weights,
unless a local checkpoint is given (`--weights DIR`) or, for the 124M shape, found in the local
Hugging Face cache. The provenance says which, and goes into the manifest.

Random weights use a larger init std than GPT-2's 0.02 (see `ModelSpec.init_std`): at the default,
tied embeddings make greedy decoding repeat one token, and an equality test on `8, 8, 8, ...`
proves nothing.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lab.contract.profiles import ModelSpec

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never touch the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HUB_NAMES = ("openai-community/gpt2", "gpt2")


@dataclass(frozen=True)
class LayerWeights:
    ln1_w: torch.Tensor
    ln1_b: torch.Tensor
    attn_w: torch.Tensor  # [3E, E]: nn.Linear's [out, in] layout (F.linear(x, W, b))
    attn_b: torch.Tensor
    proj_w: torch.Tensor  # [E, E]
    proj_b: torch.Tensor
    ln2_w: torch.Tensor
    ln2_b: torch.Tensor
    fc_w: torch.Tensor  # [4E, E]
    fc_b: torch.Tensor
    fc2_w: torch.Tensor  # [E, 4E]
    fc2_b: torch.Tensor


@dataclass(frozen=True)
class Weights:
    """The tensors of a GPT-2 in the form the lab's steps use; lm_head is tied to wte."""

    wte: torch.Tensor  # [V, E]
    wpe: torch.Tensor  # [P, E]
    layers: tuple[LayerWeights, ...]
    ln_f_w: torch.Tensor
    ln_f_b: torch.Tensor
    n_head: int
    eps: float

    @property
    def n_layer(self) -> int:
        return len(self.layers)

    @property
    def n_embd(self) -> int:
        return int(self.wte.shape[1])

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def dtype(self) -> torch.dtype:
        return self.wte.dtype

    @property
    def device(self) -> torch.device:
        return self.wte.device

    def tensors(self) -> list[torch.Tensor]:
        out = [self.wte, self.wpe, self.ln_f_w, self.ln_f_b]
        for layer in self.layers:
            out.extend(layer.__dict__.values())
        return out

    def nbytes(self) -> int:
        """Bytes of weights a decode step reads (each tensor once; wte serves embedding and lm_head)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def truncated(self, n_layer: int) -> "Weights":
        """The first n_layer layers (compile time against depth)."""
        return Weights(self.wte, self.wpe, self.layers[:n_layer], self.ln_f_w, self.ln_f_b, self.n_head, self.eps)


def find_cached_checkpoint() -> Path | None:
    """A GPT-2 checkpoint already in the local Hugging Face cache, if there is one (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for name in HUB_NAMES:
        found = try_to_load_from_cache(name, "config.json")
        if isinstance(found, str):
            folder = Path(found).parent
            if any((folder / f).exists() for f in ("model.safetensors", "pytorch_model.bin")):
                return folder
    return None


def _digest_files(folder: Path) -> str:
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin"):
        path = folder / name
        if path.exists():
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def _check_config(path: Path, weights: str) -> None:
    """A checkpoint's config.json must be a JSON object: one line naming it otherwise (not a traceback later)."""
    import json

    try:
        config = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"--weights {weights}: {path} is not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"--weights {weights}: {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"--weights {weights}: cannot read {path} ({type(exc).__name__})") from None
    if not isinstance(config, dict):
        raise ValueError(f"--weights {weights}: {path} is not a JSON object (a checkpoint's config)")


def resolve_weights(spec: ModelSpec, weights: str | None) -> dict[str, Any]:
    """Decide where the weights come from, without building anything: the manifest's `weights` field.

    `weights`: None (a cached checkpoint for the 124M shape, else random), "random", or a folder.
    """
    if weights and weights != "random":
        folder = Path(weights)
        if not (folder / "config.json").is_file():
            raise ValueError(f"--weights {weights}: no config.json in that folder (expected a local GPT-2 checkpoint)")
        _check_config(folder / "config.json", weights)
        return {"source": "local", "path": str(folder.resolve()), "sha256": _digest_files(folder), "model": spec.name}
    if weights is None and spec.name == "gpt2-124M":
        cached = find_cached_checkpoint()
        if cached is not None:
            return {"source": "hf-cache", "path": str(cached), "sha256": _digest_files(cached), "model": spec.name}
    return {"source": "random", "seed": spec.seed, "init_std": spec.init_std, "model": spec.name,
            "config": {k: v for k, v in spec.__dict__.items() if k not in ("name",)},
            "generator": "torch.manual_seed(seed), then transformers' initialisation on the run's device (lab.step.model."
                         "build_model): the values differ between devices, the shapes and their statistics do not",
            "note": "random weights: timings and token equality do not depend on the weights' values"}


def gpt2_config(spec: ModelSpec) -> Any:
    from transformers import GPT2Config

    return GPT2Config(n_layer=spec.n_layer, n_embd=spec.n_embd, n_head=spec.n_head, vocab_size=spec.vocab_size,
                      n_positions=spec.n_positions, initializer_range=spec.init_std,
                      # dropout is off in eval anyway; eager attention keeps the reference's arithmetic plain
                      attn_implementation="eager")


def build_model(spec: ModelSpec, provenance: dict[str, Any], device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32) -> Any:
    """The transformers GPT2LMHeadModel (eval mode) for this spec and provenance."""
    import transformers
    from transformers import GPT2LMHeadModel

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # loading a checkpoint draws a bar on stderr otherwise
    if provenance["source"] in ("local", "hf-cache"):
        model = GPT2LMHeadModel.from_pretrained(provenance["path"], local_files_only=True, attn_implementation="eager")
    else:
        # Generated where the run computes, by that device's generator: on an H200 host transformers' initialisation
        # of GPT-2 124M took 12.4 s on the CPU and 0.04 s on the GPU, paid by every process that builds the model
        # (the two sentinels' children, the run itself). Every process of a run builds it the same way, so all of
        # them hold the same values (the provenance's `generator` says so).
        torch.manual_seed(spec.seed)
        with torch.device(device):
            model = GPT2LMHeadModel(gpt2_config(spec))
    return model.to(device=device, dtype=dtype).eval()


def extract_weights(model: Any, dtype: torch.dtype | None = None, device: str | torch.device | None = None) -> Weights:
    """The lab's view of a transformers GPT-2: detached tensors, optionally converted.

    transformers keeps GPT-2's projections in Conv1D's [in, out] layout (x @ W + b). The lab stores
    them transposed, [out, in] as nn.Linear does: for a single token the product is a matrix-vector
    product, and on an H200 in fp32 cuBLAS ran the [out, in] form near the copy bandwidth and the
    [in, out] form at about half of it.
    """

    def t(x: torch.Tensor, transpose: bool = False) -> torch.Tensor:
        x = x.detach()
        if transpose:
            x = x.t()
        if dtype is not None or device is not None:
            x = x.to(device=device or x.device, dtype=dtype or x.dtype)
        return x.contiguous()

    tr = model.transformer
    layers = tuple(
        LayerWeights(
            ln1_w=t(b.ln_1.weight), ln1_b=t(b.ln_1.bias),
            attn_w=t(b.attn.c_attn.weight, True), attn_b=t(b.attn.c_attn.bias),
            proj_w=t(b.attn.c_proj.weight, True), proj_b=t(b.attn.c_proj.bias),
            ln2_w=t(b.ln_2.weight), ln2_b=t(b.ln_2.bias),
            fc_w=t(b.mlp.c_fc.weight, True), fc_b=t(b.mlp.c_fc.bias),
            fc2_w=t(b.mlp.c_proj.weight, True), fc2_b=t(b.mlp.c_proj.bias),
        )
        for b in tr.h
    )
    return Weights(wte=t(tr.wte.weight), wpe=t(tr.wpe.weight), layers=layers, ln_f_w=t(tr.ln_f.weight),
                   ln_f_b=t(tr.ln_f.bias), n_head=model.config.n_head, eps=float(model.config.layer_norm_epsilon))


def torch_dtype(name: str) -> torch.dtype:
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (float32, bfloat16, float16)") from None
