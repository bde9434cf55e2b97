"""pointwise with fp16 weights (channel-pair words widened to float32 in the VPM by the
loaders, vc4nn/kernels/panel_halves.py) and fp16 activations x, residual and result
(vc4nn/kernels/panel_act_halves.py), against a float64 einsum on the same half values."""

import numpy as np
import pytest

from vc4nn.errors import Vc4nnError
from vc4nn.kernels import panel_halves
from vc4nn.nn import pointwise, prepare_pointwise
from vc4nn.nn.layer_args import DtypeError

from .reference import assert_close, assert_close_fp16, dense


def normal_halves(rng, shape):
    """Random float16 values, none of them a half denormal: the unpack reads those as 0
    (docs/kernels.md "fp16 storage"), which ``test_denormal_weights_read_as_zero`` pins."""
    w = rng.standard_normal(shape).astype(np.float16)
    return np.where(np.abs(w) < 2.0 ** -14, np.float16(2.0 ** -14), w)


# h, w, cin, cout, QPUs, bias, residual, activation, tiling: Cin / Cout not multiples of 16 or
# 32 (17, 33: a last block whose high half is past Cout), 1 and 12 QPUs, each panel width with
# an edge panel (100 = 96 + 4, 300 = 2 x 128 + 44, 72 = 64 + 8), both routes.
CASES = [
    (3, 5, 17, 33, 12, True, False, "relu6", None),
    (3, 5, 33, 17, 1, False, True, None, None),
    (2, 9, 64, 100, 12, True, True, "relu", {"panel_vectors": 6}),
    (2, 9, 40, 300, 12, True, False, None, {"panel_vectors": 8}),
    (3, 3, 24, 72, 4, False, False, "relu6", {"panel_vectors": 4}),
    (4, 6, 48, 160, 12, True, True, "relu6", {"transpose_input": True}),
    (4, 6, 48, 40, 1, True, False, None, {"transpose_input": True}),
]


@pytest.mark.parametrize("h, w, cin, cout, qpus, bias, residual, activation, tiling", CASES,
                         ids=str)
def test_fp16_weights(device, h, w, cin, cout, qpus, bias, residual, activation, tiling):
    rng = np.random.default_rng(cin * cout)
    x = rng.standard_normal((h, w, cin)).astype(np.float32)
    wt = normal_halves(rng, (cin, cout))
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    r = rng.standard_normal((h, w, cout)).astype(np.float32) if residual else None
    y = pointwise(x, wt, b, activation, r, device=device, num_qpus=qpus, tiling=tiling)
    assert_close(y, *dense(x, wt, b, r, activation), cin)


# fp16 activations: h, w, cin, cout, QPUs, bias, residual, activation, tiling, storage of x, y,
# residual, w. Odd pixel counts (15, 21, 7), Cin / Cout not multiples of 16 or 32, 1 / 4 / 12
# QPUs, each panel width with an edge panel (101 = 96 + 5: the shifted edge window's stored part
# starts at an odd half), both routes: direct with two-k gathers (even chunk depths) and one-k
# gathers (8 vectors x 3 k-rows, whose gather step of one half flips the half bit), transposed
# (M = 15: a k step of an odd number of halves), and every mix of storages.
HALF_CASES = [
    (3, 5, 17, 33, 12, True, False, "relu6", None, "fp16", "fp16", "fp32", "fp32"),
    (3, 7, 33, 17, 1, False, True, None, None, "fp16", "fp16", "fp16", "fp16"),
    (2, 9, 64, 101, 12, True, True, "relu", {"panel_vectors": 6}, "fp16", "fp16", "fp16", "fp32"),
    (2, 9, 40, 300, 12, True, False, None, {"panel_vectors": 8}, "fp16", "fp16", "fp32", "fp16"),
    (3, 3, 24, 72, 4, False, True, "relu6", {"panel_vectors": 4}, "fp16", "fp16", "fp16", "fp32"),
    (4, 6, 48, 160, 12, True, True, "relu6", {"transpose_input": True},
     "fp16", "fp16", "fp16", "fp16"),
    (3, 5, 33, 130, 12, True, True, None, {"transpose_input": True, "panel_vectors": 8},
     "fp16", "fp16", "fp16", "fp32"),
    (1, 7, 17, 40, 1, True, False, "relu", {"transpose_input": True},
     "fp16", "fp16", "fp32", "fp32"),
    (1, 7, 17, 20, 4, False, True, None, {"transpose_input": True}, "fp16", "fp32", "fp32", "fp32"),
    (3, 5, 33, 100, 12, True, True, "relu", {"panel_vectors": 6}, "fp32", "fp16", "fp32", "fp16"),
    (3, 5, 33, 100, 12, True, True, None, {"panel_vectors": 6}, "fp32", "fp32", "fp16", "fp32"),
    (3, 5, 33, 100, 12, True, True, "relu6", None, "fp16", "fp32", "fp16", "fp16"),
    (3, 5, 33, 100, 12, False, True, "relu6", {"panel_vectors": 6}, "fp16", "fp16", "fp32",
     "fp16"),
]
DTYPES = {"fp16": np.float16, "fp32": np.float32}


