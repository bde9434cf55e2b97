"""The pointwise kernel's chunk depth (``chunk_depth``, PanelPlan.base_row): chunks deeper than
k-row 1's small-immediate read setups reach (4 vectors x 6 k-rows, r3 at k-row 2's setup),
against the float64 reference (tests/nn/reference.py), emulator checks on."""

import numpy as np
import pytest

from vc4nn.kernels import panel_park, sgemm_panel
from vc4nn.kernels.pointwise import PointwisePlan
from vc4nn.nn import pointwise

from .reference import assert_close, assert_close_fp16, dense

DTYPES = {"fp32": np.float32, "fp16": np.float16}

# The barrier's tokens must balance (panel_barrier): a run that ends with semaphores left, or
# any other dynamic check's warning, fails.
pytestmark = pytest.mark.filterwarnings("error::vc4nn.emulator.checks.CheckWarning")


def test_base_row():
    """r3 holds k-row 1's setup where every k-row is a small immediate away from it, else the
    first k-row that is; the deepest chunk counts from k-row 1 unless asked for ``far``."""
    def base(vectors, depth):
        return sgemm_panel.PanelPlan(96, 128, 64, False, 12, True, True, panel_vectors=vectors,
                                     chunk_depth=depth).base_row

    assert (base(8, 3), base(6, 4), base(4, 5), base(4, 6), base(2, 11)) == (1, 1, 1, 2, 3)
    assert [sgemm_panel.deepest_chunk(v, 12) for v in (2, 4, 6, 8)] == [9, 5, 4, 3]
    assert [sgemm_panel.deepest_chunk(v, 12, far=True) for v in (2, 4, 6, 8)] == [13, 6, 4, 3]


# h, w, cin, cout, bias, residual, activation, storage of x, y and w, layout, tiling: 6 k-rows of
# 4 vectors gathered (2 rows per QPU; fp16 weights one channel-pair block per QPU), x two k per
# gather (NHWC: both halves of a word; channel-major: an odd H*W flips the half bit), odd K (a
# last gather of one k), parked rows with more than 2 store slots per chunk, a residual, the
# weights DMA'd by 6 loaders (fp16: widened in the VPM), a wider panel with an edge.
CASES = [
    (14, 14, 32, 64, True, False, "relu6", "fp16", "fp16", "fp16", "hwc", {"park_rows": 6}),
    (9, 11, 33, 64, True, False, "relu", "fp16", "fp16", "fp16", "chw", {"park_rows": 3}),
    (10, 10, 32, 64, True, False, "relu6", "fp32", "fp32", "fp32", "chw", {"park_rows": 5}),
    (5, 7, 20, 64, False, True, "relu6", "fp16", "fp32", "fp16", "hwc", {}),
    (3, 5, 27, 64, True, True, None, "fp32", "fp32", "fp32", "hwc", {}),
    (4, 6, 26, 64, True, True, "relu", "fp32", "fp32", "fp32", "hwc", {"gather_weights": False}),
    (4, 6, 26, 64, True, False, "relu6", "fp16", "fp16", "fp16", "chw",
     {"gather_weights": False}),
    (3, 4, 40, 80, True, False, None, "fp32", "fp32", "fp32", "hwc",
     {"gather_weights": False, "panel_vectors": 2, "chunk_depth": 13}),
]


@pytest.mark.parametrize("h, w, cin, cout, bias, residual, activation, xs, ys, ws, layout, "
                         "tiling", CASES, ids=str)
def test_deep_chunks(device, h, w, cin, cout, bias, residual, activation, xs, ys, ws, layout,
                     tiling):
    tiling = dict({"panel_vectors": 4, "chunk_depth": 6}, **tiling)
    rng = np.random.default_rng(h * w + cin)
    x = rng.standard_normal((h, w, cin)).astype(DTYPES[xs])
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    wt = rng.standard_normal((cin, cout)).astype(DTYPES[ws])
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    r = rng.standard_normal((h, w, cout)).astype(DTYPES[ys]) if residual else None
    plan = PointwisePlan(h, w, cin, cout, 12, bias, residual, activation, xs, ys, ys, ws,
                         input_layout=layout, **tiling).panel
    assert plan.base_row > 1 and plan.b_gather == tiling.get("gather_weights", True)
    if tiling.get("park_rows"):
        assert panel_park.slots_per_chunk(plan) > 2 and plan.passes >= 2
    y = pointwise(xin, wt, b, activation, r, device=device, num_qpus=12, tiling=tiling,
                  x_layout=layout, dtype=DTYPES[ys])
    check = assert_close_fp16 if ys == "fp16" else assert_close
    check(y, *dense(x, wt, b, r, activation), cin)


def test_deep_chunks_default():
    """By default the deeper chunk only where the result is stored as halves: v1's pw1 in
    fp16 takes 6 k-rows, 6 rows per QPU, 5 of them parked (4 store slots per chunk, their
    addresses stepped in a register; all 6 would take 5 slots and the uniform stream); in
    float32 (at its memory roofline) 3 k-rows, 7 rows and 5 parked; 8-vector panels keep 3
    k-rows."""
    def plan(shape, storage, layout="hwc"):
        return PointwisePlan(*shape, 12, True, False, "relu6", storage, storage, "fp32",
                             storage, input_layout=layout)

    fp16, fp32 = plan((112, 112, 32, 64), "fp16"), plan((112, 112, 32, 64), "fp32", "chw")
    assert (fp16.depth, fp16.panel.rows, fp16.parks) == (6, 6, 5)
    assert panel_park.slots_per_chunk(fp16.panel) == 4 and panel_park.drain_registers(fp16.panel)
    assert not panel_park.drain_registers(fp32.panel)
    assert (fp32.depth, fp32.panel.rows, fp32.parks) == (3, 7, 5)
    assert plan((56, 56, 64, 128), "fp16").depth == 3
    assert fp16.depths() == [3, 5, 6]


