"""Where a plan's own buffers land (lab.step.fused.place): which tensors are a plan's own, a plan with another's buffers in
their place, and the study that takes a fast and a slow plan of the same configs apart. Plans are built on the CPU and no
kernel runs here (a fake clock times them); tests/test_fused_interpreter.py runs a swapped plan against a plan of its
own, and the tool itself needs a GPU."""

from __future__ import annotations

import pytest

from lab.step.fused import triton_import_error

TRITON_MISSING = triton_import_error()
pytestmark = pytest.mark.skipif(TRITON_MISSING is not None, reason=f"Triton does not import: {TRITON_MISSING}")


@pytest.fixture(scope="module")
def tiny():
    from lab.step.decode import new_state
    from lab.step.fused.check import weights_for

    w = weights_for("tiny")
    return w, new_state(w, 1, 16)


def _made(w, state):
    from lab.step.fused import configs as C
    from lab.step.fused.step import prepare

    def made():  # the A/B tool's plan: repeatable, the PREFETCH kernels (their folded layer norms), the gemv path,
        # folded (ln_qkv's rows in blocks that divide the tiny model's heads of 16)
        return prepare(state, w, sms=2, repeatable=True, prefetch=True, path="gemv", fold=True,
                       overrides={"ln_qkv": C.GemvConfig(1, 16, 64, 4)})

    return made


def _shared(w, state):
    return w.tensors() + list(state.buffers().values())


def test_a_plans_own_buffers_are_its_workspace_and_its_folded_constants_never_the_weights_or_the_state(tiny) -> None:
    from lab.step.fused.place import owned

    w, state = tiny
    plan = _made(w, state)()
    assert plan.fold and plan.ln_fold and plan.prefetch, plan.path_reason  # the path whose buffers the tool swaps
    got = owned(plan, _shared(w, state))
    layers = len(w.layers)
    assert {"ln_qkv.c1_ptr", "ln_qkv.c2_ptr", "ln_fc.c1_ptr", "ln_fc.c2_ptr"} <= set(got), sorted(got)
    assert all(len(got[k]) == layers for k in ("ln_qkv.c1_ptr", "ln_fc.c2_ptr"))  # one a layer, together
    # (part_o, part_m, part_l and mail: the folded ln_qkv's, for its OLDER_FIRST switch; part_m and part_l proj's too)
    fields = {"x", "x_scratch", "q", "h", "logits", "lm_val", "lm_idx", "att", "heads", "mail", "part_o", "part_m",
              "part_l", "pos_scratch"}
    assert fields <= set(got) and set(got) - fields == {"ln_qkv.c1_ptr", "ln_qkv.c2_ptr", "ln_fc.c1_ptr",
                                                        "ln_fc.c2_ptr"}, sorted(got)
    shared = {id(t) for t in _shared(w, state)}
    for name, positions in got.items():
        for i, j in positions:
            arg = plan.launches[i].args[j]
            assert id(arg) not in shared and arg.numel() > 0, (name, plan.launches[i].name, j)
    # x is every layer's: ln_qkv and ln_fc read it, proj and fc2 read it as the residual, lm_head reads it
    assert len(got["x"]) == 4 * layers + 1 and {plan.launches[i].name for i, _ in got["x"]} == {
        "ln_qkv", "proj", "ln_fc", "fc2", "lm_head"}


def test_a_swapped_plan_takes_the_others_buffer_where_its_launches_took_its_own_and_nothing_else(tiny) -> None:
    from lab.step.fused.place import ALL, hybrids, owned, places, swapped

    w, state = tiny
    made = _made(w, state)
    a, b = made(), made()
    buffers = owned(a, _shared(w, state))
    assert buffers == owned(b, _shared(w, state))  # alike plans: the same buffers in the same places
    one = swapped(a, b, buffers["logits"])
    assert one.workspace.logits is b.workspace.logits and one.workspace.x is a.workspace.x  # returns what it wrote
    for k, (before, after) in enumerate(zip(a.launches, one.launches)):
        for j, (x, y) in enumerate(zip(before.args, after.args)):
            assert y is ((b.launches[k].args[j]) if (k, j) in buffers["logits"] else x), (k, j)
    every = swapped(a, b, [p for pos in buffers.values() for p in pos])
    assert places(every, buffers) == places(b, buffers) != places(a, buffers)
    assert a.workspace.logits is not b.workspace.logits  # the originals are untouched
    arms = hybrids(("plan 1", a), ("plan 2", b), buffers)
    assert list(arms)[:2] == ["plan 1", "plan 2"] and len(arms) == 2 + 2 * (len(buffers) + 1)
    assert f"plan 1 with plan 2's {ALL}" in arms and "plan 2 with plan 1's x" in arms
    with pytest.raises(ValueError, match="do not make the same launches"):
        swapped(a, type(b)(**{**vars(b), "launches": b.launches[:-1]}), buffers["x"])


def _fake_clock(slow_of, slow_by: float = 1.05):
    """A clock that times a plan 1.0, or `slow_by` when it takes the buffer `slow_of()` (identity): where the step's time
    is that buffer's place."""
    def timer(plan) -> float:
        slow = slow_of()
        hit = slow is not None and any(arg is slow for x in plan.launches for arg in x.args)
        return slow_by if hit else 1.0

    return timer


