"""Run one MobileNet layer on a device and set its time against the arithmetic peak and the
memory roofline: the record behind `vc4nn bench-layers` (tools/bench_layers.py), `vc4nn tune`
and the per-layer table of docs/kernels.md.

Every clock figure is an ESTIMATE of the emulator's cycle model (docs/cycle-model.md) at the
device's board clock. Inputs are random (seeded): these kernels' timing does not depend on the
values. Kernel times exclude the launch overhead (``launches`` x the timing table's
``launch_overhead``), which is reported separately.

A layer can be run *reduced* (``Reduction``): a pointwise layer on fewer pixels (a 1 x P input:
the panel kernel runs the same passes of rows x QPUs over the whole weight matrix, only fewer of
them), a spatial layer on fewer input rows (same width and channels: the same tiles, fewer tile
rows). The record then holds the reduced run's figures and the factor that scales its time to
the full layer (full work / reduced work), and says so (``scale`` != 1, ``run_shape``).
"""

import dataclasses

import numpy as np

from ..errors import Vc4nnError
from ..kernels.common import LANES
from .conv2d import conv2d
from .depthwise import depthwise
from .elementwise import add
from .fully_connected import fully_connected, prepare_fully_connected
from .global_pool import global_avg_pool
from .storage import DTYPE_OF_STORAGE, FP16_INPUT, FP16_LAYERS, FP16_RESULT, FP16_WEIGHTS
from .layer_plans import plan_for, resolved_tiling
from .pointwise import pointwise, prepare_pointwise
from .stall_groups import BOUND_GROUPS

FLOPS_PER_QPU_CLOCK = 8     # 16 lanes x (multiply + add) every 4 clocks (facts §4)
DMA_ROW_BYTES = LANES * 4   # the longest DMA row (16 words): the roofline moves whole rows
KINDS = ("conv2d", "depthwise", "pointwise", "global_avg_pool", "fully_connected", "add")


@dataclasses.dataclass(frozen=True)
class Reduction:
    """How much of a layer to run: ``pixels`` caps a pointwise layer's pixels, ``rows`` a
    spatial layer's output rows (0: the full layer)."""

    pixels: int = 0
    rows: int = 0

    @property
    def full(self):
        return not self.pixels and not self.rows


FULL = Reduction()


@dataclasses.dataclass
class LayerFigures:
    """One layer's figures on one board. ``clocks``: of the run (the reduced one when ``scale``
    != 1); every time below is scaled to the full layer."""

    name: str
    kind: str
    shape: str                  # the full layer, e.g. "112x112x32->64 s1"
    run_shape: str              # what ran, e.g. "1x192x32->64"
    scale: float                # full layer / what ran (1.0: the full layer ran)
    flops: int                  # of the full layer
    bytes_loaded: int           # of the full layer: inputs, weights, bias, residual once
    bytes_stored: int
    roofline_clocks: int        # the full layer's bytes at the model's DMA row rates
    clocks: int                 # of the run
    board: str
    clock_hz: float
    num_qpus: int
    launches: int
    launch_overhead_s: float    # per launch (timing table), NOT in the times below
    shares: dict                # share of QPU time per cause (issue, tmu, dma, ..., idle)
    tiling: dict                # the plan's tiling fields as run
    plan: str = "default"       # "default", "tuned" (from the cache) or "explicit"
    storage: str = "fp32"       # of activations and weights as run
    layout: str = "hwc"         # "chw": handed over channel-major (vc4nn/nn/handoff.py)
    bus_clocks: object = None   # of the run: clocks the memory bus was busy (None: unknown)

    @property
    def full_clocks(self):
        return self.clocks * self.scale

    @property
    def seconds(self):
        return self.full_clocks / self.clock_hz

    @property
    def gflops(self):
        return self.flops / self.seconds / 1e9

    @property
    def bytes_moved(self):
        return self.bytes_loaded + self.bytes_stored

    @property
    def peak_share(self):
        return self.flops / (self.full_clocks * self.num_qpus * FLOPS_PER_QPU_CLOCK)

    @property
    def roofline_share(self):
        """Roofline time / modelled time: 1.0 = the memory bus never idles."""
        return self.roofline_clocks / self.full_clocks

    @property
    def bus_share(self):
        """Share of the run the memory bus was busy, or None. Near 1 a layer is bound by the
        bus whatever its QPUs' shares say: few QPUs issuing most of the time can keep it busy
        (their instructions overlap the DMA in flight)."""
        return None if self.bus_clocks is None else self.bus_clocks / self.clocks

    @property
    def bound(self):
        """The group of causes that took most of the QPUs' time."""
        groups = {name: sum(self.shares.get(c, 0.0) for c in causes)
                  for name, causes in BOUND_GROUPS}
        return max(groups, key=groups.get)

    def as_dict(self):
        out = dataclasses.asdict(self)
        out.update(full_clocks=self.full_clocks, ms=1e3 * self.seconds, gflops=self.gflops,
                   bytes_moved=self.bytes_moved, peak_share=self.peak_share,
                   roofline_share=self.roofline_share, bound=self.bound,
                   bus_share=self.bus_share,
                   estimate="cycle model", reduced=self.scale != 1.0)
        return out