@pytest.mark.parametrize(
    "h, w, cin, cout, qpus, bias, residual, activation, tiling, xs, ys, rs, ws", HALF_CASES,
    ids=str)
def test_fp16_activations(device, h, w, cin, cout, qpus, bias, residual, activation, tiling, xs,
                          ys, rs, ws):
    rng = np.random.default_rng(cin * cout + h)
    x = rng.standard_normal((h, w, cin)).astype(DTYPES[xs])
    wt = rng.standard_normal((cin, cout)).astype(DTYPES[ws])
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    r = rng.standard_normal((h, w, cout)).astype(DTYPES[rs]) if residual else None
    y = pointwise(x, wt, b, activation, r, device=device, num_qpus=qpus, tiling=tiling,
                  dtype=DTYPES[ys])
    check = assert_close_fp16 if ys == "fp16" else assert_close
    check(y, *dense(x, wt, b, r, activation), cin)


def test_fp16_activation_device_buffers(device):
    """Device buffers in (float16 x and residual, an float16 ``out`` view starting at an odd
    half), a device buffer out; the result's dtype follows x when neither out nor dtype says."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 3, 24)).astype(np.float16)
    wt = rng.standard_normal((24, 40)).astype(np.float32)
    r = rng.standard_normal((5, 3, 40)).astype(np.float16)
    arena = device.alloc(1 + 5 * 3 * 40, np.float16)
    out = arena[1:].reshape(5, 3, 40)
    y = pointwise(device.array(x), prepare_pointwise(wt, device=device), activation="relu",
                  residual=device.array(r), out=out, device=device)
    assert y is out
    assert_close_fp16(np.asarray(out), *dense(x, wt, None, r, "relu"), 24)
    assert pointwise(x, wt, device=device).dtype == np.float16


def test_prepared_fp16_weights_are_half_the_bytes(device):
    """A prepared float16 weight table holds half the bytes (Cout a multiple of 32), a float16
    bias is widened, and the layer reads the halves (an fp16-rounded weight is not widened on
    the host: compare against the rounded values, not the float32 ones)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 20)).astype(np.float32)
    w32 = rng.standard_normal((20, 64)).astype(np.float32) + np.float32(1e-3)
    w16 = w32.astype(np.float16)
    bias = rng.standard_normal(64).astype(np.float16)
    p32, p16 = prepare_pointwise(w32, device=device), prepare_pointwise(w16, bias, device=device)
    assert p16.weights.nbytes * 2 == p32.weights.nbytes and p16.w_storage == "fp16"
    y = pointwise(x, p16, device=device)
    assert_close(y, *dense(x, w16, bias, None, None), 20)
    assert not np.allclose(y, dense(x, w32, bias, None, None)[0], rtol=1e-5, atol=1e-5)
    p32.free()
    p16.free()


def test_denormal_weights_read_as_zero(device):
    """Half denormals unpack to 0 (docs/kernels.md "fp16 storage"): a weight of 2**-20 adds
    nothing, a weight of 2**-14 (the smallest normal half) does."""
    x = np.full((1, 1, 2), 1024.0, np.float32)
    w = np.array([[2.0 ** -20, 2.0 ** -14]] * 2, np.float16)
    y = pointwise(x, w, device=device, num_qpus=1)
    np.testing.assert_array_equal(y.reshape(-1), [0.0, 2 * 1024 * 2.0 ** -14])


