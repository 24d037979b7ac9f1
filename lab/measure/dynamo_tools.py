"""Counting what Dynamo does: graphs, graph breaks, recompilations and their reasons.

`CountingBackend` is a torch.compile backend that records each graph it receives (call nodes,
input shapes, whether any size is symbolic) and runs it eagerly: no compiler is needed, so these
counts are available on every host.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, cast

import torch


def recompile_limit() -> tuple[str, int]:
    """The recompile limit under the installed torch's own name (`recompile_limit` or older `cache_size_limit`)."""
    import torch._dynamo.config as cfg

    names = getattr(cfg, "_config", {})
    for name in ("recompile_limit", "cache_size_limit"):
        if name in names or hasattr(cfg, name):
            try:
                return name, int(getattr(cfg, name))
            except AttributeError:
                continue
    raise RuntimeError("this torch has neither torch._dynamo.config.recompile_limit nor cache_size_limit")


@dataclass
class GraphInfo:
    call_nodes: int
    input_shapes: list[list[Any]]
    symbolic: bool
    ops: list[str]


@dataclass
class CountingBackend:
    """A backend that counts graphs and call nodes and then runs each graph eagerly."""

    graphs: list[GraphInfo] = field(default_factory=list)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        shapes: list[list[Any]] = []
        symbolic = False
        for inp in example_inputs:
            if isinstance(inp, torch.Tensor):
                dims = [str(d) if isinstance(d, torch.SymInt) else int(d) for d in inp.shape]
                symbolic |= any(isinstance(d, str) for d in dims)
                shapes.append(dims)
            elif isinstance(inp, torch.SymInt):
                symbolic = True
                shapes.append([str(inp)])
        ops = [str(n.target) if n.op != "call_module" else f"module:{n.target}" for n in gm.graph.nodes
               if n.op in ("call_function", "call_method", "call_module")]
        self.graphs.append(GraphInfo(call_nodes=len(ops), input_shapes=shapes, symbolic=symbolic, ops=ops))
        return gm.forward

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def call_nodes(self) -> int:
        return sum(g.call_nodes for g in self.graphs)


@dataclass
class Explained:
    graphs: int
    breaks: int
    ops: int
    reasons: list[str]


@contextlib.contextmanager
def quiet_dynamo() -> Iterator[None]:
    """Silence Dynamo's graph-break warnings while the lab provokes breaks on purpose (they are recorded)."""
    import warnings

    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def explain(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Explained:
    """torch._dynamo.explain, reduced to counts and the first line of each break reason."""
    torch._dynamo.reset()
    with quiet_dynamo():
        out = torch._dynamo.explain(fn)(*args, **kwargs)
    reasons = [str(r.reason).strip().splitlines()[0] for r in out.break_reasons]
    return Explained(graphs=out.graph_count, breaks=out.graph_break_count, ops=out.op_count, reasons=reasons)


@contextlib.contextmanager
def artifact_logs(artifact: str) -> Iterator[list[str]]:
    """Collect the messages of one torch logging artifact (as TORCH_LOGS=<artifact>) without printing them."""
    import torch._dynamo.guards  # noqa: F401  (registers the recompiles artifact logger)
    import torch._inductor.cudagraph_utils  # noqa: F401  (registers the cudagraphs artifact logger)

    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = _Collect()
    torch._logging.set_logs(**cast(dict[str, Any], {artifact: True}))
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
               if name.endswith(f"__{artifact}")]
    saved = [(lg, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False
    try:
        yield messages
    finally:
        for lg, propagate in saved:
            lg.removeHandler(handler)
            lg.propagate = propagate
        torch._logging.set_logs()


def recompile_reasons() -> contextlib.AbstractContextManager[list[str]]:
    """Collect Dynamo's recompile messages (TORCH_LOGS=recompiles) without printing them."""
    return artifact_logs("recompiles")


def limit_hit(counters: dict[str, Any]) -> bool:
    """Whether Dynamo gave up on a frame because the recompile limit was reached."""
    texts = (str(key).lower() for key in counters.get("unimplemented", {}))
    return any(s in text for text in texts for s in ("recompile limit", "cache_size_limit", "cache size limit"))


@dataclass
class CompileCount:
    """What happened when a function was compiled with CountingBackend and called on a sequence of inputs."""

    compiles: int  # frames Dynamo compiled (one per guard failure until the limit)
    graphs: int  # graphs the backend received (a compile with a break gives several)
    call_nodes: int
    symbolic_graphs: int
    limit_hit: bool
    reasons: list[str]
    graph_shapes: list[list[list[Any]]]


def count_compiles(fn: Callable[..., Any], calls: list[tuple[Any, ...]], dynamic: bool | None) -> CompileCount:
    """Compile `fn` with CountingBackend under `dynamic` and call it with each argument tuple in turn."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    backend = CountingBackend()
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    with recompile_reasons() as reasons, quiet_dynamo():
        for args in calls:
            compiled(*args)
    frames = dict(counters.get("frames", {}))
    snapshot = {k: dict(v) for k, v in counters.items()}
    return CompileCount(
        compiles=int(frames.get("ok", backend.graph_count)),
        graphs=backend.graph_count, call_nodes=backend.call_nodes,
        symbolic_graphs=sum(g.symbolic for g in backend.graphs), limit_hit=limit_hit(snapshot),
        reasons=[r.strip() for r in reasons], graph_shapes=[g.input_shapes for g in backend.graphs],
    )


def dynamo_counters() -> dict[str, dict[str, int]]:
    """A JSON-able copy of torch._dynamo.utils.counters (graphs, breaks, cudagraph skips, ...)."""
    from torch._dynamo.utils import counters

    return {k: {str(kk): int(vv) for kk, vv in v.items()} for k, v in counters.items()}
