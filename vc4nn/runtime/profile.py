"""Per-layer profile records: work, time, GFLOPS and what bounds the layer.

Times are the device's: cycle-model estimates in the emulator (``estimated`` True, at the board's
V3D clock), measured on a Pi. "bound" is "memory" when the cycle model says the QPUs spent most
of the layer stalled on memory (nn.stall_groups.MEMORY_STALLS: TMU, VPM/DMA, uniform and
instruction fetches), else "compute"; where no stall figures exist (a real Pi) it compares the
layer's flops per byte with the machine balance. A layer that ran in
another layer's launch (a launch group, ``launched_with``) has no time, launch or bound of its
own: that launch's record holds them.
"""

import dataclasses
from typing import Optional

import numpy as np

from ..nn.stall_groups import MEMORY_STALLS
from .ir import WEIGHTED_OPS

# Machine balance for the fallback: 12 QPUs x 16 lanes x 2 flops per 4 clocks at 250 MHz against
# ~0.7 GB/s of DMA loads (README calibration table): about 34 flops per byte.
MACHINE_BALANCE = 24e9 / 0.7e9


@dataclasses.dataclass
class LayerRecord:
    name: str
    op: str
    shape: tuple                  # output (H, W, C) or (C,)
    flops: int
    bytes: int                    # activations read and written + weights, float32
    seconds: Optional[float]      # device time of the layer's launches
    estimated: bool               # cycle-model estimate (emulator) or measured (Pi)
    cycles: Optional[int]
    launches: int
    host_seconds: Optional[float]  # wall time of the call on this host (the emulator included);
    #                               None: launched in one device call with other layers
    gflops: Optional[float]
    bound: str
    storage: str = "fp32"         # of the layer's result (precision="fp16"/"auto")
    choice: str = ""              # why precision="auto" chose it
    launched_with: str = ""       # the layer whose launch this one ran in (launches 0; its
    #                               time is in that layer's), "" if it has a launch of its own
    weights: str = "-"            # storage of its weights as its kernel reads them ("-": none)

    def as_dict(self):
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        return d


def layer_work(node, graph):
    """(flops, bytes) of one IR node: a multiply-add counts 2 flops."""
    s = graph.shapes
    out = s[node.outputs[0]]
    x = s[node.inputs[0]]
    n_out, n_in = int(np.prod(out)), int(np.prod(x))
    weights = sum(graph.constants[n].size for n in node.inputs[1:] if n in graph.constants)
    if node.op in WEIGHTED_OPS:
        w = graph.constants[node.inputs[1]]     # multiply-adds per output: w over its last axis
        flops = 2 * n_out * (w.size // w.shape[-1])
        if len(node.inputs) > 3:                                   # fused residual
            flops += n_out
            n_in += n_out
    elif node.op == "avg_pool":
        flops = n_out * int(np.prod(node.attrs["size"]))
    elif node.op == "add":
        flops, n_in = n_out, 2 * n_in
    else:
        flops = n_in
    return flops, 4 * (n_in + n_out + weights)


def layer_record(node, graph, result, host_seconds, storage="fp32", choice="",
                 launched_with="", weights="-"):
    flops, nbytes = layer_work(node, graph)
    seconds = getattr(result, "seconds", None)
    gflops = flops / seconds / 1e9 if seconds else None
    return LayerRecord(node.name, node.op, tuple(graph.shapes[node.outputs[0]]), flops, nbytes,
                       seconds, bool(getattr(result, "estimated", True)),
                       getattr(result, "cycles", None), int(getattr(result, "launches", 1)),
                       host_seconds, gflops,
                       "-" if launched_with else _bound(result, flops, nbytes), storage, choice,
                       launched_with, weights)


def _bound(result, flops, nbytes):
    qpus = getattr(result, "qpus", None) or []
    busy = sum(q.cycles or 0 for q in qpus)
    if busy and any(q.stalls for q in qpus):
        memory = sum(c for q in qpus for cause, c in q.stalls.items() if cause in MEMORY_STALLS)
        return "memory" if memory > busy / 2 else "compute"
    return "memory" if flops / max(nbytes, 1) < MACHINE_BALANCE else "compute"


def summarize(records):
    """Totals over a profile: device seconds, flops, launches, host seconds (None where a
    figure is unknown for some layer)."""
    seconds = [r.seconds for r in records]
    total = None if None in seconds else sum(seconds)
    host = [r.host_seconds for r in records]        # None: layers launched together
    return {"layers": len(records), "flops": sum(r.flops for r in records),
            "device_seconds": total, "launches": sum(r.launches for r in records),
            "estimated": any(r.estimated for r in records),
            "host_seconds": None if None in host else sum(host),
            "chained_layers": sum(1 for r in records if r.launched_with)}


def memory_text(memory):
    """A session's ``memory()`` as one line of text."""
    mib = {key: value / 2**20 for key, value in memory.items()}
    return (f"GPU memory: {mib['total_bytes']:.2f} MiB (arena {mib['arena_bytes']:.2f} MiB, "
            f"weights {mib['weight_bytes']:.2f} MiB, recorded launches "
            f"{mib['recorded_bytes']:.2f} MiB, zero rows {mib['zero_bytes']:.2f} MiB)")