def test_channel_pair_layout():
    """Word i of a 32-column block holds column i in bits 15:0 and column i + 16 in 31:16."""
    w = np.arange(2 * 40, dtype=np.float16).reshape(2, 40)
    words = panel_halves.lay_out(w).view(np.uint32)
    assert words.shape == (2, 32)
    bits = w.view(np.uint16).astype(np.uint32)
    assert words[1, 3] == bits[1, 3] | bits[1, 19] << 16
    assert words[0, 16 + 5] == bits[0, 32 + 5]          # column 53 is padding: 0


def test_bad_fp16_arguments(device):
    x = np.zeros((2, 2, 4), np.float32)
    with pytest.raises(DtypeError, match="x has dtype float64"):
        pointwise(np.zeros((2, 2, 4)), np.zeros((4, 6), np.float32), device=device)
    with pytest.raises(DtypeError, match="residual has dtype int32"):
        pointwise(x, np.zeros((4, 6), np.float32), residual=np.zeros((2, 2, 6), np.int32),
                  device=device)
    with pytest.raises(DtypeError, match="dtype"):
        pointwise(x, np.zeros((4, 6), np.float32), dtype=np.float64, device=device)
    with pytest.raises(DtypeError, match="w has dtype float64"):
        prepare_pointwise(np.zeros((4, 6)), device=device)
    with pytest.raises(DtypeError, match="bias"):
        pointwise(x, prepare_pointwise(np.zeros((4, 6), np.float16), device=device),
                  np.zeros(6, np.float16), device=device)
    with pytest.raises(Vc4nnError, match="panel_vectors"):
        pointwise(x, np.zeros((4, 200), np.float16), device=device,
                  tiling={"panel_vectors": 5})


# fp16 weights gathered through the TMU (panel_gather_b: one channel-pair block per QPU per
# chunk, widened into the chunk buffer by every QPU, none on the barrier's path): 8- and
# 6-vector panels (one-k and two-k gathers of A), two panels (the second runs k backwards), an
# odd K, two passes, the transposed route, float32 and half activations, results and
# residuals; each against the DMA loaders' path on the same shape. h, w, cin, cout, bias,
# residual, activation, tiling, storage of x, y, residual.
GATHERED = [
    (2, 9, 33, 256, True, False, "relu6", {"panel_vectors": 8}, "fp32", "fp32", "fp32"),
    (3, 7, 40, 192, True, True, "relu", {"panel_vectors": 6}, "fp16", "fp16", "fp16"),
    (7, 7, 64, 128, False, False, None, {"panel_vectors": 8, "transpose_input": True},
     "fp16", "fp32", "fp32"),
    (9, 9, 24, 128, True, True, "relu6", {"panel_vectors": 8}, "fp32", "fp16", "fp32"),
    # one row per QPU (4 vectors x 3 k-rows on 12 QPUs): QPUs 2i and 2i + 1 share block i
    (3, 7, 34, 64, True, False, "relu6", {"panel_vectors": 4, "chunk_depth": 3}, "fp16", "fp16",
     "fp32"),
    (5, 5, 33, 128, False, False, None, {"panel_vectors": 4, "transpose_input": True},
     "fp32", "fp32", "fp32"),
]


@pytest.mark.parametrize("h, w, cin, cout, bias, residual, activation, tiling, xs, ys, rs",
                         GATHERED, ids=str)
def test_fp16_weights_gathered(device, h, w, cin, cout, bias, residual, activation, tiling, xs,
                               ys, rs):
    from vc4nn.kernels.pointwise import PointwisePlan
    rng = np.random.default_rng(cin * cout + w)
    x = rng.standard_normal((h, w, cin)).astype(DTYPES[xs])
    wt = normal_halves(rng, (cin, cout))
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    r = rng.standard_normal((h, w, cout)).astype(DTYPES[rs]) if residual else None
    check = assert_close_fp16 if ys == "fp16" else assert_close
    for gather in (True, False):
        options = dict(tiling, gather_weights=gather)
        plan = PointwisePlan(h, w, cin, cout, 12, bias, residual, activation, xs, ys, rs,
                             "fp16", **options)
        assert plan.gathers is gather and plan.panel.b_halves
        if gather:
            assert plan.panel.b_rows == (1 if tiling["panel_vectors"] == 4 else 2)
        y = pointwise(x, wt, b, activation, r, device=device, num_qpus=12, tiling=options,
                      dtype=DTYPES[ys])
        check(y, *dense(x, wt, b, r, activation), cin)


