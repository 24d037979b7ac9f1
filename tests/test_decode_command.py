"""`lab decode`: the reference, growing and fixed-shape decodes agree token for token."""

from __future__ import annotations

import json

from lab.__main__ import main


def test_cli_decode_methods_agree(capsys) -> None:
    outs = {}
    for method in ("reference", "growing", "fixed"):
        assert main(["decode", "--profile", "smoke", "--method", method, "--prompt", "464,290,318",
                     "--prompt", "1,2,3", "--steps", "12", "--json"]) == 0
        outs[method] = json.loads(capsys.readouterr().out)["tokens"]
    assert outs["reference"] == outs["growing"] == outs["fixed"]
    assert len(outs["fixed"]) == 2 and len(outs["fixed"][0]) == 12
