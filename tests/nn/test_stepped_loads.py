"""Stepped loads in the panel kernel (panel_registers.stepped_loads, panel_uniforms): the loaders
keep the address of their k-row in a register and step it by one chunk, forwards or backwards
with the panel, and (fp16 weights) derive their widening's VPM setups from the chunk's buffer,
so that a loader reads one uniform per chunk. Against a float64 einsum (tests/nn/reference.py),
on shapes that take every path of the stepping: several passes (so that panels alternate
direction, the "reversed" panels included), a narrower edge panel with a partial vector (whose
setups differ from the first panel's by constants), a last chunk with k-rows past K (which
reload the last k-row from the stream instead of stepping), both buffers."""

import numpy as np
import pytest

from vc4nn.kernels.panel_registers import stepped_loads
from vc4nn.kernels.panel_uniforms import uniform_streams
from vc4nn.kernels.pointwise import PointwisePlan
from vc4nn.nn import pointwise

from .reference import assert_close, assert_close_fp16, dense

DTYPES = {"fp16": np.float16, "fp32": np.float32}

# h, w, cin, cout, bias, residual, activation, storage of x, y, residual, weights, tiling.
# 12 QPUs; pixels past one pass of 12 x rows; Cin 100 = 33 chunks of 3 k-rows and one of 1.
CASES = [
    # fp16 weights (halves widened by the loaders), 8-vector panels: 2 full and an edge of 44.
    (13, 9, 100, 300, True, False, "relu6", "fp16", "fp16", "fp32", "fp16",
     {"panel_vectors": 8, "gather_weights": False}),
    # the same with float32 activations and a residual.
    (11, 11, 100, 300, True, True, None, "fp32", "fp32", "fp32", "fp16",
     {"panel_vectors": 8, "gather_weights": False}),
    # fp16 weights, a single narrow panel (Cout 24 = 16 + a partial 8), 4-vector panels.
    (12, 12, 67, 24, False, False, "relu", "fp16", "fp16", "fp32", "fp16",
     {"panel_vectors": 4, "gather_weights": False}),
    # float32 weights by DMA: 6-vector panels (4 k-rows per chunk, two-k gathers of A, odd K),
    # 96 + an edge window of 4 shifted to Cout.
    (13, 9, 99, 100, True, False, None, "fp32", "fp32", "fp32", "fp32",
     {"panel_vectors": 6, "gather_weights": False}),
    # the transposed route (channel-major A: A's k step is M halves).
    (9, 9, 100, 160, True, True, "relu6", "fp16", "fp16", "fp16", "fp16",
     {"panel_vectors": 8, "gather_weights": False, "transpose_input": True}),
]


def plan_of(h, w, cin, cout, bias, residual, activation, xs, ys, rs, ws, tiling):
    return PointwisePlan(h, w, cin, cout, 12, bias, residual, activation, xs, ys, rs, ws,
                         **tiling).panel


@pytest.mark.parametrize("h, w, cin, cout, bias, residual, activation, xs, ys, rs, ws, tiling",
                         CASES, ids=str)
def test_stepped_loads_match_float64(device, h, w, cin, cout, bias, residual, activation, xs,
                                     ys, rs, ws, tiling):
    panel = plan_of(h, w, cin, cout, bias, residual, activation, xs, ys, rs, ws, tiling)
    assert stepped_loads(panel) and panel.passes > 1 and panel.k % panel.chunk_rows
    rng = np.random.default_rng(cin + cout + h)
    x = rng.standard_normal((h, w, cin)).astype(DTYPES[xs])
    wt = rng.standard_normal((cin, cout)).astype(DTYPES[ws])
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    r = rng.standard_normal((h, w, cout)).astype(DTYPES[rs]) if residual else None
    y = pointwise(x, wt, b, activation, r, device=device, num_qpus=12, tiling=tiling,
                  dtype=DTYPES[ys])
    check = assert_close_fp16 if ys == "fp16" else assert_close
    check(y, *dense(x, wt, b, r, activation), cin)


def test_a_loader_reads_nothing_per_stepped_chunk():
    """The loaders' streams, counted by hand for 14x14x512->512 in fp16 (3 passes of 4 panels of
    171 chunks, 3 loaders): [vdr setup, address] on each panel's last two chunks only; before
    the first chunk widen_x and chunk 0's [setup, address]; per pass 5 words (A, rows valid - 1,
    rows to store, C, bias) and per panel 2 (A's step, A's first k); the header: participates,
    role, 3 staging setups; last, the chain word (kernels/chain.py). A leaf reads the same
    without the loads."""
    panel = PointwisePlan(14, 14, 512, 512, 12, True, False, "relu6", "fp16", "fp16", "fp32",
                          "fp16", gather_weights=False).panel
    assert (panel.passes, panel.full_panels, panel.chunks, panel.chunk_rows) == (3, 4, 171, 3)
    assert stepped_loads(panel) and [panel.loader_slot(q) for q in range(4)] == [None, 0, 1, 2]
    streams = uniform_streams(panel, (0x1000, 0x100000, 0x200000), 1.0, 0.0, bias=0x300000)
    leaf = 1 + 4 + 3 * 5 + 3 * 4 * 2 + 1
    panels = 3 * 4
    loader = leaf + 1 + 2 + panels * 2 * 2
    assert [len(s) for s in streams] == [leaf] + [loader] * 3 + [leaf] * 8