@pytest.mark.parametrize("h, w, cin, cout", [(7, 7, 40, 256), (2, 7, 35, 96)], ids=str)
def test_fp16_weights_spread_rows(device, h, w, cin, cout):
    """Gathered fp16 weights with the last pass's leftover pixels in pieces (panel_spread):
    7x7 (one vector of pixel 48 per QPU, two panels) and 14 = 12 + 2 pixels of 6 vectors."""
    from vc4nn.kernels.pointwise import PointwisePlan
    rng = np.random.default_rng(cin + cout)
    x = rng.standard_normal((h, w, cin)).astype(np.float32)
    wt = normal_halves(rng, (cin, cout))
    b = rng.standard_normal(cout).astype(np.float32)
    for spread in (True, False):
        plan = PointwisePlan(h, w, cin, cout, 12, True, False, "relu6", w_storage="fp16",
                             gather_weights=True, spread_rows=spread)
        assert plan.spreads is spread and plan.gathers
        y = pointwise(x, wt, b, "relu6", device=device, num_qpus=12,
                      tiling={"gather_weights": True, "spread_rows": spread})
        assert_close(y, *dense(x, wt, b, None, "relu6"), cin)


# The leftover pixels in pieces (panel_spread) with fp16 x and / or y: 7x7 channel-major (M = 49:
# a k step of an odd number of halves, one vector of pixel 48 per leaf, two panels), 14 = 12 + 2
# pixels of 6 vectors (two-k gathers, odd K, a row's pieces of 3 vectors), 14x14 channel-major
# in passes of 6, 6 and 4 pixels (pieces of 4 vectors, the row's first computed again), 27 = 2 x
# 12 + 3 pixels on every QPU (two compute a piece again and store nothing); each against the
# plain passes.
@pytest.mark.parametrize("h, w, cin, cout, vectors, layout, leaves, xs, ys", [
    (7, 7, 40, 256, 8, "chw", True, "fp16", "fp16"),
    (2, 7, 35, 96, 6, "hwc", True, "fp16", "fp16"),
    (14, 14, 27, 128, 8, "chw", True, "fp16", "fp32"),
    (3, 9, 33, 128, 8, "hwc", False, "fp32", "fp16"),
], ids=str)
def test_fp16_activations_spread_rows(device, h, w, cin, cout, vectors, layout, leaves, xs, ys):
    from vc4nn.kernels.pointwise import PointwisePlan
    rng = np.random.default_rng(cin + cout + h)
    x = rng.standard_normal((h, w, cin)).astype(DTYPES[xs])
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    wt = normal_halves(rng, (cin, cout))
    b = rng.standard_normal(cout).astype(np.float32)
    check = assert_close_fp16 if ys == "fp16" else assert_close
    for spread in (True, False):
        tiling = {"panel_vectors": vectors, "gather_weights": True, "spread_rows": spread}
        if spread:
            tiling["spread_leaves"] = leaves
        plan = PointwisePlan(h, w, cin, cout, 12, True, False, "relu6", xs, ys, "fp32", "fp16",
                             input_layout=layout, **tiling)
        assert plan.spreads is spread and plan.panel.a_halves is (xs == "fp16")
        y = pointwise(xin, wt, b, "relu6", device=device, num_qpus=12, tiling=tiling,
                      x_layout=layout, dtype=DTYPES[ys])
        check(y, *dense(x, wt, b, None, "relu6"), cin)


