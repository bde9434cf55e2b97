"""Cycle-model figures of the spatial layers, for tools/bench_spatial.py and the per-layer
table of tools/bench_layers.py: run one layer on random data and set its modelled time against
the memory roofline (docs/kernels.md "What bounds each kernel").

Every figure is an ESTIMATE of the cycle model (docs/cycle-model.md) at the device's board
clock.
"""

import numpy as np

from ..kernels.common import LANES, WORD

ROW_BYTES = LANES * WORD        # the longest DMA load row (ROWLEN <= 16 words)
from .avg_pool import avg_pool
from .conv2d import conv2d
from .depthwise import depthwise


def roofline_clocks(timing, in_hw, out_hw, channels, elem_bytes=4, reads=1):
    """Clocks the memory bus needs to load the input ``reads`` times and store the output once,
    one DMA memory row per pixel and 16-channel block (the longest row a DMA load takes:
    ROWLEN <= 16), at the cycle model's DMA rates."""
    clocks = 0
    for c0 in range(0, channels, LANES):
        row = min(LANES, channels - c0) * elem_bytes
        clocks += reads * timing.dma_load_clocks(in_hw[0] * in_hw[1], row)
        clocks += timing.dma_store_clocks(out_hw[0] * out_hw[1], row)
    return clocks


def measure(kind, height, width, cin, cout=None, stride=1, padding="same", activation=None,
            device=None, num_qpus=12, size=3, seed=0, **options):
    """One layer run on random data: a dict of its shape, modelled clocks and seconds, bytes
    moved, the roofline time and the fraction of it reached (roofline / modelled time)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((height, width, cin)).astype(np.float32)
    if kind == "depthwise":
        w = rng.standard_normal((3, 3, cin)).astype(np.float32)
        y, run = depthwise(x, w, w[0, 0], stride, padding, activation, device=device,
                           num_qpus=num_qpus, return_run=True, **options)
    elif kind == "conv2d":
        w = rng.standard_normal((size, size, cin, cout)).astype(np.float32)
        y, run = conv2d(x, w, w[0, 0, 0], stride, padding, activation, device=device,
                        num_qpus=num_qpus, return_run=True, **options)
    elif kind == "avg_pool":
        y, run = avg_pool(x, size, stride, padding, device=device, num_qpus=num_qpus,
                          return_run=True, **options)
    else:
        raise ValueError(f"kind {kind!r}: depthwise, conv2d or avg_pool")
    timing = device.timing
    kernel_clocks = run.cycles
    stalls = {}
    for qpu in run.qpus:
        for cause, clocks in qpu.stalls.items():
            stalls[cause] = stalls.get(cause, 0) + clocks
    roof = roofline_clocks(timing, (height, width), y.shape[:2], y.shape[2], x.itemsize)
    if kind == "conv2d":
        # The input (cin channels, read through the TMU) counted as whole 64-byte rows, the
        # output as for the other layers.
        roof = (timing.dma_load_clocks(-(-x.nbytes // ROW_BYTES), ROW_BYTES) +
                roofline_clocks(timing, (0, 0), y.shape[:2], y.shape[2], x.itemsize))
    return {
        "kind": kind, "shape": [height, width, cin], "out": list(y.shape), "stride": stride,
        "qpus": num_qpus, "board": run.board, "clock_mhz": run.clock_hz / 1e6,
        "kernel_clocks": kernel_clocks, "kernel_ms": 1e3 * kernel_clocks / run.clock_hz,
        "launch_ms": 1e3 * run.seconds, "instructions": run.instructions,
        "bytes": int(x.nbytes + y.nbytes), "roofline_clocks": roof,
        "roofline_fraction": roof / kernel_clocks,
        "stall_clocks_all_qpus": stalls,
    }
