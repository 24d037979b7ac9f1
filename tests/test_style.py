"""report.draw.style: one colour and marker per method, declared once; one name per method across lab versions."""

from __future__ import annotations

from lab.contract.names import Method

from report.draw import style


def test_every_declared_method_has_its_own_colour() -> None:
    assert set(style.STYLES) == set(Method)
    colours = [s.color.lower() for s in style.STYLES.values()]
    assert len(set(colours)) == len(colours)
    assert style.FLOOR_COLOR.lower() not in colours


def test_a_method_looks_the_same_everywhere() -> None:
    assert style.style(Method.GRAPH) is style.STYLES[Method.GRAPH]
    assert style.style("compiled-indexed") is style.STYLES[Method.COMPILE_DEFAULT]  # an older label, the same look
    other = style.style("kv-variant")
    assert other == style.style("kv-variant") and other.color in style.SPARE


def test_older_labels_map_to_one_name() -> None:
    assert style.display("compiled-indexed") == style.display(Method.COMPILE_DEFAULT, "indexed") == \
        "compile-default (indexed step)"
    assert style.display("eager-split") == "eager (split step)"
    assert style.display(Method.FUSED) == "fused"


def test_pale_mixes_towards_white() -> None:
    assert style.pale("#000000", 0.5) == "#808080" and style.pale("#FFFFFF") == "#FFFFFF"
