"""compile_tuning: the tuned compiles (max-autotune plain and captured, coordinate descent) at every batch, beside
compile+graph and eager, timed in the same rotating rounds.

cuda_graph_decode's measurement (build, check, time, profile last; lab.experiments.cuda_graph_decode) on these
methods alone. They compile for tens of seconds each, and at every batch under Dynamo's automatic dynamic shapes
they compile again for the symbolic batch, so beside every other method they would pass the 10 minutes that some
GPU hosts give one command (gpu-full's cuda_graph_decode took 444 s on an H200 with them at batch 1 only). Apart,
each experiment fits a command, and `--stop-after` makes the run in chunks between them. The gpu-full profile
runs it (its cuda_graph_decode lists these methods as measured here); elsewhere, by name (`--only compile_tuning`).

Every figure is cuda_graph_decode's, with the same params: setup_s (compile + capture; compile+graph compiles
for itself here, as no compile-default is built beside it), step_ms and its interval, the speedup over eager,
break-even steps, the kernels of a profiled step. Each tuned method is judged against this experiment's own
compile+graph, timed in the same rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lab.contract.names import Method
from lab.contract.options import option
from lab.experiments import cuda_graph_decode
from lab.experiments.cuda_graph_decode import TUNED_METHODS
from lab.run.context import Context

BASELINES = (Method.EAGER, Method.COMPILE_GRAPH)  # eager: every speedup's; compile+graph: the untuned compile


@dataclass(frozen=True)
class Options(cuda_graph_decode.Options):
    methods: tuple[Method, ...] = option((*BASELINES, Method.COMPILE_GRAPH_COORDESC),
                                         "the methods compared at every batch (with max_autotune, its two methods "
                                         "too); eager is the baseline and must be one of them")
    max_autotune: bool = option(True, "also compile with max-autotune-no-cudagraphs, plain and captured")
    bf16_methods: tuple[Method, ...] = option((*BASELINES, *TUNED_METHODS), "the methods of the bf16 run (those "
                                              "also in methods)")
    readback: tuple[bool, ...] = option((False,), "time without (false) and/or with (true) reading the token back "
                                        "to the host every step (cuda_graph_decode measures the read-back)")

    SCOPE: ClassVar[tuple[str, ...] | None] = (*BASELINES, *TUNED_METHODS)


def run(ctx: Context[Options]) -> None:
    cuda_graph_decode.run(ctx)

