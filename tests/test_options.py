"""Declared experiment options: parsing `--set`, refusing bad names and values, profiles, listing, the manifest."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Literal, get_type_hints

import pytest

from lab.contract import profiles
from lab.__main__ import main
from lab.contract.catalogue import BY_ID, CATALOGUE
from lab.contract.names import Method
from lab.contract.options import (NoOptions, OptionsError, as_dict, coerce, describe, fill, in_range, option,
                                  parse_set, resolve)
from lab.run.context import options_class
from lab.run.runner import resolve_all


@dataclasses.dataclass(frozen=True)
class Knobs:
    flag: bool = option(False, "a switch")
    count: int = option(3, "a count")
    ratio: float = option(0.5, "a ratio")
    sizes: tuple[int, ...] = option((1, 2), "a list of ints")
    methods: tuple[Method, ...] = option((Method.EAGER,), "a list of methods")
    steps: int | None = option(None, "default: the profile's decode_steps")
    dtype: Literal["float32", "bfloat16"] = option("float32", "a choice")


@pytest.mark.parametrize("text,want", [("true", True), ("False", False), ("1", True), ("0", False), ("yes", True),
                                       ("NO", False), ("on", True), ("off", False)])
def test_set_parses_bools(text: str, want: bool) -> None:
    assert resolve(Knobs, "x", set_text={"flag": text}).flag is want


def test_set_parses_by_declared_type() -> None:
    o = resolve(Knobs, "x", set_text={"count": "12", "ratio": "2", "sizes": "1, 8,16", "methods": "graph,compile+graph",
                                      "steps": "none", "dtype": "bfloat16"})
    assert (o.count, o.ratio, o.sizes, o.steps, o.dtype) == (12, 2.0, (1, 8, 16), None, "bfloat16")
    assert o.methods == (Method.GRAPH, Method.COMPILE_GRAPH) and isinstance(o.methods[0], Method)
    assert isinstance(o.ratio, float) and resolve(Knobs, "x", set_text={"steps": "7"}).steps == 7
    assert resolve(Knobs, "x", set_text={"sizes": ""}).sizes == ()  # an empty list is a value


def test_profile_values_beat_defaults_and_set_beats_profile() -> None:
    o = resolve(Knobs, "x", {"count": 5, "sizes": [4, 5]}, {"count": "6"})
    assert (o.count, o.sizes) == (6, (4, 5))
    assert as_dict(o) == {"flag": False, "count": 6, "ratio": 0.5, "sizes": [4, 5], "methods": ["eager"],
                          "steps": None, "dtype": "float32"}
    json.dumps(as_dict(o))  # plain data


@pytest.mark.parametrize("set_text,message", [
    ({"flag": "maybe"}, "--set x.flag: expected a bool"),
    ({"count": "1.5"}, "--set x.count: expected an int, got '1.5'"),
    ({"ratio": "fast"}, "--set x.ratio: expected a float"),
    ({"sizes": "1,x"}, "--set x.sizes: expected an int, got 'x'"),
    ({"methods": "eager,warp"}, "--set x.methods: expected one of eager, graph, compile-default"),
    ({"steps": "many"}, "--set x.steps: expected int | None, got 'many'"),
    ({"dtype": "int8"}, "--set x.dtype: expected one of float32, bfloat16, got 'int8'"),
    ({"typo": "1"}, "--set x.typo: x has no option 'typo' (valid: flag, count, ratio, sizes, methods, steps, dtype)"),
])
def test_set_refuses_bad_values_and_keys_in_one_line(set_text: dict[str, str], message: str) -> None:
    with pytest.raises(OptionsError) as err:
        resolve(Knobs, "x", set_text=set_text)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)  # the CLI turns it into one line and exit 2


@pytest.mark.parametrize("values,message", [
    ({"flag": "False"}, "profile p: x.flag: expected bool, got 'False' (str)"),  # not a truthy string
    ({"count": True}, "profile p: x.count: expected int, got True"),
    ({"sizes": 3}, "profile p: x.sizes: expected list of int"),
    ({"methods": ["eager", "warp"]}, "profile p: x.methods: expected list of"),
    ({"nope": 1}, "profile p: x.nope: x has no option 'nope'"),
])
def test_profile_values_are_type_checked(values: dict, message: str) -> None:
    with pytest.raises(OptionsError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        resolve(Knobs, "x", values, profile_name="p")


def test_no_options_refuses_any_key() -> None:
    assert as_dict(resolve(NoOptions, "selection")) == {}
    with pytest.raises(OptionsError, match="selection has no option 'k' \\(it has no options\\)"):
        resolve(NoOptions, "selection", set_text={"k": "1"})


def test_parse_set_shape() -> None:
    assert parse_set(["a.b=1", "a.c=x=y", "d.e="]) == {"a": {"b": "1", "c": "x=y"}, "d": {"e": ""}}
    for bad in ("a=1", "a.b", ".b=1", "a.=1"):
        with pytest.raises(OptionsError, match="expected EXPERIMENT.KEY=VALUE"):
            parse_set([bad])


def test_every_experiment_declares_options_with_help_and_typed_defaults() -> None:
    for spec in CATALOGUE:
        cls = options_class(spec)
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, spec.id
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{spec.id}.{f.name} has no help"
            assert coerce(f.default, hints[f.name], f"{spec.id}.{f.name}") == f.default, f"{spec.id}.{f.name}"
            for value in (f.default, *f.metadata.get("by_device", {}).values()):
                in_range(f, value, f"{spec.id}.{f.name}")  # a declared default lies in the declared range
            if f.default is None:  # the help says where the value comes from, or what None means
                assert "(default:" in f.metadata["help"] or "(none:" in f.metadata["help"], f"{spec.id}.{f.name}"
            # a default that comes from the run is declared (and resolved before run()), never worked out by hand
            sourced = any(k in f.metadata for k in ("profile", "same_as", "by_device"))
            assert sourced == ("(default:" in f.metadata["help"]), f"{spec.id}.{f.name}"


@pytest.mark.parametrize("name", sorted(profiles.PROFILES))
def test_every_profile_override_resolves(name: str) -> None:
    """A typo or a wrong type in lab/contract/profiles.py fails here, not at the start of someone's run."""
    profile = profiles.get(name)
    assert set(profile.options) <= set(BY_ID), set(profile.options) - set(BY_ID)
    resolved = resolve_all(list(CATALOGUE), profile)
    for exp, values in profile.options.items():
        got = as_dict(resolved[exp])
        for key, value in values.items():
            assert got[key] == (list(value) if isinstance(value, tuple) else value), (exp, key)