def test_the_study_finds_the_buffer_whose_place_is_the_steps_and_only_it(tiny) -> None:
    """Four plans; the second's `h` is a slow place (a fake clock): the study takes plan 2 apart from the fastest, and
    only the swaps of `h` (and of all buffers) move a plan to the other's time, carrying the whole gap."""
    from lab.step.fused.place import ALL, study

    w, state = tiny
    made, built = _made(w, state), []

    def tracked():
        built.append(made())
        return built[-1]

    lines: list[str] = []
    record = study(tracked, _shared(w, state), 4, 3, _fake_clock(lambda: built[1].workspace.h if len(built) > 1 else None),
                   lines.append)
    assert record["slowest"] == "plan 2" and record["fastest"] != "plan 2", record["plans"]
    assert record["apart"]["relation"] == "higher" and 1.04 < record["apart"]["ratio"] < 1.06
    assert record["moves"] == ["h"], record["buffers"]
    assert record["buffers"][ALL]["moves"] and not record["buffers"]["x"]["moves"]
    low, high = record["buffers"]["h"]["share"]
    assert 0.99 < low < 1.01 and 0.99 < high < 1.01
    assert record["buffers"]["x"]["share"][0] < 0.01
    assert set(record["places"]) == {"plan 1", "plan 2", "plan 3", "plan 4"}
    assert record["places"]["plan 2"]["h"] == [hex(built[1].workspace.h.data_ptr())]
    assert len(record["swaps"]) == 2 + 2 * (len(record["buffers"])) and any("MOVES THE STEP" in x and x.endswith(" h")
                                                                          for x in lines), lines


def test_the_study_stops_where_the_plans_are_the_same_within_their_intervals(tiny) -> None:
    from lab.step.fused.place import study

    w, state = tiny
    lines: list[str] = []
    record = study(_made(w, state), _shared(w, state), 3, 3, _fake_clock(lambda: None), lines.append)
    assert record["apart"]["relation"] == "same" and "swaps" not in record and "moves" not in record
    assert "nothing to take apart" in lines[-1]


def test_the_place_tool_refuses_bad_arguments_and_a_host_without_cuda_in_one_line(capsys, monkeypatch) -> None:
    import torch

    from lab.step.fused import place

    assert place.main(["--plans", "1"]) == 2 and "--plans and --rounds at least 2" in capsys.readouterr().err
    assert place.main(["--rounds", "1"]) == 2 and "at least 2" in capsys.readouterr().err
    assert place.main(["--sweep", "x", "--stride", "40"]) == 2 and "a positive multiple of 16" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert place.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "lab.step.fused.place needs a CUDA device (none visible)"


def test_candidates_are_copies_of_the_buffer_stride_bytes_apart_from_an_aligned_start(tiny) -> None:
    import torch

    from lab.step.fused.place import candidates

    like = torch.arange(24, dtype=torch.float32).view(2, 12)
    for stride in (96, 48):  # the buffer's 96 bytes apart, then overlapping: the last copy whole, each a copy once
        got = candidates(like, 5, stride)
        assert got[0].data_ptr() % 4096 == 0
        assert [t.data_ptr() - got[0].data_ptr() for t in got] == [k * stride for k in range(5)]
        assert all(t.shape == like.shape and t.dtype == like.dtype for t in got) and torch.equal(got[-1], like)
        assert all(torch.equal(t, like) for t in got) == (stride == 96)
    for bad in ((5, 40), (5, 0), (0, 48)):
        with pytest.raises(ValueError, match="a positive multiple of 16"):
            candidates(like, *bad)


def test_a_sweep_times_the_buffer_at_each_place_in_a_shuffled_order_and_finds_the_slow_ones(tiny) -> None:
    """The plan's `x` at eight places 512 bytes apart; a fake clock makes the places with bit 10 of the address set
    slow: the sweep's ratios say so place by place, against the plan's own, and its order is not the address order."""
    from lab.step.fused.place import moved, owned, sweep

    w, state = tiny
    plan = _made(w, state)()
    buffers = owned(plan, _shared(w, state))
    calls: list[int] = []

    def timer(p) -> float:
        calls.append(p.workspace.x.data_ptr())
        xs = {id(a) for x in p.launches for a in x.args if a is p.workspace.x}
        assert len(xs) == 1 and all(a is p.workspace.x for i, j in buffers["x"] for a in [p.launches[i].args[j]])
        return 1.1 if p.workspace.x.data_ptr() & 1024 else 1.0

    lines: list[str] = []
    got = sweep(plan, "x", buffers["x"], 8, 512, 3, timer, lines.append)
    own_slow = bool(plan.workspace.x.data_ptr() & 1024)
    assert list(got["places"]) == ["own"] + [f"+{512 * k}" for k in range(8)] and got["order"] != list(got["places"])
    for k in range(8):
        row = got["places"][f"+{512 * k}"]
        slow = bool(int(row["address"], 16) & 1024)
        assert row["relation"] == ("same" if slow == own_slow else "higher" if slow else "lower"), (k, row)
    assert [int(got["places"][f"+{512 * k}"]["address"], 16) & 1024 for k in range(8)] == [0, 0, 1024, 1024] * 2
    assert 1.09 < got["spread"] < 1.11 and len(calls) == 9 * 3 and len(lines) == 9
    with pytest.raises(ValueError, match="ln_qkv.c1_ptr is 2 tensors"):
        sweep(plan, "ln_qkv.c1_ptr", buffers["ln_qkv.c1_ptr"], 2, 512, 2, timer)
    with pytest.raises(ValueError, match="moved: launch .* not a tensor of its shape"):
        moved(plan, buffers["x"], plan.workspace.h)
