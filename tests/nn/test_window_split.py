"""Split accumulators in the depthwise kernel (docs/kernels.md "Split accumulators"): at stride 1
the newest output row's accumulators live on regfile B and the window's top-row weights on
regfile A, so three rows of up to 14 columns are in flight. Against the direct float64 loop of
tests/nn/spatial_reference.py, with every dynamic check of the emulator raising."""

import numpy as np
import pytest

from asm.disasm import disassemble
from vc4nn.kernels.spatial import PlanError
from vc4nn.kernels.window import program_for
from vc4nn.kernels.window_plan import make_plan
from vc4nn.nn import depthwise, prepare_depthwise
from vc4nn.nn.layer_args import resolve_padding

from . import spatial_reference
from .reference import assert_close, assert_close_fp16

F16, F32 = np.float16, np.float32

# (H, W, C, padding, activation, bias, QPUs, storage, layout, tiling): one strip as wide as the
# image (both edges in one variant), strips with interior variants and a 1-column last one,
# every padding form, partial channel blocks, one and several QPUs, odd chunk counts (the
# buffers' registers swapped), tiles shorter than the image (ramp-up rows not stored), both
# storages and layouts, all 42 accumulators in use.
CASES = [
    (9, 14, 16, "same", "relu6", True, 3, "fp32", "chw", {}),
    (7, 14, 33, "same", None, False, 12, "fp32", "hwc", dict(tile_rows=3, in_chunk=3)),
    (6, 29, 17, (1, 1, 1, 1), "relu", True, 4, "fp32", "chw", dict(tile_cols=14, in_chunk=5)),
    (8, 30, 16, "valid", "relu6", True, 1, "fp32", "hwc", dict(tile_cols=12, out_chunk=5)),
    (5, 13, 19, (0, 2, 1, 0), None, True, 2, "fp32", "chw", dict(tile_cols=13, in_chunk=1)),
    (9, 14, 16, "same", "relu6", True, 3, "fp16", "chw", {}),
    (6, 28, 48, "same", "relu", True, 5, "fp16", "hwc", dict(tile_rows=2, in_chunk=3)),
    (7, 15, 17, (1, 0, 0, 1), None, False, 2, "fp16", "chw", dict(tile_cols=14, out_chunk=9)),
    (6, 14, 16, "same", "relu6", True, 2, "fp16", "hwc", dict(in_chunk=1)),
    (5, 14, 32, (0, 1, 1, 1), "relu6", True, 4, "fp16", "chw", dict(in_chunk=4, tile_rows=2)),
]


def run_case(device, case, prepared=False):
    h, w, c, padding, activation, with_bias, qpus, storage, layout, tiling = case
    dtype = F16 if storage == "fp16" else F32
    rng = np.random.default_rng(h * w + c)
    x = rng.standard_normal((h, w, c)).astype(dtype)
    wt = rng.standard_normal((3, 3, c)).astype(dtype)
    bias = rng.standard_normal(c).astype(dtype) if with_bias else None
    weights, b = (prepare_depthwise(wt, bias, device=device), None) if prepared else (wt, bias)
    y, run = depthwise(x, weights, b, stride=1, padding=padding, activation=activation,
                       device=device, num_qpus=qpus, out_layout=layout, return_run=True,
                       tiling=dict(tiling, split_accumulators=1))
    if prepared:
        weights.free()
    assert y.dtype == dtype
    pads, _ = resolve_padding("test", padding, h, w, 3, 3, 1, 1)
    expected, magnitude = spatial_reference.depthwise(x, wt, bias, 1, pads, activation)
    if layout == "chw":
        expected = np.moveaxis(expected, 2, 0)
        magnitude = np.moveaxis(magnitude, 2, 0) if np.ndim(magnitude) == 3 else magnitude
    (assert_close_fp16 if storage == "fp16" else assert_close)(y, expected, magnitude, terms=9)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_split_accumulators_match_the_direct_loop(device, case):
    run_case(device, case)


def test_split_accumulators_with_prepared_weights(device):
    """Prepared weights: the top row's three go to regfile A, the bias to regfile B."""
    run_case(device, (6, 14, 32, "same", "relu6", True, 2, "fp32", "chw", {}), prepared=True)


def test_fp16_vector_reads_ride_beside_the_top_row():
    """fp16 split accumulators: a chunk's next vector is read into ra31 in the ADD ALU of the
    top row's first multiply (the slot the pending add, reading regfile A, left free), so only
    a chunk's first read takes an instruction of its own (11 instructions per column, not 12)."""
    plan = make_plan("depthwise", 14, 14, 512, (3, 3), (1, 1), (1, 1, 1, 1), "relu6",
                     in_storage="fp16", out_storage="fp16", w_storage="fp16", out_layout="chw")
    assert (plan.split_accumulators, plan.variants[0].hi - plan.variants[0].lo) == (1, 14)
    program = program_for(plan)
    start, end = program.labels["loop0"], program.labels["zero_0_0"]
    lines = [line.split("#")[0].strip() for line in disassemble(program.words).splitlines()
             if line.startswith("    ")][start // 8:end // 8]
    reads = [line for line in lines if line.startswith("mov ra31, vpm")]
    chunks = len(plan.chunks(plan.variants[0]))
    assert len(reads) == 14
    assert sum(";" not in line for line in reads) == chunks
    assert all("fmul" in line and "ra28" in line for line in reads if ";" in line)


def plan(h=28, w=28, stride=1, **options):
    return make_plan("depthwise", h, w, 64, (3, 3), (stride, stride), (1, 1, 1, 1), "relu6", 12,
                     **options)


def test_split_accumulators_are_the_default_where_they_widen_the_strips():
    """14-column strips where they are fewer than 10-column ones (28, 14, 12 columns), not where
    they are as many (7, 20 columns); never at stride 2, with channel pairs or unrolled loops,
    nor (by default) for fp16 NHWC plans."""
    for w, cols in ((28, 14), (14, 14), (12, 12), (112, 14)):
        wide = plan(w=w)
        assert (wide.split_accumulators, wide.tile_cols, wide.rolled) == (1, cols, 1)
    half = plan(in_storage="fp16", out_storage="fp16", out_layout="chw")
    assert (half.split_accumulators, half.tile_cols) == (1, 14)
    for narrow in (plan(w=7), plan(w=20), plan(stride=2), plan(rolled=0),
                   plan(in_storage="fp16", out_storage="fp16", w_storage="fp16"),
                   plan(in_storage="fp16", out_storage="fp16")):
        assert narrow.split_accumulators == 0
        assert narrow.tile_cols <= 10 or narrow.stride_h == 2


def test_split_accumulators_are_refused_where_they_cannot_be():
    for options in (dict(stride=2), dict(rolled=0),
                    dict(in_storage="fp16", out_storage="fp16", w_storage="fp16",
                         channel_pairs=1)):
        with pytest.raises(PlanError, match="split_accumulators"):
            plan(split_accumulators=1, **options)
    with pytest.raises(PlanError, match="split_accumulators"):
        make_plan("avg_pool", 14, 14, 16, (3, 3), (1, 1), (1, 1, 1, 1), split_accumulators=1)
    with pytest.raises(PlanError, match="split_accumulators=2"):
        plan(split_accumulators=2)
