"""tools/bench_spatial.py runs as a user runs it and prints its figures (small layers here)."""

import json
import re

from .test_tools import run_tool


def test_bench_spatial_table_and_json():
    out = run_tool("bench_spatial.py", "--reduce", "16", "--only", "dw1,conv0")
    assert "cycle-model estimates" in out
    assert re.search(r"dw1\s+depthwise\s+7x7x32\s+1\s+\d+\.\d+\s+\d+\.\d+\s+\d+%", out)
    out = run_tool("bench_spatial.py", "--reduce", "16", "--only", "conv0", "--qpus", "4",
                   "--json")
    result = json.loads(out)
    assert result["layer"] == "conv0" and result["out"] == [7, 7, 32] and result["qpus"] == 4
    assert 0 < result["roofline_fraction"] < 1.5 and result["kernel_clocks"] > 0
