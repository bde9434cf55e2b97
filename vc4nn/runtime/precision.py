"""Per-layer storage for ``InferenceSession(precision=...)``: which layers keep their weights and
results as IEEE halves (fp16 storage; the arithmetic stays float32 in every kernel).

- "fp32": every tensor float32.
- "fp16": every layer whose kernel has fp16 storage (``vc4nn.nn.storage``) runs fp16: its
  weights are halves where its kernel reads halves, and its result is stored as halves when its
  kernel can write them and every layer reading it can read them (otherwise float32: a layer
  without fp16 kernels never sees a half).
- "auto": each layer that "fp16" runs fp16 is tried on calibration inputs in every storage its
  kernels take (precision_auto.py: halves for result and weights, halves for the result with
  float32 weights, float32) and takes the fastest in the cycle model (or the Pi's clock) whose
  output error, max |y - y32| / max |y32| on the same float32 input, is at most ``tolerance``;
  then the whole network runs with those choices on the calibration inputs and, while its
  output's error exceeds ``output_tolerance``, layers go back to float32 weights or float32,
  cheapest first (precision_output.py).

Weights that a TFLite file stores as fp16 (DEQUANTIZE of a float16 constant) arrive as float16
and reach an fp16 layer as they are; a float32 layer widens them (exactly).
"""

import dataclasses
from typing import Dict, FrozenSet

import numpy as np

from ..errors import Vc4nnError
from ..nn.storage import DTYPE_OF_STORAGE, FP16_INPUT, FP16_LAYERS, FP16_RESULT, FP16_WEIGHTS

PRECISIONS = ("fp32", "fp16", "auto")
# Largest relative output error "auto" accepts for a layer (max-norm, on the calibration
# inputs): a half keeps 11 significant bits (2**-11 = 5e-4 rounding), so 1e-2 leaves room for
# the error of the fp16 inputs a layer accumulates over its window while refusing a layer
# whose values fall outside the halves' range (overflow to inf, or flushed to 0).
DEFAULT_TOLERANCE = 1e-2
# Largest relative error of the network's output "auto" accepts on the calibration inputs
# (precision_output.py): max |y - y32| / max |y32| of the logits. The top-1 class of an input
# can only change where its top two scores are within 2 * 2e-3 = 0.4% of the largest score of
# each other (at an error like the calibration inputs'): on torchvision's MobileNetV2, 2 of 104
# photos and photo variations (docs/runtime.md "Accuracy report"). All layers in halves give
# 5e-3 on its calibration inputs, the same with float32 weights 1.4e-3: above that, protecting
# weights suffices and the half results (the speed) stay.
DEFAULT_OUTPUT_TOLERANCE = 2e-3
VIEW_OPS = ("reshape",)


class PrecisionError(Vc4nnError):
    """A precision or tolerance argument the runtime cannot use."""


