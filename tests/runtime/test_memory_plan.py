"""The memory plan of full-size MobileNets: liveness packing and the 24 MB budget."""

import onnx
import pytest

from vc4nn.runtime.loader import load_graph
from vc4nn.runtime.planner import plan_memory
from vc4nn.runtime import random_mobilenets as onnx_models

BUDGET = 24e6          # bytes: a Pi's GPU memory split is often 64 MB, shared with the firmware


@pytest.fixture(scope="module")
def small_v2(tmp_path_factory):
    """(graph, memory plan) of a small MobileNetV2-style model (residual adds)."""
    path = str(tmp_path_factory.mktemp("model") / "v2.onnx")
    onnx.save(onnx_models.mobilenet_v2(32, 0.35), path)
    graph = load_graph(path)
    return graph, plan_memory(graph)


def test_mobilenet_v1_224_fits_in_24_mb(tmp_path):
    path = str(tmp_path / "v1.onnx")
    onnx.save(onnx_models.mobilenet_v1(224, 1.0, classes=1000), path)
    plan = plan_memory(load_graph(path))
    # The most bytes alive at one step: pw1 reads 112x112x32 and writes 112x112x64; on a chain
    # first fit packs the arena into exactly that.
    assert plan.arena_bytes == plan.peak_live_bytes
    assert plan.peak_live_bytes == 4 * 112 * 112 * (32 + 64)
    assert 4.2e6 * 4 < plan.weight_bytes < 4.3e6 * 4          # 4.24 M parameters
    assert plan.total_bytes() <= BUDGET


def test_residual_operands_stay_alive(small_v2):
    graph, plan = small_v2
    for node in graph.nodes:
        if node.op == "pointwise" and len(node.inputs) > 3:
            res, out = plan.storage[node.inputs[3]], plan.storage[node.outputs[0]]
            a, b = plan.offsets[res], plan.offsets[out]
            assert a + plan.sizes[res] <= b or b + plan.sizes[out] <= a


def test_free_span_is_the_largest_gap_no_live_value_uses(small_v2):
    """Checked against a byte map of the arena built from the values alive at each step."""
    import numpy as np
    graph, plan = small_v2
    steps = [n for n in graph.nodes if n.op != "softmax"]
    for step, node in enumerate(steps):
        busy = np.zeros(plan.arena_bytes, bool)
        for name in node.inputs[:1] + node.inputs[3:] + node.outputs:
            owner = plan.storage.get(name)
            if owner is not None:               # what the layer reads and writes is live
                busy[plan.offsets[owner]:plan.offsets[owner] + plan.sizes[owner]] = True
        live = np.zeros(plan.arena_bytes, bool)
        for value, (first, last) in plan.lifetimes.items():
            if first <= step <= last:
                live[plan.offsets[value]:plan.offsets[value] + plan.sizes[value]] = True
        assert not (busy & ~live).any()
        offset, size = plan.free_span(step)
        assert not live[offset:offset + size].any()
        runs, run = [], 0
        for byte in live:
            run = 0 if byte else run + 1
            runs.append(run)
        assert size == max(runs + [0])
