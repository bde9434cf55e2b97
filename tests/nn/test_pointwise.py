"""vc4nn.nn.pointwise against a float64 reference (tests/nn/reference.py), emulator checks on."""

import numpy as np
import pytest

from vc4nn.device import Buffer
from vc4nn.errors import Vc4nnError
from vc4nn.kernels import pointwise as kernel
from vc4nn.kernels import sgemm_panel
from vc4nn.nn import mobilenet_shapes, pointwise, prepare_pointwise
from vc4nn.nn.layer_args import DtypeError, LayerArgumentError, ShapeError

from .reference import assert_close, dense


def tensors(seed, h, w, cin, cout, bias, residual):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((h, w, cin)).astype(np.float32)
    wt = rng.standard_normal((cin, cout)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) * 4 if bias else None
    r = rng.standard_normal((h, w, cout)).astype(np.float32) * 4 if residual else None
    return x, wt, b, r


def run_case(device, h, w, cin, cout, num_qpus, bias, residual, activation, seed=0):
    x, wt, b, r = tensors(seed, h, w, cin, cout, bias, residual)
    y, run = pointwise(x, wt, b, activation, r, device=device, num_qpus=num_qpus,
                       return_run=True)
    expected, magnitude = dense(x, wt, b, r, activation)
    assert_close(y, expected, magnitude, cin)
    return run


# Every H, W in {1, 2, 7, 14, 15}, C in {1, 3, 8, 16, 17, 32, 144} (as Cin and as Cout), each
# activation, with and without bias and residual, on 1, 4 and 12 QPUs; kept small for the
# pure-Python emulator: the rest of the cross product is marked slow.
FAST = [
    # h, w, cin, cout, qpus, bias, residual, activation
    (1, 1, 1, 1, 1, False, False, None),
    (2, 2, 3, 8, 4, True, False, "relu"),
    (7, 7, 16, 17, 12, True, True, "relu6"),
    (1, 15, 17, 3, 12, False, True, None),
    (2, 7, 32, 16, 4, True, True, "relu"),
    (14, 1, 144, 32, 12, True, False, "relu6"),
    (15, 2, 8, 144, 12, False, False, "relu"),
    (7, 2, 3, 1, 1, True, True, "relu6"),
    (2, 14, 1, 100, 4, True, True, None),      # a shifted edge panel (100 = 96 + 4)
]


@pytest.mark.parametrize("h,w,cin,cout,num_qpus,bias,residual,activation", FAST)
def test_shapes(device, h, w, cin, cout, num_qpus, bias, residual, activation):
    run_case(device, h, w, cin, cout, num_qpus, bias, residual, activation,
             seed=h * 1000 + w * 100 + cin + cout)


SIZES = (1, 2, 7, 14, 15)
CHANNELS = (1, 3, 8, 16, 17, 32, 144)


@pytest.mark.slow
@pytest.mark.parametrize("num_qpus", [1, 4, 12])
@pytest.mark.parametrize("cin", CHANNELS)
@pytest.mark.parametrize("cout", CHANNELS)
@pytest.mark.parametrize("hw", SIZES)
def test_grid(device, hw, cin, cout, num_qpus):
    options = [(False, False, None), (True, False, "relu"), (True, True, "relu6"),
               (False, True, None)]
    bias, residual, activation = options[(hw + cin + cout + num_qpus) % len(options)]
    run_case(device, hw, SIZES[(cin + cout) % len(SIZES)], cin, cout, num_qpus, bias, residual,
             activation, seed=hw + cin * 7 + cout * 31)


@pytest.mark.slow
@pytest.mark.parametrize("activation", [None, "relu", "relu6"])
def test_112(device, activation):
    run_case(device, 112, 112, 8, 16, 12, True, True, activation)


def test_aliasing_activation_is_transposed_first(device):
    """Cin = 256 and 5 pixels per QPU: pixels 0 and 4 share a TMU cache set, so the layer runs
    the GPU transpose and the panel kernel's TN path (two launches)."""
    plan = kernel.PointwisePlan(7, 14, 256, 16, 12, True, True, "relu")
    assert plan.transposed and plan.panel.trans_a
    assert sgemm_panel.a_rows_per_set(sgemm_panel.PanelPlan(98, 16, 256, False, 12, True, True)) == 2
    run = run_case(device, 7, 14, 256, 16, 12, True, True, "relu")
    assert run.launches == 2