def stall_shares(run):
    """Share of QPU-time (QPUs x run clocks) per cause; "idle" is a QPU done before the last."""
    total = run.num_qpus * run.cycles
    shares = {"idle": 0.0}
    for q in run.qpus:
        for cause, clocks in q.stalls.items():
            shares[cause] = shares.get(cause, 0.0) + clocks / total
        shares["idle"] += (run.cycles - (q.cycles or 0)) / total
    return shares


def roofline_clocks(timing, bytes_loaded, bytes_stored):
    """Clocks the memory bus needs to load and store the bytes once in 64-byte DMA rows (the
    fastest rows the model moves), at the model's DMA rates."""
    rows_in = -(-bytes_loaded // DMA_ROW_BYTES)
    rows_out = -(-bytes_stored // DMA_ROW_BYTES)
    return (timing.dma_load_clocks(rows_in, DMA_ROW_BYTES) +
            timing.dma_store_clocks(rows_out, DMA_ROW_BYTES))


def out_size(size, stride):
    return -(-size // stride)           # TensorFlow "same"


def layer_work(layer, elem_bytes=4, out_bytes=None, w_bytes=None):
    """(flops, bytes loaded, bytes stored) of a full ``mobilenet_shapes.Layer`` whose input and
    weights have ``elem_bytes``-byte elements, its result ``out_bytes`` (default the same);
    ``w_bytes``: the pointwise weights' element size when it differs (fp16 weights, float32
    activations)."""
    out_bytes = out_bytes or elem_bytes
    h, w, cin, cout, s = layer.height, layer.width, layer.cin, layer.cout, layer.stride
    oh, ow = out_size(h, s), out_size(w, s)
    if layer.kind == "pointwise":
        pixels = h * w
        loaded = (pixels * cin + cout + (pixels * cout if layer.residual else 0)) * elem_bytes
        return 2 * pixels * cin * cout, loaded + cin * cout * (w_bytes or elem_bytes), \
            pixels * cout * out_bytes
    if layer.kind == "depthwise":
        return 2 * 9 * oh * ow * cin, (h * w * cin + 10 * cin) * elem_bytes, \
            oh * ow * cin * out_bytes
    if layer.kind == "conv2d":
        return 2 * 9 * cin * cout * oh * ow, (h * w * cin + (9 * cin + 1) * cout) * elem_bytes, \
            oh * ow * cout * out_bytes
    if layer.kind == "global_avg_pool":
        return h * w * cin, h * w * cin * elem_bytes, cin * out_bytes
    if layer.kind == "fully_connected":
        return 2 * cin * cout, (cin + cin * cout + cout) * elem_bytes, cout * out_bytes
    if layer.kind == "add":
        return h * w * cin, 2 * h * w * cin * elem_bytes, h * w * cin * out_bytes
    raise Vc4nnError(f"layer {layer.name}: kind {layer.kind!r} is not one of {', '.join(KINDS)}")


def describe(layer):
    s = f" s{layer.stride}" if layer.kind in ("depthwise", "conv2d") else ""
    return f"{layer.height}x{layer.width}x{layer.cin}->{layer.cout}{s}"


def reduced_input(layer, reduction):
    """(input height, width, scale) of the run: the full layer's unless ``reduction`` cuts it."""
    h, w = layer.height, layer.width
    if layer.kind == "pointwise" and reduction.pixels and h * w > reduction.pixels:
        return 1, reduction.pixels, h * w / reduction.pixels
    if layer.kind in ("depthwise", "conv2d") and reduction.rows:
        out_rows = out_size(h, layer.stride)
        if out_rows > reduction.rows:
            # Whole output rows: input rows = rows x stride (the last row's window is padded).
            return reduction.rows * layer.stride, w, out_rows / reduction.rows
    return h, w, 1.0


def measure_layer(layer, device, num_qpus=12, reduction=FULL, tiling=None, seed=0,
                  storage="fp32", layout="hwc", weights=None):
    """LayerFigures of ``layer`` (a ``mobilenet_shapes.Layer``) on ``device``. ``tiling``: None
    uses the layer API's choice (the tuned cache, else the default); a dict forces the plan's
    tiling fields ({} forces the defaults). ``storage``: "fp16" stores activations and weights
    as halves where the layer's kernel can (vc4nn/nn/storage.py); ``weights``: a pointwise
    layer's weights' storage where it differs ("fp32" with fp16 storage: precision="auto"'s
    fp16/fp32 candidate; the record's storage then says "fp16/fp32"). ``layout``: "chw" runs a
    depthwise layer writing its result, a pointwise layer reading its input, channel-major (the
    hand-over of vc4nn/nn/handoff.py)."""
    if storage not in DTYPE_OF_STORAGE:
        raise Vc4nnError(f"storage={storage!r}: 'fp32' or 'fp16'")
    if weights not in (None, *DTYPE_OF_STORAGE):
        raise Vc4nnError(f"weights={weights!r}: None, 'fp32' or 'fp16'")
    if layer.kind not in FP16_LAYERS:
        storage = "fp32"
    half = storage == "fp16"
    w_storage = weights if weights and layer.kind == "pointwise" else storage
    rng = np.random.default_rng(seed)
    h, w, scale = reduced_input(layer, reduction)

    def rand(*shape, fp16=False):
        return device.array(rng.standard_normal(shape).astype(np.float16 if fp16 else
                                                               np.float32))

    plan, source = plan_for(layer, h, w, num_qpus, device, tiling, storage, layout, w_storage)
    x_shape = (layer.cin, h, w) if layout == "chw" and layer.kind == "pointwise" else \
        (h, w, layer.cin)
    x = rand(*x_shape, fp16=half and layer.kind in FP16_INPUT)
    result_dtype = DTYPE_OF_STORAGE["fp16" if half and layer.kind in FP16_RESULT else "fp32"]
    w_fp16 = w_storage == "fp16" and layer.kind in FP16_WEIGHTS
    kind, act = layer.kind, layer.activation
    if kind == "pointwise":
        weights = prepare_pointwise(np.asarray(rand(layer.cin, layer.cout, fp16=w_fp16)),
                                    np.asarray(rand(layer.cout)), device=device)
        residual = rand(h, w, layer.cout, fp16=half) if layer.residual else None
        y, run = pointwise(x, weights, activation=act, residual=residual, num_qpus=num_qpus,
                           return_run=True, tiling=tiling, x_layout=layout,
                           dtype=result_dtype)
        weights.free()
        run_shape = f"{h}x{w}x{layer.cin}->{layer.cout}"
    elif kind == "depthwise":
        y, run = depthwise(x, rand(3, 3, layer.cin, fp16=w_fp16), rand(layer.cin, fp16=w_fp16),
                           layer.stride, "same", act, num_qpus=num_qpus, return_run=True,
                           tiling=tiling, dtype=result_dtype, out_layout=layout)
        run_shape = f"{h}x{w}x{layer.cin} s{layer.stride}"
    elif kind == "conv2d":
        y, run = conv2d(x, rand(3, 3, layer.cin, layer.cout), rand(layer.cout), layer.stride,
                        "same", act, num_qpus=num_qpus, return_run=True, dtype=result_dtype)
        run_shape = f"{h}x{w}x{layer.cin}->{layer.cout} s{layer.stride}"
    elif kind == "global_avg_pool":
        y, run = global_avg_pool(x, num_qpus=num_qpus, return_run=True, dtype=result_dtype)
        run_shape = f"{h}x{w}x{layer.cin}"
    elif kind == "fully_connected":
        weights = prepare_fully_connected(np.asarray(rand(layer.cin, layer.cout, fp16=w_fp16)),
                                          np.asarray(rand(layer.cout)), device=device)
        y, run = fully_connected(x.reshape(-1), weights, num_qpus=num_qpus, return_run=True)
        weights.free()
        run_shape = f"{layer.cin}->{layer.cout}"
    elif kind == "add":
        b = rand(h, w, layer.cin, fp16=half)
        y, run = add(x, b, num_qpus=num_qpus, return_run=True, dtype=result_dtype)
        device.free(b)
        run_shape = f"{h}x{w}x{layer.cin}"
    else:
        raise Vc4nnError(f"layer {layer.name}: kind {kind!r} is not one of {', '.join(KINDS)}")
    for buf in (x, y):
        device.free(buf)
    if kind == "pointwise" and residual is not None:
        device.free(residual)
    if run.cycles is None:
        raise Vc4nnError(f"layer {layer.name}: the {device.name} device reports no cycle counts "
                         f"(the per-layer figures are the emulator's cycle model)")
    flops, loaded, stored = layer_work(layer, x.itemsize, y.itemsize, 2 if w_fp16 else 4)
    timing = device.timing
    return LayerFigures(
        name=layer.name, kind=kind, shape=describe(layer), run_shape=run_shape, scale=scale,
        flops=flops, bytes_loaded=loaded, bytes_stored=stored,
        roofline_clocks=roofline_clocks(timing, loaded, stored), clocks=run.cycles,
        board=run.board, clock_hz=run.clock_hz, num_qpus=num_qpus, launches=run.launches,
        launch_overhead_s=timing.launch_overhead, shares=stall_shares(run),
        tiling=resolved_tiling(plan), plan=source,
        storage=storage if w_storage == storage else f"{storage}/{w_storage}", layout=layout,
        bus_clocks=run.bus_busy_clocks)