# park_rows (panel_park) with fp16 y: parked vectors packed, into regfile-A park registers
# directly and into regfile-B ones through the store's pack register (12x12 with 2-vector
# panels parks on both); with fp16 x, fp16 weights gathered one row per QPU (4-vector panels in
# chunks of 3 k-rows), NHWC and channel-major x, odd K; each against no parking.
@pytest.mark.parametrize("h, w, cin, cout, vectors, layout, activation, park, xs, ys, ws", [
    (14, 14, 32, 64, 4, "chw", "relu6", 4, "fp16", "fp16", "fp16"),
    (10, 20, 30, 64, 4, "hwc", "relu", 2, "fp16", "fp16", "fp32"),
    (9, 13, 33, 64, 4, "chw", None, 3, "fp32", "fp16", "fp16"),
    (12, 12, 62, 32, 2, "chw", "relu6", 6, "fp16", "fp16", "fp16"),
    (14, 14, 32, 64, 4, "chw", "relu6", 4, "fp16", "fp32", "fp16"),
], ids=str)
def test_fp16_park_rows(device, h, w, cin, cout, vectors, layout, activation, park, xs, ys, ws):
    from vc4nn.kernels.pointwise import PointwisePlan
    rng = np.random.default_rng(cin + cout + w)
    x = rng.standard_normal((h, w, cin)).astype(DTYPES[xs])
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    wt = rng.standard_normal((cin, cout)).astype(DTYPES[ws])
    b = rng.standard_normal(cout).astype(np.float32)
    check = assert_close_fp16 if ys == "fp16" else assert_close
    for rows in (park, 0):
        tiling = {"panel_vectors": vectors, "park_rows": rows}
        plan = PointwisePlan(h, w, cin, cout, 12, True, False, activation, xs, ys, "fp32", ws,
                             input_layout=layout, **tiling)
        assert plan.parks == rows and plan.panel.passes >= 2
        y = pointwise(xin, wt, b, activation, device=device, num_qpus=12, tiling=tiling,
                      x_layout=layout, dtype=DTYPES[ys])
        check(y, *dense(x, wt, b, None, activation), cin)


# fp16 x one gather ahead where that lets the chunk after the chunk loop run the loop's body
# plainly (panel_kloop.gathers_ahead; K = 1 more than a multiple of 3 in chunks of 3 k-rows,
# as v1's pw2, pw5, pw6, pw13): NHWC x (one-k gathers step one half: bit 1 flips every gather)
# and channel-major x (odd H*W); float32 x keeps 2 ahead on the same shape.
@pytest.mark.parametrize("h, w, cin, cout, vectors, layout", [
    (2, 9, 40, 128, 8, "hwc"),
    (3, 5, 34, 64, 4, "chw"),
    (5, 5, 46, 128, 8, "chw"),
], ids=str)
def test_fp16_activations_one_gather_ahead(device, h, w, cin, cout, vectors, layout):
    from vc4nn.kernels.panel_kloop import gathers_ahead, shared_chunk
    from vc4nn.kernels.pointwise import PointwisePlan
    rng = np.random.default_rng(cin + cout + w)
    x = rng.standard_normal((h, w, cin)).astype(np.float16)
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    wt = normal_halves(rng, (cin, cout))
    b = rng.standard_normal(cout).astype(np.float32)
    tiling = {"panel_vectors": vectors, "gather_weights": True, "chunk_depth": 3}
    for xs in ("fp16", "fp32"):
        panel = PointwisePlan(h, w, cin, cout, 12, True, False, "relu6", xs, "fp16", "fp32",
                              "fp16", input_layout=layout, **tiling).panel
        if xs == "fp16":
            assert (gathers_ahead(panel), shared_chunk(panel)) == (1, "plain")
        else:                       # quiet, or (channel-major) two k per gather
            assert gathers_ahead(panel) == 2 and shared_chunk(panel) != "plain"
    y = pointwise(xin, wt, b, "relu6", device=device, num_qpus=12, tiling=tiling,
                  x_layout=layout, dtype=np.float16)
    assert_close_fp16(y, *dense(x, wt, b, None, "relu6"), cin)


def test_fp16_parking_default():
    """Rows are parked by default where a pass's store burst (halves: half a float32 row's
    cost) is at least MIN_PARK_BURST of its k steps: pw1 in fp16 as in float32 (7 rows, 5
    parked in chunks of 3 k-rows; fp16 by default in chunks of 6, all 6 rows parked:
    test_pointwise_chunks), pw2 in float32 (4 rows, 2 parked) but not in fp16 (6 rows, a
    burst of 0.29)."""
    from vc4nn.kernels.pointwise import PointwisePlan

    def plan(shape, storage, **tiling):
        return PointwisePlan(*shape, 12, True, False, "relu6", storage, storage, "fp32",
                             storage, **tiling).panel

    for storage in ("fp32", "fp16"):
        pw1 = plan((112, 112, 32, 64), storage, chunk_depth=3)
        assert (pw1.rows, pw1.park_rows) == (7, 5)
    fp32, fp16 = plan((56, 56, 64, 128), "fp32"), plan((56, 56, 64, 128), "fp16")
    assert (fp32.rows, fp32.park_rows) == (4, 2) and (fp16.rows, fp16.park_rows) == (6, 0)