@pytest.mark.parametrize("transpose_input", [False, True])
def test_forced_route(device, transpose_input):
    plan = kernel.PointwisePlan(2, 3, 20, 24, 4, True, True, "relu6",
                                transpose_input=transpose_input)
    x, wt, b, r = tensors(5, 2, 3, 20, 24, True, True)
    y = device.alloc((2, 3, 24), np.float32)
    bufs = [device.array(v) for v in (x, wt, b, r)]
    ws = device.alloc((20, 6), np.float32)
    for program, qpus, streams in kernel.launches(plan, bufs[0].address, bufs[1].address,
                                                  y.address, bufs[2].address, bufs[3].address,
                                                  ws.address):
        device.execute(program, qpus, streams)
    assert_close(y, *dense(x, wt, b, r, "relu6"), 20)


def test_prepared_weights_and_program_cache(device, monkeypatch):
    x, wt, b, r = tensors(1, 3, 3, 12, 20, True, True)
    prepared = prepare_pointwise(wt, b, device=device)
    assert prepared.nbytes == wt.nbytes + b.nbytes
    first = pointwise(x, prepared, activation="relu", residual=r, device=device, num_qpus=4)
    assert_close(first, *dense(x, wt, b, r, "relu"), 12)
    # The second call with the same shape assembles nothing and lays out no weights.
    assembled = []
    monkeypatch.setattr(sgemm_panel.panel_kernel, "assemble",
                        lambda *args: assembled.append(args) or pytest.fail("reassembled"))
    x_buf = device.array(x)
    r_buf = device.array(r)
    copy = device.array

    def spy(data, *args, **kwargs):     # code and uniforms go through device.array too
        assert np.asarray(data).shape != wt.shape, "weights copied again"
        return copy(data, *args, **kwargs)

    monkeypatch.setattr(device, "array", spy)
    second = pointwise(x_buf, prepared, activation="relu", residual=r_buf, num_qpus=4)
    assert isinstance(second, Buffer) and second.device is device
    assert_close(second, *dense(x, wt, b, r, "relu"), 12)
    assert not assembled
    prepared.free()


def test_out_buffer_receives_the_result(device):
    x, wt, b, _ = tensors(2, 2, 5, 9, 33, True, False)
    out = device.alloc((2, 5, 33), np.float32)
    y = pointwise(x, wt, b, out=out, device=device, num_qpus=3)
    assert y is out
    assert_close(out, *dense(x, wt, b, None, None), 9)


def test_bias_at_call_with_prepared_weights(device):
    x, wt, b, _ = tensors(3, 2, 2, 7, 5, True, False)
    prepared = prepare_pointwise(wt, device=device)
    assert_close(pointwise(x, prepared, b, device=device, num_qpus=2),
                 *dense(x, wt, b, None, None), 7)


# -- errors: typed, naming the argument --------------------------------------------------------
def bad_call(device, **changes):
    x, wt, b, r = tensors(0, 2, 2, 4, 6, True, True)
    args = dict(x=x, w=wt, bias=b, activation=None, residual=r, device=device)
    args.update(changes)
    return pointwise(**args)


@pytest.mark.parametrize("changes,error,words", [
    (dict(activation="gelu"), LayerArgumentError, "activation"),
    (dict(x=np.zeros((4, 4), np.float32)), ShapeError, "x"),
    (dict(x=np.zeros((2, 2, 4), np.float64)), DtypeError, "x"),
    (dict(x=np.zeros((2, 2, 5), np.float32)), ShapeError, "channels"),
    (dict(w=np.zeros((4, 6), np.float64)), DtypeError, "w"),
    (dict(w=np.zeros(4, np.float32)), ShapeError, "w"),
    (dict(bias=np.zeros(5, np.float32)), ShapeError, "bias"),
    (dict(bias=[0.0] * 6), DtypeError, "bias"),
    (dict(residual=np.zeros((2, 2, 5), np.float32)), ShapeError, "residual"),
    (dict(residual=np.zeros((2, 6), np.float32)), ShapeError, "residual"),
    (dict(num_qpus=13), Vc4nnError, "num_qpus"),
    (dict(out=np.zeros((2, 2, 6), np.float32)), LayerArgumentError, "out"),
])
def test_bad_arguments(device, changes, error, words):
    with pytest.raises(error, match=words):
        bad_call(device, **changes)


