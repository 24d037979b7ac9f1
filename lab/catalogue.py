"""The experiment catalogue: every id the lab knows, what it measures and what it needs.

An experiment's code lives in `lab/experiments/<id>.py` as a function `run(ctx)`. The ids are the
ones of the lab book (`shared/LAB_BOOK.md`); they are stable because issues, reports and
comparisons refer to them.

Needs are checked by the runner before an experiment starts:
- `cuda`: a CUDA device is visible to torch.
- `inductor`: Inductor's backend for the run's device works here (a C++ compiler and the Python
  headers on the CPU, Triton on CUDA).
- `cxx`: a C++ compiler and the Python headers, whatever the device.
- `triton`: Triton is importable.
- `host`: runs on the host whatever the profile's device (it measures no device).
"""

from __future__ import annotations

from dataclasses import dataclass

NEEDS = ("cuda", "inductor", "cxx", "triton", "host")


@dataclass(frozen=True)
class ExperimentSpec:
    id: str
    title: str
    source: str  # which text of the lab book it comes from
    needs: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return f"lab.experiments.{self.id}"


CATALOGUE: tuple[ExperimentSpec, ...] = (
    # chapter 000: the core of the lab
    ExperimentSpec("toolchain", "Which C++ compiler Inductor would use, Python headers, Triton, MSVC", "000", ("host",)),
    ExperimentSpec("graph_breaks", "Dynamo explain on toy functions that break: graphs, breaks, reasons", "000"),
    ExperimentSpec("recompiles", "12 batch sizes under dynamic=False, automatic and True: compiles, limit hit", "000"),
    ExperimentSpec("decode_recompiles", "Growing-cache step vs fixed-shape step, 20 calls: compiles, graphs, nodes", "000"),
    ExperimentSpec("fixed_step_equivalence", "Fixed-shape greedy decoding equals the reference, token for token", "000"),
    ExperimentSpec("cuda_graph_decode", "Decode step: eager vs graph replay vs compile modes, per batch", "000", ("cuda",)),
    ExperimentSpec("graph_cost", "Warm-up + capture time, break-even steps, state and graph-pool memory", "000", ("cuda",)),
    ExperimentSpec("graph_hazards", "Replaced input buffer (silent) and replay past the cache end (fatal)", "000", ("cuda",)),
    ExperimentSpec("ceilings", "Launch, bandwidth and compute ceilings of this host; which bound binds", "000"),
    ExperimentSpec("inductor", "Inductor on the indexed and the split decode step: speed, logits, tokens", "000", ("inductor",)),
    ExperimentSpec("compile_cost", "First-call compile cold vs warm cache, fresh processes; break-even calls", "000", ("inductor",)),
    # chapter 002
    ExperimentSpec("graph_break_repair", "RMS-norm with .item()/if/print vs torch.where: breaks, equality, speed", "002"),
    ExperimentSpec("manual_graph_recipe", "Linear(256,256) captured by hand with static buffers; equal to eager", "002", ("cuda",)),
    # module 003
    ExperimentSpec("fusion", "Chain of N elementwise ops, in and out of cache: eager vs compiled, bytes", "003", ("inductor",)),
    ExperimentSpec("launch_overhead", "Many tiny ops at batch 1: eager vs graph vs compile, per-op cost", "003"),
    ExperimentSpec("allocation", "Allocator cost per intermediate tensor, and what planning removes", "003"),
    ExperimentSpec("gemm_bound", "Large-batch GEMM-dominated model: compile gives about 1.0x", "003", ("inductor",)),
    ExperimentSpec("amdahl", "Fusible fraction from a profile: predicted vs measured compile speedup", "003", ("inductor",)),
    ExperimentSpec("diagnose", "The five checks on example targets: launch, kernels, breaks, recompiles, steady", "003"),
    # last: it reads the records above
    ExperimentSpec("selection", "Which of eager / compile / graph / compile+graph wins each workload", "002"),
)

BY_ID: dict[str, ExperimentSpec] = {spec.id: spec for spec in CATALOGUE}


def resolve(ids: list[str] | None) -> list[ExperimentSpec]:
    """The specs for the given ids, in catalogue order; unknown ids are an error naming them."""
    if not ids:
        return list(CATALOGUE)
    unknown = [i for i in ids if i not in BY_ID]
    if unknown:
        raise ValueError(f"unknown experiment id(s): {', '.join(unknown)} (see `python -m lab list`)")
    wanted = set(ids)
    return [spec for spec in CATALOGUE if spec.id in wanted]
