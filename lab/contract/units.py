"""The units a metric can carry: one constant each, so a unit is spelled one way everywhere."""

from __future__ import annotations

MS = "ms"
S = "s"
US = "us"
COUNT = "count"
STEPS = "steps"
CALLS = "calls"
X = "x"  # a ratio: speedup, measured over bound
FRACTION = "fraction"
PERCENT = "%"
BOOL = "bool"
ABS = "abs"  # an absolute difference of logits
BYTES = "B"
MIB = "MiB"
GBPS = "GB/s"
TFLOPS = "TFLOP/s"
FLOP = "FLOP"
NONE = ""  # a label (e.g. which bound binds): no unit
