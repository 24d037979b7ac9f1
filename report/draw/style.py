"""How a method looks on every page: its one name across runs and its one colour and marker in every chart.

Declared once here, so a method has the same colour in the fp32 and the bf16 chart, in the stacked bars
and in the sample boxes, and the same name in a run of today and in a run of an earlier lab version.

Names: runs of earlier lab versions labelled inductor's rows by the step they compiled
("compiled-indexed", "eager-split"); the same method is named by lab.contract.names.Method today, with
the step beside it. `canonical` maps both to one display name ("compile-default (indexed step)").
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from lab.contract.names import Method


@dataclass(frozen=True)
class Style:
    color: str
    marker: str
    linestyle: str = "-"


# One colour per method, from a palette readers with the common colour deficiencies can tell apart
# (Okabe-Ito, then Tableau's), and a marker shape per family, so print in grey still separates them.
STYLES: dict[str, Style] = {
    Method.EAGER: Style("#000000", "o"),
    Method.GRAPH: Style("#0072B2", "s"),
    Method.COMPILE_DEFAULT: Style("#E69F00", "^", "--"),
    Method.REDUCE_OVERHEAD: Style("#CC79A7", "v", "--"),
    Method.REDUCE_OVERHEAD_STATIC: Style("#882255", "<", "--"),
    Method.COMPILE_GRAPH: Style("#009E73", "D"),
    Method.COMPILE_GRAPH_COMBO: Style("#56B4E9", "P"),
    Method.COMPILE_GRAPH_PDL: Style("#D55E00", "X"),
    Method.COMPILE_GRAPH_COORDESC: Style("#999933", "h"),
    Method.MAX_AUTOTUNE: Style("#8C564B", ">", "--"),
    Method.MAX_AUTOTUNE_GRAPH: Style("#BCBD22", "d"),
    Method.FUSED: Style("#6A3D9A", "*"),
    Method.FUSED_PDL: Style("#E31A1C", "p"),
    Method.FUSED_PDL_PREFETCH: Style("#17BECF", "8"),
}
# A label no declaration names (an experiment's own variant): a colour from this list, chosen by the
# label's checksum, so it is the same on every page and in every run.
SPARE = ("#7F7F7F", "#AEC7E8", "#FFBB78", "#98DF8A", "#FF9896", "#C5B0D5", "#C49C94", "#F7B6D2")
SPARE_MARKERS = ("o", "s", "^", "D", "v")

# The parts of a stacked "where the time goes" bar (the method's own colour fills the GPU-busy part above
# the floor; the gap is the method's colour, hatched and pale).
FLOOR_COLOR = "#BDBDBD"
FLOOR_LINE = "#404040"
GAP_HATCH = "///"

# Labels of earlier lab versions -> (the declared method, the step it ran, '' for the decode step itself).
ALIASES: dict[str, tuple[str, str]] = {
    "compiled-indexed": (Method.COMPILE_DEFAULT, "indexed"),
    "compiled-split": (Method.COMPILE_DEFAULT, "split"),
    "compiled": (Method.COMPILE_DEFAULT, ""),
    "eager-indexed": (Method.EAGER, "indexed"),
    "eager-split": (Method.EAGER, "split"),
    "manual-graph": (Method.GRAPH, ""),
    "compile_graph": (Method.COMPILE_GRAPH, ""),
}


def canonical(method: Any, kind: str = "") -> tuple[str, str]:
    """(the declared method name, the step it ran) for a label of this or an earlier lab version."""
    name = str(method)
    if name in ALIASES:
        base, step = ALIASES[name]
        return str(base), step or kind
    return name, kind


def display(method: Any, kind: str = "") -> str:
    """One name per method across runs: 'compile-default', or 'compile-default (indexed step)'."""
    name, step = canonical(method, kind)
    return f"{name} ({step} step)" if step else name


def style(method: Any) -> Style:
    """The method's declared style (an old label through its alias); a spare one, stable per label, otherwise."""
    name, _ = canonical(method)
    if name in STYLES:
        return STYLES[name]
    h = zlib.crc32(name.encode())
    return Style(SPARE[h % len(SPARE)], SPARE_MARKERS[h % len(SPARE_MARKERS)], ":")


def pale(color: str, amount: float = 0.55) -> str:
    """The colour mixed with white (the gap part of a stacked bar)."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02X}" for c in mix)