def test_out_of_wrong_shape(device):
    with pytest.raises(ShapeError, match="out"):
        bad_call(device, out=device.alloc((2, 2, 5), np.float32))


def test_bias_twice(device):
    x, wt, b, _ = tensors(0, 2, 2, 4, 6, True, False)
    with pytest.raises(LayerArgumentError, match="bias"):
        pointwise(x, prepare_pointwise(wt, b, device=device), b, device=device)


def test_unknown_storage():
    for name in ("x_storage", "y_storage", "r_storage", "w_storage"):
        with pytest.raises(Vc4nnError, match=f"{name}='f16'"):
            kernel.PointwisePlan(1, 1, 1, 1, 1, **{name: "f16"})


# -- every pointwise layer of MobileNet v1 and v2 (generated and assembled, not run) -----------
def pointwise_plans(layers, num_qpus=12):
    return {kernel.PointwisePlan(l.height, l.width, l.cin, l.cout, num_qpus, True, l.residual,
                                 l.activation) for l in layers if l.kind == "pointwise"}


def test_mobilenet_224_programs_assemble():
    layers = mobilenet_shapes.mobilenet_v1() + mobilenet_shapes.mobilenet_v2()
    for plan in pointwise_plans(layers):
        first, main = kernel.programs_for(plan)
        assert main is not None and (first is not None) == plan.transposed


@pytest.mark.slow
def test_every_mobilenet_program_assembles():
    for plan in pointwise_plans([l for _, l in mobilenet_shapes.every_layer(("pointwise",))]):
        kernel.programs_for(plan)


@pytest.mark.parametrize("name", ["pw13", "b15.project"])
def test_mobilenet_layer_reduced(device, name):
    """A MobileNet layer with its channels and epilogue, on fewer pixels (the per-pixel work is
    the same; the full layers run in the slow set and the benchmark)."""
    layer = next(l for l in mobilenet_shapes.mobilenet_v1(0.25, 128)
                 + mobilenet_shapes.mobilenet_v2(0.25, 128) if l.name == name)
    run_case(device, 1, 3, layer.cin, layer.cout, 12, True, layer.residual, layer.activation)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pw1", "pw6", "pw13"])
def test_mobilenet_v1_layer_full(device, name):
    layer = next(l for l in mobilenet_shapes.mobilenet_v1() if l.name == name)
    run_case(device, layer.height, layer.width, layer.cin, layer.cout, 12, True, False, "relu6")


def test_pair_aliasing_takes_fewer_rows(device):
    """Cin = 128 on 12 QPUs, two-k gathers (6-vector panels): 8 pixels per QPU would put the
    pixels of the two QPUs sharing a TMU cache on the same sets (rows r and r + 8, 512 bytes
    apart); 4 per QPU avoid it."""
    plan = kernel.PointwisePlan(4, 24, 128, 16, 12, True, False, "relu6", panel_vectors=6)
    assert kernel.lines_per_set(sgemm_panel.PanelPlan(96, 16, 128, False, 12, True, True), 2) == 2
    assert plan.route[0] is False and plan.panel.rows == 4
    assert kernel.lines_per_set(plan.panel, 2) == 1
    run_case(device, 4, 24, 128, 16, 12, True, False, "relu6")


def test_pair_aliasing_with_single_k_gathers_keeps_the_rows():
    """8-vector panels gather one k at a time: two lines per set within a TMU pair are cheaper
    than halving the pixels per QPU (measurements in PointwisePlan._route)."""
    plan = kernel.PointwisePlan(56, 56, 128, 128, 12, True, False, "relu6")
    assert plan.vectors == 8 and plan.panel.gather_k == 1
    assert kernel.lines_per_set(plan.panel, 2) == 2
    assert plan.route == (False, sgemm_panel.MAX_ROWS) and plan.panel.rows == 6


