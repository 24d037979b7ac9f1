"""The names of the ways to run a step: one enum, imported by the step-method table, the
experiments, selection, bench, compare and the report (standard library only: the report runs
without torch).

A `Method` is a `str`, so it is written to results.json as its value ("compile+graph") and compares
equal to that string when a results file is read back.
"""

from __future__ import annotations

from enum import StrEnum


class Method(StrEnum):
    EAGER = "eager"  # the step as written, one kernel launch per op
    GRAPH = "graph"  # the eager step captured once by hand (lab.graphs.GraphedStep) and replayed
    COMPILE_DEFAULT = "compile-default"  # torch.compile, default mode (Dynamo + Inductor)
    REDUCE_OVERHEAD = "reduce-overhead"  # torch.compile(mode="reduce-overhead"): cudagraph trees
    REDUCE_OVERHEAD_STATIC = "reduce-overhead-static"  # ... with the state given static addresses
    COMPILE_GRAPH = "compile+graph"  # compiled (default mode), then captured by hand
    MAX_AUTOTUNE = "max-autotune-no-cudagraphs"  # torch.compile(mode="max-autotune-no-cudagraphs")


# The order in which tables and charts list methods: from the step as written to the most transformed.
METHOD_ORDER: tuple[str, ...] = tuple(m.value for m in Method)


def method_rank(name: object) -> tuple[int, str]:
    """Sort key: declared methods in METHOD_ORDER, anything else after them by name."""
    return (METHOD_ORDER.index(name) if name in METHOD_ORDER else len(METHOD_ORDER), str(name))
