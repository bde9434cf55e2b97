"""The memory plan: every activation gets an offset in one device arena, placed by liveness so that
values that are never alive at the same time share bytes.

A value is alive from the step that writes it to the last step that reads it, both included (a
layer never writes over its own inputs); graph outputs live to the end; reshapes are views of
their input's bytes. Offsets come from a greedy first fit, biggest value first, which is what
mature runtimes use (TFLite's arena planner) and lands near the peak of simultaneously live bytes.
"""

import dataclasses
from typing import Dict, List, Tuple

import numpy as np

# Every value starts on a 64-byte boundary: one TMU cache line and a whole number of 16-lane
# float32 VPM rows, so no two values share a cache line.
ALIGN = 64
VIEW_OPS = ("reshape",)
HOST_OPS = ("softmax",)


@dataclasses.dataclass
class MemoryPlan:
    offsets: Dict[str, int]              # storage value -> byte offset in the arena
    sizes: Dict[str, int]                # storage value -> bytes
    storage: Dict[str, str]              # every device value -> the value owning its bytes
    arena_bytes: int
    peak_live_bytes: int                 # lower bound: most bytes alive at one step
    weight_bytes: int                    # float32 weights and biases (kernel layouts may pad)
    lifetimes: Dict[str, Tuple[int, int]] = dataclasses.field(default_factory=dict)
    # storage value -> (first step, last step) alive; step -1 is before the first layer

    def total_bytes(self):
        return self.arena_bytes + self.weight_bytes

    def free_span(self, step):
        """(offset, bytes) of the largest part of the arena that no value alive at ``step``
        uses: a layer's workspace at that step may go there."""
        used = sorted((self.offsets[v], self.offsets[v] + self.sizes[v])
                      for v, (first, last) in self.lifetimes.items() if first <= step <= last)
        best, start = (0, 0), 0
        for offset, end in used + [(self.arena_bytes, self.arena_bytes)]:
            if offset - start > best[1]:
                best = (start, offset - start)
            start = max(start, end)
        return best


def device_steps(graph):
    """The nodes the device runs, in order (the plan's steps): all but the host's."""
    return [n for n in graph.nodes if n.op not in HOST_OPS]


def host_steps(graph):
    """The nodes the host runs after the device's (a softmax), in order."""
    return [n for n in graph.nodes if n.op in HOST_OPS]


def _align(n):
    return -(-n // ALIGN) * ALIGN


def plan_memory(graph, storage_shapes=None, itemsize=4, itemsizes=None, launch_spans=()):
    """Offsets for the device values of ``graph`` (optimized IR). ``storage_shapes`` overrides
    the bytes of some values (the padded input buffer of a folded stem); ``itemsizes`` the
    element size of some (fp16 storage: 2). ``launch_spans``: (first, last) steps that run in
    one launch; a value read inside one stays alive to its end (launch_fusion.py)."""
    itemsizes = itemsizes or {}
    storage_shapes = storage_shapes or {}
    storage = {}
    for i in graph.inputs:
        storage[i.name] = i.name
    steps = device_steps(graph)
    for node in steps:
        if node.op in VIEW_OPS:
            storage[node.outputs[0]] = storage[node.inputs[0]]
        else:
            storage[node.outputs[0]] = node.outputs[0]
    first, last = {}, {}
    for i in graph.inputs:
        first[i.name] = last[i.name] = -1
    for index, node in enumerate(steps):
        for name in node.inputs:
            if name in storage:
                last[storage[name]] = index
        owner = storage[node.outputs[0]]
        first.setdefault(owner, index)
        last[owner] = max(last.get(owner, index), index)
    for start, end in launch_spans:
        for node in steps[start:end + 1]:
            for name in node.inputs:
                if name in storage:
                    last[storage[name]] = max(last[storage[name]], end)
    for name in list(graph.outputs) + [n.inputs[0] for n in host_steps(graph)]:
        if name in storage:
            last[storage[name]] = len(steps)
    sizes = {}
    for owner in set(storage.values()):
        shape = storage_shapes.get(owner, graph.shapes[owner])
        sizes[owner] = _align(int(np.prod(shape)) * itemsizes.get(owner, itemsize))
    offsets = min((_first_fit(sizes, first, last, order) for order in FIT_ORDERS),
                  key=lambda placed: _end(placed, sizes))
    arena = _end(offsets, sizes)
    peak = max((sum(sizes[v] for v in sizes if first[v] <= t <= last[v])
                for t in range(-1, len(steps) + 1)), default=0)
    weights = sum(graph.constants[name].size * itemsize for node in steps
                  for name in node.inputs[1:] if name in graph.constants)
    return MemoryPlan(offsets, sizes, storage, arena, peak, weights,
                      {v: (first[v], last[v]) for v in sizes})


# The orders first fit places values in; the plan takes the smallest arena of them. Largest
# first packs MobileNet v1/v2 at 224 into their peak; in order of first use does better where
# a large value comes late (0.25/32 in float32: 24 KB, its peak, against 28 KB largest first).
FIT_ORDERS = (lambda sizes, first, v: (-sizes[v], first[v], v),
              lambda sizes, first, v: (first[v], -sizes[v], v))


def _end(offsets, sizes):
    return max((offsets[v] + sizes[v] for v in offsets), default=0)


def _first_fit(sizes, first, last, order) -> Dict[str, int]:
    placed: List[Tuple[int, int, str]] = []          # (offset, end, value)
    offsets = {}
    for value in sorted(sizes, key=lambda v: order(sizes, first, v)):
        overlapping = sorted((o, e) for o, e, other in placed
                             if first[other] <= last[value] and first[value] <= last[other])
        offset = 0
        for o, e in overlapping:
            if offset + sizes[value] <= o:
                break
            offset = max(offset, e)
        offsets[value] = offset
        placed.append((offset, offset + sizes[value], value))
    return offsets