@pytest.mark.parametrize("cin", [1, 8, 16])
def test_rows_on_one_line_do_not_alias(cin):
    """With Cin <= 16 a QPU's pixels share lines: nothing to route around (SGEMM's
    a_rows_per_set counts them as aliasing)."""
    plan = kernel.PointwisePlan(1, 16, cin, 16, 12)
    assert plan.route == (False, sgemm_panel.MAX_ROWS)


def test_result_in_place_of_the_residual(device):
    """out may be the residual's buffer (a runtime's in-place skip connection): each element's
    residual is read by the QPU that stores it, before it stores it, and the clamped gathers of
    a shifted edge panel never read columns this QPU already stored."""
    x, wt, b, r = tensors(9, 2, 7, 16, 100, True, True)
    res = device.array(r)
    y = pointwise(device.array(x), wt, b, "relu", residual=res, out=res, num_qpus=12)
    assert y is res
    assert_close(res, *dense(x, wt, b, r, "relu"), 16)


# Panel widths other than the default 6 vectors, each with its deepest chunk (PanelPlan): an
# edge panel shifted left (8 vectors, Cout 200 = 128 + 72), a narrow one (8 vectors, Cout 40),
# 4 vectors with 5-k-row chunks and single-k gathers, 12 vectors with 2-k-row chunks.
@pytest.mark.parametrize("vectors,h,w,cin,cout,num_qpus,activation", [
    (8, 2, 7, 33, 200, 12, "relu6"),
    (8, 3, 5, 16, 40, 4, None),
    (4, 2, 9, 21, 70, 12, "relu"),
    (12, 1, 13, 18, 200, 12, None),
])
def test_panel_widths(device, vectors, h, w, cin, cout, num_qpus, activation):
    x, wt, b, r = tensors(vectors, h, w, cin, cout, True, True)
    y = pointwise(x, wt, b, activation, r, device=device, num_qpus=num_qpus,
                  tiling={"panel_vectors": vectors})
    assert_close(y, *dense(x, wt, b, r, activation), cin)


def test_panel_width_limits():
    """A width whose chunks cannot fit the VPM is refused by the panel plan; k-rows too far
    apart for small-immediate read setups from k-row 1's count from a later k-row
    (tests/nn/test_pointwise_chunks.py)."""
    with pytest.raises(ValueError, match="VPM rows"):
        sgemm_panel.PanelPlan(96, 128, 64, False, 12, True, True, panel_vectors=8, chunk_depth=4)
    assert sgemm_panel.deepest_chunk(8, 12) == 3 and sgemm_panel.deepest_chunk(6, 12) == 4


# The weights gathered through the TMU by every QPU (panel_gather_b): V vectors x Kc k-rows
# split into 1 or 2 rows per QPU. 8 x 3 on 12 QPUs with a residual (47 accumulators: 5 rows)
# and a forced transpose, 2 x 4 on 4 QPUs, 1 x 1 and 2 x 1 on one QPU, 6 x 4 with two-k gathers
# and an odd K (lane_k), passes and panels enough that the k-rows' addresses step, end and
# reverse; each against the DMA loaders' path on the same shape.
@pytest.mark.parametrize("vectors,h,w,cin,cout,num_qpus,activation,transpose", [
    (8, 2, 7, 33, 256, 12, "relu6", None),
    (8, 7, 7, 40, 128, 12, None, True),
    (2, 3, 5, 19, 64, 4, "relu", None),
    (1, 2, 3, 7, 32, 1, None, None),
    (2, 1, 5, 6, 64, 1, "relu6", None),
    (6, 5, 9, 33, 192, 12, "relu", None),
])
def test_gathered_weights(device, vectors, h, w, cin, cout, num_qpus, activation, transpose):
    x, wt, b, r = tensors(vectors + cin, h, w, cin, cout, True, vectors == 8)
    for gather in (True, False):
        tiling = {"panel_vectors": vectors, "gather_weights": gather}
        if transpose is not None:
            tiling.update(transpose_input=transpose, max_rows=8)
        plan = kernel.PointwisePlan(h, w, cin, cout, num_qpus, True, r is not None, activation,
                                    **tiling)
        assert plan.gathers is gather
        y = pointwise(x, wt, b, activation, r, device=device, num_qpus=num_qpus, tiling=tiling)
        assert_close(y, *dense(x, wt, b, r, activation), cin)