def check_precision(precision, tolerance, output_tolerance):
    if precision not in PRECISIONS:
        raise PrecisionError(f"precision={precision!r}: one of {', '.join(map(repr, PRECISIONS))}")
    for name, value in (("tolerance", tolerance), ("output_tolerance", output_tolerance)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise PrecisionError(f"{name}={value!r}: a number > 0")


@dataclasses.dataclass
class StoragePlan:
    """layers: node name -> storage of its result and (unless in fp32_weights) its weights
    ("fp32" / "fp16"); values: activation name -> storage in the arena; notes: node name ->
    why "auto" chose; fp32_weights: fp16 layers whose weights stay float32 (precision_auto);
    output_check: what "auto"'s check of the network's output found (precision_output)."""

    layers: Dict[str, str]
    values: Dict[str, str]
    notes: Dict[str, str] = dataclasses.field(default_factory=dict)
    fp32_weights: FrozenSet[str] = frozenset()
    output_check: str = ""

    def dtype(self, value):
        return DTYPE_OF_STORAGE[self.values.get(value, "fp32")]

    def itemsizes(self):
        return {v: self.dtype(v).itemsize for v in self.values}

    def layer(self, node):
        return self.layers.get(node.name, "fp32")

    def weights(self, node):
        """Storage of the node's weights as handed to its prepare function."""
        halves = self.layer(node) == "fp16" and node.op in FP16_WEIGHTS and \
            node.name not in self.fp32_weights
        return "fp16" if halves else "fp32"


def has_weights(graph, node):
    """Whether ``node`` reads weights (a constant second input)."""
    return len(node.inputs) > 1 and node.inputs[1] in graph.constants


def readers(consumers, value):
    """The layers reading ``value`` (``consumers``: graph.consumers()), through reshapes (views
    of the same bytes)."""
    out = []
    for node in consumers.get(value, []):
        out += readers(consumers, node.outputs[0]) if node.op in VIEW_OPS else [node]
    return out


def storage_plan(graph, fp16_layers, fp32_weights=()):
    """The StoragePlan with ``fp16_layers`` (node names) running fp16, those of them in
    ``fp32_weights`` with float32 weights."""
    layers = {n.name: "fp16" if n.name in fp16_layers and n.op in FP16_LAYERS else "fp32"
              for n in graph.nodes}
    consumers = graph.consumers()
    values = {i.name: "fp32" for i in graph.inputs}
    for node in graph.nodes:
        out = node.outputs[0]
        if node.op in VIEW_OPS:
            values[out] = values.get(node.inputs[0], "fp32")
            continue
        half = layers[node.name] == "fp16" and node.op in FP16_RESULT and all(
            r.op in FP16_INPUT for r in readers(consumers, out))
        values[out] = "fp16" if half else "fp32"
    return StoragePlan(layers, values, fp32_weights=frozenset(fp32_weights) & set(layers))


HALF_MAX = float(np.finfo(np.float16).max)


def initial_plan(graph, precision):
    """The plan "fp32" or "fp16" asks for ("auto" starts from "fp16"). A layer whose weights a
    half cannot hold (beyond +-65504) stays float32, and its note says so."""
    if precision == "fp32":
        return storage_plan(graph, ())
    candidates, notes = set(), {}
    for node in graph.nodes:
        if node.op not in FP16_LAYERS:
            continue
        weights = [graph.constants[n] for n in node.inputs[1:3] if n in graph.constants]
        if node.op in FP16_WEIGHTS and any(np.max(np.abs(w), initial=0) > HALF_MAX
                                           for w in weights):
            notes[node.name] = "weights outside the fp16 range"
        else:
            candidates.add(node.name)
    plan = storage_plan(graph, candidates)
    plan.notes = notes
    return plan


def weights_for(w, storage):
    """A layer's weights as its storage wants them (None stays None)."""
    if w is None:
        return None
    return np.ascontiguousarray(w, DTYPE_OF_STORAGE[storage])


def relative_error(y, reference):
    reference = np.asarray(reference, np.float64)
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    diff = np.abs(np.asarray(y, np.float64) - reference)
    if not np.all(np.isfinite(diff)):
        return float("inf")
    return float(diff.max()) / scale if scale > 0 else float(diff.max())


def run_time(run):
    """A RunResult's time: cycle-model clocks in the emulator, else seconds."""
    return run.cycles if getattr(run, "cycles", None) else run.seconds


def synthetic_feed(input_arg, seed):
    """A seeded calibration input for ``input_arg`` (a session's NodeArg): a uniformly random
    uint8 frame, or floats uniform in [-1, 1] (the range of a TFLite MobileNet's input)."""
    rng = np.random.default_rng(seed)
    unit = rng.uniform(0.0, 1.0, tuple(input_arg.shape))
    if input_arg.type == "uint8":
        return {input_arg.name: np.round(255 * unit).astype(np.uint8)}
    return {input_arg.name: (2 * unit - 1).astype(np.dtype(input_arg.type))}


def output_host_step(session):
    """The host step (a softmax) that makes the model's first output, or None."""
    name = session.graph.outputs[0]
    return next((n for n in session.host_steps if n.outputs[0] == name), None)


def decision_value(session):
    """The name of the value the model decides on: its first output, or the scores a host
    softmax reads."""
    softmax = output_host_step(session)
    return softmax.inputs[0] if softmax is not None else session.graph.outputs[0]


def decision_output(session):
    """The decision value (``decision_value``) of the session's last run, flat float64."""
    return np.array(session.hwc_view(decision_value(session)), np.float64).reshape(-1)


def network_output(session, feed):
    """The decision value of a run of ``session`` on ``feed`` (layer by layer, unrecorded)."""
    trace(session, feed, names=(), with_inputs=False)
    return decision_output(session)


def read_view(session, name):
    """The bytes of activation ``name`` as a layer reads them: its (H, W, C) view, but the
    model's input as the whole padded frame when a stem reads it (input_frame.py: a copy of
    the interior alone would leave another session's border)."""
    if name == session.graph.inputs[0].name:
        return session._frame.view
    return session.hwc_view(name)


def activation_inputs(session, node):
    """The names of ``node``'s inputs that live in the arena (not its weights): x, and add's b
    or a fused residual."""
    return [name for name in node.inputs if name in session.plan.storage]


def trace(session, feed, names=None, with_inputs=True):
    """{node name: ({input name: value} or None, its output, its time)} of a run of ``session``
    on ``feed``, for the layers ``names`` (every layer when None); the inputs are the layer's
    activation inputs (None unless ``with_inputs``). Copies are taken around each call: the
    arena lends its bytes on."""
    session._write_input(feed)
    out = {}
    for node, call in session.steps:
        if call is None:
            continue
        wanted = names is None or node.name in names
        inputs = {name: np.array(read_view(session, name)) for name in
                  activation_inputs(session, node)} if wanted and with_inputs else None
        _, run = session._invoke(node, call)
        if wanted:
            out[node.name] = (inputs, np.array(session.hwc_view(node.outputs[0])), run_time(run))
    return out
