"""Run one layer of a network description on a device and report its figures.

The per-layer benchmark (tools/bench_layers.py, ``vc4nn tune``) and the kernel docs' tables use
this. Cycle figures are the cycle model's ESTIMATES in the emulator; on a Pi they are measured.
Inputs are random (seeded): the timing of these kernels does not depend on the values.
"""

import dataclasses

import numpy as np

from ..errors import Vc4nnError
from .elementwise import add
from .fully_connected import fully_connected, prepare_fully_connected
from .global_pool import global_avg_pool
from .pointwise import pointwise, prepare_pointwise

FLOPS_PER_QPU_CLOCK = 8         # 16 lanes x (multiply + add) every 4 clocks (facts §4)


@dataclasses.dataclass
class LayerFigures:
    name: str
    shape: str
    flops: int
    run: object                 # the RunResult

    @property
    def cycles(self):
        return self.run.cycles

    @property
    def seconds(self):
        """The kernels' time (clocks at the board's clock), without the launch overhead that
        RunResult.seconds adds (~100 us per launch, which the runtime's chaining will share)."""
        if not self.run.cycles or not self.run.clock_hz:
            return None
        return self.run.cycles / self.run.clock_hz

    @property
    def gflops(self):
        return None if not self.seconds else self.flops / self.seconds / 1e9

    @property
    def peak_share(self):
        """Share of the arithmetic peak of the QPUs the run used."""
        if not self.run.cycles:
            return None
        return self.flops / (self.run.cycles * self.run.num_qpus * FLOPS_PER_QPU_CLOCK)


def run_layer(layer, device, num_qpus=12, pixels=None, seed=0):
    """LayerFigures of one ``mobilenet_shapes.Layer`` (pointwise, fully_connected,
    global_avg_pool, or an add of its output shape). ``pixels``: run on a 1 x pixels input
    instead of H x W (the QPUs then do fewer passes of the same kind; docs/kernels.md)."""
    rng = np.random.default_rng(seed)
    height, width = (1, pixels) if pixels else (layer.height, layer.width)

    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    shape = f"{height}x{width}x{layer.cin}->{layer.cout}"
    if layer.kind == "pointwise":
        w = prepare_pointwise(rand(layer.cin, layer.cout), rand(layer.cout), device=device)
        residual = device.array(rand(height, width, layer.cout)) if layer.residual else None
        x = device.array(rand(height, width, layer.cin))
        _, run = pointwise(x, w, activation=layer.activation, residual=residual,
                           num_qpus=num_qpus, return_run=True)
        flops = 2 * height * width * layer.cin * layer.cout
    elif layer.kind == "fully_connected":
        w = prepare_fully_connected(rand(layer.cin, layer.cout), rand(layer.cout), device=device)
        _, run = fully_connected(device.array(rand(layer.cin)), w, num_qpus=num_qpus,
                                 return_run=True)
        flops = 2 * layer.cin * layer.cout
    elif layer.kind == "global_avg_pool":
        _, run = global_avg_pool(device.array(rand(height, width, layer.cin)),
                                 num_qpus=num_qpus, return_run=True)
        flops = height * width * layer.cin
    elif layer.kind == "add":
        a, b = (device.array(rand(height, width, layer.cout)) for _ in range(2))
        _, run = add(a, b, num_qpus=num_qpus, return_run=True)
        flops = height * width * layer.cout
    else:
        raise Vc4nnError(f"run_layer: {layer.kind} layers are not benchmarked here")
    return LayerFigures(layer.name, shape, flops, run)