def test_gathered_weights_limits():
    """gather_weights=None takes the TMU wherever the panel allows it; a panel whose chunk does
    not split into 1 or 2 vectors of one k-row per QPU, or with an edge panel, refuses it."""
    assert kernel.PointwisePlan(14, 14, 512, 512, 12, True).gathers
    assert not kernel.PointwisePlan(14, 14, 512, 200, 12, True).gathers     # edge panel
    with pytest.raises(ValueError, match="b_gather"):
        sgemm_panel.PanelPlan(96, 128, 64, False, 4, True, True, panel_vectors=8,
                              chunk_depth=3, b_gather=True)
    with pytest.raises(ValueError, match="b_gather"):
        sgemm_panel.PanelPlan(96, 200, 64, False, 12, True, True, panel_vectors=8,
                              chunk_depth=3, b_gather=True)


# The last pass with fewer rows per QPU (PanelPlan.last_rows): 196 pixels on 12 QPUs are
# passes of 6, 6 and 5 pixels per QPU with 8-vector panels; 100 pixels on 4 QPUs with 6-vector
# panels 7, 7, 7 and 4; against the same shape with every pass alike.
@pytest.mark.parametrize("h,w,cin,cout,num_qpus,vectors,rows", [
    (14, 14, 24, 128, 12, 8, (6, 5)),
    (10, 10, 9, 96, 4, 6, (7, 4)),
])
def test_balanced_passes(device, h, w, cin, cout, num_qpus, vectors, rows):
    x, wt, b, r = tensors(h + cin, h, w, cin, cout, True, False)
    for balance in (True, False):
        tiling = {"panel_vectors": vectors, "balance_passes": balance, "spread_rows": False}
        plan = kernel.PointwisePlan(h, w, cin, cout, num_qpus, True, False, "relu", **tiling)
        assert (plan.panel.rows, plan.panel.last_rows) == (rows if balance else rows[:1] * 2)
        y = pointwise(x, wt, b, "relu", device=device, num_qpus=num_qpus, tiling=tiling)
        assert_close(y, *dense(x, wt, b, None, "relu"), cin)


# The last pass's pixels past L x QPUs spread over the QPUs in pieces (PanelPlan.spread_rows,
# vc4nn/kernels/panel_spread.py): 7x7 on 12 QPUs as 4 pixels and one of pixel 48's 8 vectors
# (the default there), with channel-major x and two panels; 25 = 2 x 12 + 1; 9 = 2 x 4 + 1 with
# 2-vector panels (two QPUs compute a piece again, storing nothing); 14 = 12 + 2 pixels of 6
# vectors (two-k gathers, two k-rows of registers for the piece's setups, odd K); 14x14 in
# passes of 6, 6 and 4 pixels and pieces of 3 vectors (the row's last stores 2, its first
# vector computed again); 150 = 60 + 60 + 24 + 6 pixels in pieces of 4 vectors; each against
# the plain passes on the same shape.
@pytest.mark.parametrize("h,w,cin,cout,num_qpus,vectors,layout,activation,bias", [
    (7, 7, 40, 128, 12, 8, "hwc", "relu6", True),
    (7, 7, 33, 256, 12, 8, "chw", None, False),
    (5, 5, 26, 256, 12, 8, "hwc", "relu", True),
    (3, 3, 19, 64, 4, 2, "hwc", "relu6", True),
    (2, 7, 35, 96, 12, 6, "hwc", None, True),
    (14, 14, 27, 128, 12, 8, "chw", "relu6", True),
    (1, 150, 48, 256, 12, 8, "hwc", None, True),
])
def test_spread_rows(device, h, w, cin, cout, num_qpus, vectors, layout, activation, bias):
    x, wt, b, _ = tensors(h * w + cin, h, w, cin, cout, bias, False)
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    for spread in (True, False):
        tiling = {"panel_vectors": vectors, "gather_weights": True, "spread_rows": spread}
        plan = kernel.PointwisePlan(h, w, cin, cout, num_qpus, bias, False, activation,
                                    input_layout=layout, **tiling)
        assert plan.spreads is spread
        y = pointwise(xin, wt, b, activation, device=device, num_qpus=num_qpus,
                      tiling=tiling, x_layout=layout)
        assert_close(y, *dense(x, wt, b, None, activation), cin)