def test_chunk_depth_refused():
    """A chunk depth the panel cannot take is refused by the panel plan, naming it."""
    plan = PointwisePlan(10, 10, 32, 64, 12, chunk_depth=8, panel_vectors=4)
    with pytest.raises(ValueError, match="chunk_depth 8"):
        plan.panel


def test_gathered_barrier_relays():
    """With gathered weights the barrier has at most GATHERED_RELAYS relays whatever the chunk
    depth (the master's semaphore work: panel_barrier.master_counts), and the leaves that take
    the spread pieces start after them."""
    from vc4nn.kernels.panel_barrier import master_counts, relay_counts, relays
    deep = PointwisePlan(14, 14, 32, 64, 12, True, False, "relu6", "fp16", "fp16", "fp32",
                         "fp16", panel_vectors=4, chunk_depth=6).panel
    assert deep.chunk_rows == 6 and relays(deep) == [1, 2, 3]
    # every QPU releases ARRIVED in the boundary's delay slot (one gather of B per chunk:
    # panel_barrier.all_arrive): 3 to each relay and 3 to the master; the 8 leaves' GO 2 each
    assert relay_counts(deep) == (3, 2) and master_counts(deep) == (2 + 1, 2)
    dma = PointwisePlan(14, 14, 32, 64, 12, panel_vectors=4, chunk_depth=6,
                        gather_weights=False).panel
    assert relays(dma) == [1, 2, 3, 4, 5, 6]
    spread = PointwisePlan(7, 7, 64, 96, 12, panel_vectors=6, spread_leaves=True).panel
    assert spread.chunk_rows == 4 and spread.piece_qpus == (4, 8)


# 6-vector panels gathered in chunks of 4 k-rows (3 relays for 4 k-rows), the pixels left over
# in pieces on the leaves after them; fp16 and float32. The master and the relays run their
# last pass without pieces, with the relays' DONE in the slot their branch leaves
# (panel_barrier.coordinators, leaves_behind): a master that did not take its own DONE back
# would end the run with tokens left (the emulator's semaphore_balance check, an error in
# this module).
@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_gathered_relays_with_pieces(device, storage):
    h, w, cin, cout = 7, 7, 40, 96
    rng = np.random.default_rng(cin + cout)
    x = rng.standard_normal((h, w, cin)).astype(DTYPES[storage])
    xin = np.ascontiguousarray(x.transpose(2, 0, 1))
    wt = rng.standard_normal((cin, cout)).astype(DTYPES[storage])
    b = rng.standard_normal(cout).astype(np.float32)
    tiling = {"panel_vectors": 6, "spread_leaves": True}
    plan = PointwisePlan(h, w, cin, cout, 12, True, False, "relu6", storage, storage, storage,
                         storage, input_layout="chw", **tiling).panel
    assert plan.b_gather and plan.loaders == 3 < plan.chunk_rows
    y = pointwise(xin, wt, b, "relu6", device=device, num_qpus=12, tiling=tiling,
                  x_layout="chw", dtype=DTYPES[storage])
    check = assert_close_fp16 if storage == "fp16" else assert_close
    check(y, *dense(x, wt, b, None, "relu6"), cin)


# The store slots' addresses stepped in a register (panel_park.drain_registers) where every
# slot stores a parked vector of its own: 6 rows of 4 vectors, 5 parked, in chunks of 6 k-rows
# (20 slots for 20 vectors), float32 and fp16 results, three passes; each against the same
# rows parked with the addresses from the uniform stream (6 rows all parked: 25 slots).
@pytest.mark.parametrize("storage, layout, activation", [
    ("fp16", "hwc", "relu6"), ("fp32", "chw", "relu"), ("fp16", "chw", None)])
def test_stepped_drains(device, storage, layout, activation):
    h, w, cin, cout = 14, 14, 32, 64
    rng = np.random.default_rng(cin + len(storage + layout))
    x = rng.standard_normal((h, w, cin)).astype(DTYPES[storage])
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    wt = rng.standard_normal((cin, cout)).astype(DTYPES[storage])
    b = rng.standard_normal(cout).astype(np.float32)
    check = assert_close_fp16 if storage == "fp16" else assert_close
    for park, stepped in ((5, True), (6, False)):
        tiling = {"panel_vectors": 4, "chunk_depth": 6, "park_rows": park}
        plan = PointwisePlan(h, w, cin, cout, 12, True, False, activation, storage, storage,
                             storage, storage, input_layout=layout, **tiling).panel
        assert (plan.rows, plan.passes) == (6, 3)
        assert bool(panel_park.drain_registers(plan)) is stepped
        y = pointwise(xin, wt, b, activation, device=device, num_qpus=12, tiling=tiling,
                      x_layout=layout, dtype=DTYPES[storage])
        check(y, *dense(x, wt, b, None, activation), cin)