def test_toolchain_try_compile_false_is_false() -> None:
    smoke = profiles.get("smoke")
    assert smoke.options["toolchain"]["try_compile"] is True
    opts = resolve_all([BY_ID["toolchain"]], smoke, parse_set(["toolchain.try_compile=False"]))
    assert opts["toolchain"].try_compile is False


def test_resolve_all_refuses_unknown_experiment_listing_ids() -> None:
    with pytest.raises(OptionsError) as err:
        resolve_all([BY_ID["toolchain"]], profiles.get("smoke"), {"toolchan": {"try_compile": "1"}})
    assert "unknown experiment 'toolchan'" in str(err.value) and "toolchain, graph_breaks" in str(err.value)
    # an experiment that is not selected is still checked
    with pytest.raises(OptionsError, match="fusion.typo"):
        resolve_all([BY_ID["toolchain"]], profiles.get("smoke"), {"fusion": {"typo": "1"}})


@pytest.mark.parametrize("arg,message", [
    ("toolchain.typo=1", "error: --set toolchain.typo: toolchain has no option 'typo' (valid: try_compile)"),
    ("warp.speed=9", "error: --set warp.speed: unknown experiment 'warp' (valid: sentinel, toolchain, "),
    ("toolchain.try_compile=perhaps", "error: --set toolchain.try_compile: expected a bool"),
    ("cuda_graph_decode.batches=1,x", "error: --set cuda_graph_decode.batches: expected list of int | None"),
    ("nokey", "error: --set 'nokey': expected EXPERIMENT.KEY=VALUE"),
    # issue 30: out of range was recorded FAILED when the experiment ran, not refused up front
    ("cuda_graph_decode.rounds=0", "error: --set cuda_graph_decode.rounds=0: 0 is out of range (it must be at least 1)"),
    ("context_scaling.fills=0.5,1.5", "error: --set context_scaling.fills=0.5,1.5: 1.5 is out of range (it must be at "
                                      "least 0 and at most 1)"),
    ("model_scaling.budget_s=-1", "error: --set model_scaling.budget_s=-1: -1.0 is out of range (it must be at least 0)"),
    ("model_scaling.budget_s=inf", "error: --set model_scaling.budget_s: expected float | None, got 'inf'"),
])
def test_cli_bad_set_is_one_line_exit_2_before_anything_runs(arg: str, message: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["run", "--profile", "smoke", "--only", "toolchain", "--out", str(out), "--set", arg]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err, err
    assert not out.exists()  # refused before the run directory was made


def test_manifest_records_resolved_options_and_the_experiment_gets_them(tmp_path: Path) -> None:
    assert main(["run", "--profile", "smoke", "--only", "toolchain,recompiles", "--out", str(tmp_path),
                 "--set", "toolchain.try_compile=no", "--set", "recompiles.batch_sizes=1,2,3"]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["options"] == {"toolchain": {"try_compile": False}, "recompiles": {"batch_sizes": [1, 2, 3]}}
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["manifest"]["options"] == manifest["options"]
    by_id = {r["id"]: r for r in results["experiments"]}
    assert not any(m["name"] == "python_extension_compiles" for m in by_id["toolchain"]["metrics"])
    assert by_id["recompiles"]["notes"]["batch_sizes"] == [1, 2, 3]


def test_list_options_shows_type_default_profile_value_and_help(capsys) -> None:
    assert main(["list", "--options", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    for spec in CATALOGUE:
        assert f"{spec.id}: {spec.title}" in out
        for info in describe(options_class(spec)):
            assert info.name in out and info.help in out
    line = next(x for x in out.splitlines() if x.split()[:1] == ["try_compile"])
    assert line.split()[:4] == ["try_compile", "bool", "false", "true"]  # declared default, then the smoke profile's
    assert "graph_breaks: " in out and "(no options)" in out
    assert main(["list", "--options", "cuda_graph_decode", "--profile", "gpu"]) == 0
    out = capsys.readouterr().out
    methods = next(x for x in out.splitlines() if x.split()[:1] == ["methods"])
    assert "eager,graph,compile-default,reduce-overhead,reduce-overhead-static,compile+graph" in methods
    assert "toolchain" not in out and "profile gpu" in out
    assert main(["list", "--options", "warp"]) == 2
    assert "unknown experiment id(s): warp" in capsys.readouterr().err


@dataclasses.dataclass(frozen=True)
class RunKnobs:
    rounds: int | None = option(None, "rounds (default: the profile's rounds)", profile="rounds")
    sweep_rounds: int | None = option(None, "rounds later (default: rounds)", same_as="rounds")
    depths: tuple[int, ...] | None = option(None, "depths (default: the model's depth)", profile="model.n_layer")
    size: int | None = option(None, "bytes (default: per device)", by_device={"cuda": 1 << 30, "cpu": 1 << 20})
    cap: int | None = option(None, "a cap (none: no cap)")


PROFILE = SimpleNamespace(name="p", rounds=7, device="cpu", model=SimpleNamespace(n_layer=12))


def test_a_default_from_the_run_is_resolved_from_its_declaration() -> None:
    o = resolve(RunKnobs, "x", profile=PROFILE)
    assert (o.rounds, o.sweep_rounds, o.depths, o.size, o.cap) == (7, 7, (12,), 1 << 20, None)
    assert resolve(RunKnobs, "x", profile=SimpleNamespace(**{**vars(PROFILE), "device": "cuda"})).size == 1 << 30


def test_a_value_given_by_the_profile_or_set_wins_over_the_declared_source() -> None:
    o = resolve(RunKnobs, "x", {"rounds": 3}, {"depths": "2,4"}, profile=PROFILE)
    assert (o.rounds, o.sweep_rounds, o.depths) == (3, 3, (2, 4))  # same_as follows the value rounds resolved to
    assert resolve(RunKnobs, "x", {"rounds": 3}, {"rounds": "none"}, profile=PROFILE).rounds == 7
    assert resolve(RunKnobs, "x", set_text={"sweep_rounds": "0"}, profile=PROFILE).sweep_rounds == 0  # 0 is a value


def test_fill_is_what_a_context_applies_to_options_built_by_hand() -> None:
    built = RunKnobs(rounds=2)
    filled = fill(built, PROFILE, "x")
    assert (filled.rounds, filled.sweep_rounds, filled.size) == (2, 2, 1 << 20)
    assert fill(filled, PROFILE, "x") == filled
    assert resolve(RunKnobs, "x").rounds is None  # without a profile nothing is filled


def test_a_declared_source_the_run_cannot_give_is_one_line() -> None:
    with pytest.raises(OptionsError, match=r"x.size: no declared default for device 'mps' \(declared: cuda, cpu\)"):
        resolve(RunKnobs, "x", profile=SimpleNamespace(**{**vars(PROFILE), "device": "mps"}))
    with pytest.raises(OptionsError, match="x.rounds: its default is the profile's rounds, which profile q does"):
        resolve(RunKnobs, "x", profile=SimpleNamespace(name="q", device="cpu", model=PROFILE.model))


def test_an_option_has_one_source_of_its_default() -> None:
    with pytest.raises(TypeError, match="one source"):
        option(None, "h", profile="rounds", same_as="steps")
    with pytest.raises(TypeError, match="one source"):
        option(3, "h", profile="rounds")


@pytest.mark.parametrize("name", sorted(profiles.PROFILES))
def test_the_manifest_never_records_none_for_a_default_that_comes_from_the_run(name: str) -> None:
    """The runner writes `as_dict(resolve_all(...)[id])` to the manifest: a declared source is always filled."""
    profile = profiles.get(name)
    resolved = resolve_all(list(CATALOGUE), profile)
    for spec in CATALOGUE:
        recorded = as_dict(resolved[spec.id])
        for f in dataclasses.fields(options_class(spec)):
            if "profile" in f.metadata or "by_device" in f.metadata or "same_as" in f.metadata:
                assert recorded[f.name] is not None, f"{name}: {spec.id}.{f.name}"
    cgd = as_dict(resolved["cuda_graph_decode"])
    overrides = profile.options.get("cuda_graph_decode", {})
    assert cgd["rounds"] == overrides.get("rounds", profile.rounds)
    assert cgd["batches"] == list(overrides.get("batches", profile.batches))
    assert cgd["steps"] == overrides.get("steps", profile.decode_steps)