# spread_leaves: the pieces on the leaves only (PanelPlan.piece_qpus), the master and the relays
# running the last pass without one: 7x7 on 12 QPUs as 4 pixels each and one vector of pixel
# 48 on each of the 8 leaves; 27 = 2 x 12 + 3 pixels (pieces of 4 vectors, two leaves compute
# one again and store nothing); 14 = 12 + 2 pixels of 6 vectors on 7 leaves (two-k gathers, odd
# K); 14x14 in passes of 6, 6 and 4 pixels and pieces of 4 vectors; each against the pieces on
# every QPU.
@pytest.mark.parametrize("h,w,cin,cout,vectors,layout,activation,bias", [
    (7, 7, 40, 256, 8, "chw", "relu6", True),
    (3, 9, 33, 128, 8, "hwc", None, False),
    (2, 7, 35, 96, 6, "hwc", "relu", True),
    (14, 14, 27, 128, 8, "chw", "relu6", True),
])
def test_spread_leaves(device, h, w, cin, cout, vectors, layout, activation, bias):
    x, wt, b, _ = tensors(h * w + cin + 7, h, w, cin, cout, bias, False)
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    for leaves in (True, False):
        tiling = {"panel_vectors": vectors, "gather_weights": True, "spread_rows": True,
                  "spread_leaves": leaves}
        plan = kernel.PointwisePlan(h, w, cin, cout, 12, bias, False, activation,
                                    input_layout=layout, **tiling)
        assert plan.panel.spread_leaves is leaves
        y = pointwise(xin, wt, b, activation, device=device, num_qpus=12, tiling=tiling,
                      x_layout=layout)
        assert_close(y, *dense(x, wt, b, None, activation), cin)


def test_spread_leaves_limits():
    """Refused without spread_rows and where the leaves are fewer than the rows left over (4
    QPUs: the master and three relays, no leaf)."""
    for shape, tiling in [((7, 7, 64, 128, 12), {"spread_rows": False}),
                          ((3, 3, 19, 64, 4), {"panel_vectors": 2})]:
        with pytest.raises(ValueError, match="spread_leaves"):
            kernel.PointwisePlan(*shape, spread_leaves=True, gather_weights=True,
                                 **tiling).panel


# pair_gathers: x gathered two k at a time where the chunks hold 3 k-rows (8-vector panels), a
# gather spanning two chunks and the chunk loop's body two chunks: odd K (the last gather holds
# one k), K of one and two chunks, an odd number of chunks (the loop's body pairs them), panels
# running k backwards, channel-major and NHWC x, the pieces of spread rows on the leaves and
# on every QPU; each against single-k gathers on the same shape.
@pytest.mark.parametrize("h,w,cin,cout,layout,activation,bias,spread", [
    (7, 7, 40, 256, "chw", "relu6", True, True),
    (3, 9, 33, 384, "hwc", None, False, True),
    (2, 7, 3, 128, "chw", "relu", True, False),
    (1, 13, 6, 256, "hwc", "relu6", True, False),
    (14, 14, 27, 128, "chw", "relu6", True, True),
    (4, 6, 99, 128, "chw", None, True, False),
])
def test_pair_gathers(device, h, w, cin, cout, layout, activation, bias, spread):
    x, wt, b, _ = tensors(h * w + cin + 11, h, w, cin, cout, bias, False)
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    for pair in (True, False):
        tiling = {"panel_vectors": 8, "gather_weights": True, "spread_rows": spread,
                  "pair_gathers": pair}
        plan = kernel.PointwisePlan(h, w, cin, cout, 12, bias, False, activation,
                                    input_layout=layout, **tiling)
        assert plan.panel.gather_k == (2 if pair else 1)
        y = pointwise(xin, wt, b, activation, device=device, num_qpus=12, tiling=tiling,
                      x_layout=layout)
        assert_close(y, *dense(x, wt, b, None, activation), cin)


