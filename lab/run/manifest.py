"""The environment manifest: everything a timing or a compiled artefact is meaningless without.

It is a superset of `torch.utils.collect_env` (kept verbatim under `collect_env`) plus: Triton,
the C++ toolchain Inductor would use, nvidia-smi's GPU fields, CPU model and cores, Dynamo and
Inductor settings in effect (the recompile limit under the installed version's own name), the
Inductor cache directory, the lab's git commit (or its source stamp, lab.run.stamp), container or host,
a digest of the installed packages, and the weights' provenance. The host's own facts come from `lab.host.hostinfo`; the shape
of the whole is the `Manifest` model of `lab.contract.schema`, checked here before the manifest is used.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lab import __version__
from lab.host.cache_dir import inductor_cache_dir
from lab.host.compile_cache import manifest_field
from lab.host.hostinfo import (cache_state, cpu_mhz, container_info, cpu_info, host_info, load_average, nvidia_smi, packages_digest,
                          python_info, run_text, version_of)
from lab.contract.manifest_schema import MANIFEST_VERSION, check_manifest
from lab.run import stamp
from lab.host import cpuplace
from lab.host.scheduler import scheduler_info
from lab.host.toolchain import Toolchain, probe

__all__ = ["MANIFEST_VERSION", "REPO_ROOT", "collect", "container_info", "finish", "now_iso"]

LABEL_ENV = "LAB_LABEL"  # the user's label for the run (`lab run --label NAME` sets it)

REPO_ROOT = Path(__file__).resolve().parents[2]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def source_digest() -> str:
    """sha256 over the lab's own source files (lab/ and report/): provenance even where there is no .git."""
    h = hashlib.sha256()
    for folder in ("lab", "report"):
        for path in sorted((REPO_ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".html", ".css"):
                h.update(str(path.relative_to(REPO_ROOT)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def git_info() -> dict[str, Any]:
    """The lab's commit: git's where it says the tree is clean; else a source stamp whose digest is these sources'
    (lab.run.stamp: a copy with a stale .git, or none); else what git says, or LAB_COMMIT baked into an image or
    exported by whoever copied the tree. `stamp`: the stamp found, and whether it matched (absent: none)."""
    commit = run_text(["git", "rev-parse", "HEAD"], REPO_ROOT)
    digest = source_digest()
    if commit is None:
        env = os.environ.get("LAB_COMMIT")
        info: dict[str, Any] = {"commit": env, "dirty": None, "source": "LAB_COMMIT" if env else None, "source_sha256": digest}
    else:
        why = stamp.unclean(REPO_ROOT)  # untracked sources of lab/ and report/ count: they are imported
        info = {"commit": commit, "dirty": None if why is None else bool(why), "source": "git",
                "source_sha256": digest}
    found = stamp.field(REPO_ROOT, digest)
    if found is None:
        return info
    if found["matched"] and info["dirty"] is not False:  # git's clean answer stands; a stale or absent .git yields
        info.update(commit=found["commit"], dirty=False, source="stamp")
    return {**info, "stamp": found}


def compiler_settings() -> dict[str, Any]:
    """Dynamo and Inductor settings that change what a compile does, read from the installed torch."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    from lab.measure.dynamo_tools import recompile_limit

    limit_name, limit_value = recompile_limit()
    dyn = {k: getattr(dynamo_config, k) for k in (
        "automatic_dynamic_shapes", "assume_static_by_default", "accumulated_recompile_limit",
        "accumulated_cache_size_limit", "capture_scalar_outputs", "suppress_errors") if hasattr(dynamo_config, k)}
    ind = {}
    for key in ("fx_graph_cache", "autotune_local_cache", "max_autotune", "coordinate_descent_tuning",
                "triton.cudagraphs", "triton.cudagraph_trees", "triton.cudagraph_support_input_mutation",
                "cpp.cxx", "cpp.threads", "freezing"):
        obj: Any = inductor_config
        try:
            for part in key.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        ind[key] = obj if isinstance(obj, (bool, int, float, str, type(None))) else repr(obj)
    return {"recompile_limit": {"name": f"torch._dynamo.config.{limit_name}", "value": limit_value},
            "dynamo": dyn, "inductor": ind}


def compile_cache_field(tc: Toolchain) -> dict[str, Any]:
    """What a compile cache made here is valid for (lab.host.compile_cache), and whether it was cold or warm when the run
    started (`state`, `entries`); never sinks the manifest."""
    try:
        out = manifest_field(tc)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return out | cache_state(out.get("cache_dir"))


def collect_env_fields() -> dict[str, Any]:
    """torch.utils.collect_env's own fields, verbatim (it is what bug reports use)."""
    from torch.utils import collect_env

    try:
        return {k: v for k, v in collect_env.get_env_info()._asdict().items()}
    except Exception as exc:  # it shells out a lot; never let it sink the manifest
        return {"error": f"{type(exc).__name__}: {exc}"}


def collect(weights: dict[str, Any] | None = None, toolchain: Toolchain | None = None,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the manifest. `weights` is the provenance of the model the run uses (lab.step.model)."""
    import torch

    tc = toolchain or probe()
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "created_at": now_iso(),
        "label": os.environ.get(LABEL_ENV) or None,
        "host": host_info(),
        "python": python_info(),
        "torch": {"version": torch.__version__, "cuda_build": torch.version.cuda,
                  "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                  "debug": torch.version.debug, "git": torch.version.git_version,
                  "num_threads": torch.get_num_threads()},
        "libraries": {name: version_of(name) for name in ("transformers", "triton", "jinja2", "numpy", "matplotlib", "nox")},
        "toolchain": tc.as_dict(),
        "gpu": {"torch": tc.cuda.__dict__.copy(), "nvidia_smi": nvidia_smi()},
        "cpu": {**cpu_info(), "torch_threads": torch.get_num_threads()},
        "host_dispatch": host_dispatch(),
        "compiler_settings": compiler_settings(),
        "inductor_cache_dir": inductor_cache_dir(),
        "compile_cache": compile_cache_field(tc),
        "lab": {"version": __version__, **git_info()},
        "container": container_info(),
        "scheduler": scheduler_info(),  # Slurm / Kubernetes ids and node of a fleet run (lab.fleet), else None
        "packages": packages_digest(),
        "weights": weights,
        "collect_env": collect_env_fields(),
    }
    if extra:
        manifest.update(extra)
    check_manifest(manifest, "the collected manifest")
    return manifest


def host_dispatch() -> dict[str, Any]:
    """The host's dispatch speed at the start of a run: CPU model, clock, load (the rest is filled in by `finish`)."""
    return {"cpu_model": cpu_info().get("model"), "cpu_mhz": cpu_mhz(), "load_start": load_average(),
            "load_end": None, "launch_us_per_op": None, "placement": cpuplace.placement().as_dict()}


def finish(manifest: dict[str, Any], launch_us_per_op: float | None = None) -> None:
    """What the manifest can only know at the end of a run: the host's load then (`host.load_end`,
    `host_dispatch.load_end`) and the clean launch cost the sentinel measured (`host_dispatch.launch_us_per_op`)."""
    host = manifest.setdefault("host", {})
    end = load_average()
    if isinstance(host, dict):
        host["load_end"] = end
    dispatch = manifest.get("host_dispatch")
    if isinstance(dispatch, dict):
        dispatch["load_end"] = end
        if launch_us_per_op is not None:
            dispatch["launch_us_per_op"] = launch_us_per_op
