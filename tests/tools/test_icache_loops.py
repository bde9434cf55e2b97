"""tools/icache_loops.py: the loops of the layer kernels that do not fit the instruction cache."""

import importlib.util
import json
import os

import pytest

from asm import isa
from vc4nn.emulator import ccore
from vc4nn.emulator.timing import PARAMETERS

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "icache_loops.py")
WAYS = PARAMETERS["icache_ways"][0]
LINE_INSTRUCTIONS = PARAMETERS["icache_line_bytes"][0] // isa.INSTRUCTION_BYTES


def _tool():
    spec = importlib.util.spec_from_file_location("icache_loops", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not ccore.available(), reason="runs whole layers: needs the C core")
def test_a_loop_that_spills_the_cache_and_a_classifier_that_fits(capsys):
    """v2's b3.dw (56x56x144, stride 2) runs a row loop of 892 instructions, longer than the
    cache (32% of QPU time in its misses when both variants shared the slices, 5% since each
    variant has slices of its own: ``WindowPlan.by_variant``); the classifier's program is
    shorter than the cache."""
    assert _tool().main(["--net", "v2", "--only", "b3.dw,fc", "--json"]) == 0
    layers = {r["layer"]: r for r in json.loads(capsys.readouterr().out)["layers"]}
    (dw,), (fc,) = layers["b3.dw"]["launches"], layers["fc"]["launches"]
    assert fc["loops"] == [] and fc["icache_share"] < 0.1 and fc["instructions"] < 512
    assert dw["loops"] and dw["icache_share"] > 0.02 and dw["misses"] > dw["hits"] / 20
    for loop in dw["loops"]:
        # a loop that spills a set: more lines in one set than it has ways, so more lines in all
        # than one set's share of the cache, and at least 8 instructions a line
        assert loop["most_lines_in_a_set"] > WAYS
        assert loop["instructions"] == loop["last"] - loop["first"] + 1
        assert loop["lines"] >= loop["instructions"] // LINE_INSTRUCTIONS
    assert max(loop["instructions"] for loop in dw["loops"]) > 512