def test_pair_gathers_default_and_limits():
    """By default on the transposed route where the chunks hold an odd number of k-rows, the
    weights are gathered, the plan has one pass and the unpaired chunk loop does not share
    its body with the chunk after it as it is (pw13 in v1, not pw12: K = 512); not on the NHWC
    routes, whose aliasing rule counts lines per gather; refused with DMA'd weights and fp16 x
    (both use r1 at the chunk boundary)."""
    assert kernel.PointwisePlan(7, 7, 1024, 1024, 12, True, input_layout="chw").pairs
    assert kernel.PointwisePlan(7, 7, 1024, 1024, 12, True, False, "relu6").pairs  # transposed
    assert not kernel.PointwisePlan(7, 7, 512, 1024, 12, True, input_layout="chw").pairs
    assert not kernel.PointwisePlan(56, 56, 128, 128, 12, True, input_layout="chw").pairs
    assert not kernel.PointwisePlan(28, 28, 96, 256, 12, True).pairs                 # direct
    for tiling in [{"gather_weights": False}, {"x_storage": "fp16"}]:
        with pytest.raises(ValueError, match="pair_gathers"):
            kernel.PointwisePlan(14, 14, 256, 256, 12, input_layout="chw", panel_vectors=8,
                                 pair_gathers=True, **tiling).panel


@pytest.mark.parametrize("h,w,cin,layout", [(5, 5, 30, "chw"), (2, 9, 27, "hwc")])
def test_weights_gathered_in_shallower_chunks(device, h, w, cin, layout):
    """Where the deepest chunk's rows do not split into 1 or 2 per QPU (4-vector panels on 12
    QPUs: 5 k-rows of 4 vectors), the weights are gathered in the deepest chunk that does (3
    k-rows, one row per QPU) and that width is preferred to a DMA'd one: Cout = 64."""
    plan = kernel.PointwisePlan(h, w, cin, 64, 12, True, False, "relu6",
                                input_layout=layout).panel
    assert (plan.panel_vectors, plan.chunk_depth, plan.b_gather) == (4, 3, True)
    x, wt, b, _ = tensors(h * w * cin, h, w, cin, 64, True, False)
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    y = pointwise(xin, wt, b, "relu6", device=device, num_qpus=12, x_layout=layout)
    assert_close(y, *dense(x, wt, b, None, "relu6"), cin)


# park_rows: the last rows of each pass parked in spare registers and stored during the next
# pass's chunks (vc4nn/kernels/panel_park.py): 4-vector panels of 8 rows (16 spare registers)
# with 3 passes (the last of 5 rows), NHWC x on the direct route, odd K and more store slots
# than parked vectors (the last ones stored again), 2-vector panels with even chunks (one
# chunk per loop body) and all 6 rows parked; each against no parking on the same shape.
@pytest.mark.parametrize("h,w,cin,cout,vectors,layout,activation,bias,park", [
    (14, 14, 32, 64, 4, "chw", "relu6", True, 4),
    (10, 20, 30, 64, 4, "hwc", "relu", True, 2),
    (9, 13, 33, 64, 4, "chw", None, False, 3),
    (12, 12, 62, 32, 2, "chw", "relu6", True, 6),
])
def test_park_rows(device, h, w, cin, cout, vectors, layout, activation, bias, park):
    x, wt, b, _ = tensors(h * w + cin + 5, h, w, cin, cout, bias, False)
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    for rows in (park, 0):
        tiling = {"panel_vectors": vectors, "park_rows": rows}
        plan = kernel.PointwisePlan(h, w, cin, cout, 12, bias, False, activation,
                                    input_layout=layout, **tiling)
        assert plan.parks == rows and plan.panel.passes >= 2
        y = pointwise(xin, wt, b, activation, device=device, num_qpus=12, tiling=tiling,
                      x_layout=layout)
        assert_close(y, *dense(x, wt, b, None, activation), cin)


@pytest.mark.parametrize("h,w,cin", [(14, 14, 64), (16, 16, 62)])
def test_park_rows_with_fewer_rows(device, h, w, cin):
    """The default where the rows leave no register to park in and the store burst is long
    against the k steps (K = 64 into 8-vector panels, as pw2): 4 rows per QPU, 2 parked (the
    last pass of 1 or 2 rows)."""
    plan = kernel.PointwisePlan(h, w, cin, 128, 12, True, False, "relu6", input_layout="chw")
    assert (plan.panel.rows, plan.parks) == (4, 2)
    x, wt, b, _ = tensors(h * w + cin, h, w, cin, 128, True, False)
    y = pointwise(np.ascontiguousarray(x.transpose(2, 0, 1)), wt, b, "relu6", device=device,
                  num_qpus=12, x_layout="chw")
    assert_close(y, *dense(x, wt, b, None, "relu6"), cin)


def test_park_rows_default_and_limits():
    """By default where the next pass's store slots are about the parked vectors (pw1: 5 of 7
    rows, 20 slots for 20 vectors; pw2: 2 of 4 rows), not where they are many more
    (14x14x384->64: 126 slots) nor where the burst is short against the k steps (pw3);
    refused for more than one panel, more vectors than the registers left or the store slots,
    DMA'd weights, a residual and fewer than 2 passes."""
    plan = kernel.PointwisePlan(112, 112, 32, 64, 12, True, False, "relu6", input_layout="chw")
    assert (plan.panel.rows, plan.parks) == (7, 5)
    assert kernel.PointwisePlan(56, 56, 64, 128, 12, True, input_layout="chw").parks == 2
    assert kernel.PointwisePlan(56, 56, 128, 128, 12, True, input_layout="chw").parks == 0
    assert kernel.PointwisePlan(14, 14, 384, 64, 12, True, input_layout="chw").parks == 0
    for shape, tiling, why in [((14, 14, 32, 128, 12), {}, "not one panel"),
                               ((112, 112, 32, 64, 12), {"park_rows": 5}, "registers"),
                               ((14, 14, 23, 64, 12), {"park_rows": 4}, "slots"),
                               ((14, 14, 32, 64, 12), {"gather_weights": False}, "gathered"),
                               ((14, 14, 32, 64, 12), {"residual": True}, "residual"),
                               ((5, 5, 32, 64, 12), {}, "passes")]:
        with pytest.raises(ValueError, match=f"park_rows: .*{why}"):
            kernel.PointwisePlan(*shape, **dict({"park_rows": 2, "panel_vectors": 4},
                                                **tiling)).panel


def test_spread_rows_default_and_limits():
    """By default wherever the panel allows it (pw6-pw13: 14x14 and 7x7 on 12 QPUs); refused
    with a residual, fewer pixels than QPUs in the last pass, none left over, too few registers
    for the last pass's rows and piece (28x28: 5 rows of 8 vectors and a piece of 3), or DMA'd
    weights."""
    assert kernel.PointwisePlan(7, 7, 1024, 1024, 12, True, input_layout="chw").spreads
    assert kernel.PointwisePlan(7, 7, 512, 1024, 12, True, False, "relu6").spreads
    plan = kernel.PointwisePlan(14, 14, 512, 512, 12, True, input_layout="chw").panel
    assert plan.spread_rows and [rows for _, rows in plan.pass_blocks()] == [6, 6, 4]
    assert plan.spread_leaves and plan.piece_qpus == (4, 8) and plan.piece_vectors == 4
    assert not kernel.PointwisePlan(7, 7, 512, 1024, 12, True, True).spreads   # a residual
    assert not kernel.PointwisePlan(28, 28, 256, 256, 12, True, input_layout="chw").spreads
    for shape, tiling in [((1, 5, 64, 128, 12), {}), ((2, 12, 64, 128, 12), {}),
                          ((28, 28, 256, 256, 12), {"input_layout": "chw", "panel_vectors": 8}),
                          ((7, 7, 64, 128, 12), {"gather_weights": False})]:
        with pytest.raises(ValueError, match="spread_rows"):
            kernel.PointwisePlan(*shape, spread_rows=True, **tiling).panel
