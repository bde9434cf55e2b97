"""InferenceSession: a model file run layer by layer on a device through ``vc4nn.nn``.

At load: the file becomes the optimized IR, every weight is laid out once by the layer's
``prepare_*`` function into one weight arena (one device allocation), every activation gets its
bytes in one activation arena (``planner``), each layer becomes a call with all its arguments
bound (arena views included), and each call is recorded once without running (``replay``): its
program assembled (``program_cache``: from disk on a second start) and its uniform streams built.
A run is then one device call launching the recorded sequence (``replay.schedule``). The
session knows nothing of the backend: it calls the ``vc4nn.nn`` API only.

A uint8 camera frame (``image_input=``) is taken as it is: the model's normalisation is folded
into the stem convolution's weights and bias, and the frame is written into a buffer whose border
holds the normalisation's mean, so the padded border is exact too (the folded conv sees the mean
where the original sees 0).
"""

import collections
import math
import time

import numpy as np

from ..device import qpu_count
from ..errors import DeviceError
from .errors import InputError
from .image import Normalization, normalization_for
from .input_frame import InputFrame
from ..nn.layer_call import SharedZeros, WeightArena, WeightLayouts, scratch, shared_zeros
from .loader import load_graph
from . import precision as precision_choice, precision_session
from .handoff import transposed_handoffs
from .layer_binding import layer_call
from .profile import layer_record
from . import program_cache
from .launch_fusion import planned_launches
from .planner import device_steps, host_steps
from .replay import CodePool, LaunchGroup, Recording, layer_runs, schedule
from .replay_chain import link_spans
from .session_args import check_output_names, check_session_options

NodeArg = collections.namedtuple("NodeArg", "name shape type")
# Device bytes a session may hold with its recorded launches: a Pi's GPU memory split is often
# 64 MB, shared with the firmware and the camera.
DEFAULT_MEMORY_BUDGET = 24_000_000


class InferenceSession:
    """Like onnxruntime's: ``run(output_names or None, {input_name: array})`` -> list of arrays.

    path: a .tflite or .onnx file. device: a vc4nn device (None: ``vc4nn.open_device()``, closed
    with the session). image_input: None (the file's float input), or a normalisation preset
    ("tflite": [-1, 1], "torchvision": ImageNet mean/std, "auto": by file format) or a
    ``Normalization``; the input is then one uint8 (H, W, 3) RGB frame.
    progress: show tqdm bars for the load (default: only on a terminal).
    replay: record each layer's launches at load and relaunch them on every run (``replay.py``)
    instead of calling the layer, keeping their code and uniforms in device memory while the
    session's device memory stays within ``memory_budget`` bytes (layers past it are called
    every run; None: no limit); False calls every layer every run.
    precision: "fp32", "fp16" (weights and activations stored as halves where the layers' kernels
    can, float32 arithmetic) or "auto" (fp16 per layer where it is faster and the layer's output
    error on the ``calibration`` inputs is at most ``tolerance``; see ``precision.py``).
    calibration: input arrays as ``run`` takes them (None: two seeded synthetic inputs).
    output_tolerance: "auto" then keeps layers float32, cheapest first, until the network's
    output error on the calibration inputs is at most this (``precision_output.py``).
    launch: the launch path of the device the session opens itself ("mailbox" or "direct",
    vc4nn.device.LAUNCH_PATHS; None: the backend's default); with a ``device`` it must match
    the device's (a device's launch path is chosen when it is opened).
    group_launches: run consecutive recorded layers in one launch where the memory plan allows
    it without growing the activation arena (``launch_fusion.py``, ``replay_chain.py``; needs
    ``replay``); False launches every layer on its own.
    """

    def __init__(self, path, device=None, num_qpus=12, image_input=None, progress=None,
                 replay=True, memory_budget=DEFAULT_MEMORY_BUDGET, precision="fp32",
                 tolerance=precision_choice.DEFAULT_TOLERANCE, calibration=None, launch=None,
                 group_launches=True,
                 output_tolerance=precision_choice.DEFAULT_OUTPUT_TOLERANCE):
        start, cpu_start = time.perf_counter(), time.process_time()
        check_session_options(path, device, image_input, progress, replay, memory_budget,
                              calibration, group_launches)
        self.path = str(path)
        precision_choice.check_precision(precision, tolerance, output_tolerance)
        self.precision = precision
        self.closed = False
        self.graph = load_graph(self.path)
        self.num_qpus = qpu_count(num_qpus)
        self.progress = progress
        self.replay = replay
        self.group_launches = group_launches and replay
        self.memory_budget = memory_budget
        self._recordings = {}
        self._chains = []                   # replay_chain.Chain of the launch groups
        self._normalization = self._pick_normalization(image_input)
        self._frame = InputFrame(self.graph, self._normalization)
        self._own_device = device is None
        self._weights, self._arena, self._code = None, None, None
        self._zeros = None
        self.program_cache_stats = None     # {"hits", "misses", "folder"} of the load
        self._last_segments = []            # (segment, its result, wall seconds) of the last run
        if device is None:
            from .. import open_device
            device = open_device(**({} if launch is None else {"launch": launch}))
        elif launch is not None and launch != device.launch_path:
            raise DeviceError(f"launch={launch!r} but the {device.name} device given launches "
                              f"by the {device.launch_path} path; open the device with "
                              f"launch={launch!r} (vc4nn.open_device(..., launch={launch!r}))")
        self.device = device
        try:
            self.storage = precision_choice.initial_plan(self.graph, precision)
            if precision == "auto":
                self._choose_per_layer(image_input, tolerance, output_tolerance, calibration,
                                       progress)
            self._build(progress)
        except BaseException:
            self.close()
            raise
        # Wall and CPU seconds of the load (on a shared machine the CPU figure is the steadier).
        self.load_seconds = time.perf_counter() - start
        self.load_cpu_seconds = time.process_time() - cpu_start

    # -- inputs and outputs ------------------------------------------------------------------
    def _pick_normalization(self, image_input):
        quant = getattr(self.graph, "input_quantization", {}).get(self.graph.inputs[0].name)
        if image_input is None and quant is None:
            return None
        if quant is not None:                # a quantized input: x = (q - zero) * scale
            if image_input is not None:
                raise InputError("the model's input is already quantized uint8; give no "
                                 "image_input normalisation")
            scale, zero = quant
            return Normalization((zero,) * 3, (1.0 / scale,) * 3)
        return normalization_for(self.graph, image_input)

    def get_inputs(self):
        i = self.graph.inputs[0]
        if self._normalization is not None and i.dtype == "float32":
            h, w, c = self.graph.shapes[i.name]
            return [NodeArg(i.name, (h, w, c), "uint8")]
        return [NodeArg(i.name, tuple(i.shape), i.dtype)]

    def get_outputs(self):
        return [NodeArg(name, self._file_shape(name), "float32") for name in self.graph.outputs]

    def _file_shape(self, name):
        shape = self.graph.shapes[name]
        if self.graph.format == "onnx" and len(shape) == 3:
            return (1, shape[2], shape[0], shape[1])
        return (1,) + tuple(shape)

    # -- load --------------------------------------------------------------------------------
    def _build(self, progress):
        from .. import nn
        self.nn = nn
        g = self.graph
        input_name = g.inputs[0].name
        storage_shapes = {input_name: self._frame.storage_shape}
        # Launch groups (launch_fusion.py): spans of layers planned to share one launch
        self.launch_spans, self.plan = planned_launches(
            g, storage_shapes, self.storage.itemsizes(), self.group_launches)
        # Depthwise results handed channel-major to the pointwise layer reading them (handoff.py)
        self.channel_major = transposed_handoffs(g, self.storage, self.num_qpus, self.device)
        nodes = device_steps(g)
        bar = _progress(nodes, progress, "preparing layers")
        self._arena = self.device.alloc(max(self.plan.arena_bytes // 4, 1), np.float32)
        self._zeros = SharedZeros(self.device)
        self._frame.bind(self._view(input_name, self._frame.storage_shape))
        self._place_weights(nodes, bar)
        self.host_steps = host_steps(g)
        self._lend_workspaces(nodes)
        if self.replay:
            self._record_all(progress)
            link_spans(self.device, self._code, self.launch_spans, self.steps,
                       self._recordings, self._chains, self._within_budget)
        self._schedules = {shown: schedule(self.steps, self._recordings, per_layer=shown,
                                           chains=self._chains)
                           for shown in (False, True)}

    def _place_weights(self, nodes, bar):
        """Bind every layer, its weights in one arena; the arena's size is known once every
        layout is made, so a first pass makes them in host memory."""
        sizing = WeightLayouts()
        for node in nodes:
            layer_call(self, node, sizing)
        self._weights = WeightArena(self.device, sizing.nbytes)
        self.steps = [(node, layer_call(self, node, self._weights)) for node in bar]

    def _lend_workspaces(self, nodes):
        """A layer's workspace (the pointwise transpose) shares the activation arena with the
        values that are dead while it runs."""
        arena_bytes = self._arena.view(np.uint8)
        self._scratch = {}
        for step, node in enumerate(nodes):
            offset, size = self.plan.free_span(step)
            self._scratch[node.name] = arena_bytes[offset:offset + size]

    def _record_all(self, progress):
        self._code = CodePool(self.device)
        readers = {}                # node name -> the zero buffers its launches read
        with program_cache.active() as store:
            for node, call in _progress(self.steps, progress, "assembling layers"):
                self._zeros.taken = []
                self._record(node, call)
                readers[node.name] = self._zeros.taken
            # A layer recorded before a larger zero row was asked for reads a smaller one: record
            # it again on the largest, so that the session holds one zero row.
            largest = self._zeros.largest()
            stale = {name for name, taken in readers.items()
                     if any(buf is not largest for buf in taken)}
            self._zeros.keep_largest()
            again = [(node, call) for node, call in self.steps if node.name in stale]
            for node, _ in again:
                self._recordings.pop(node.name).forget()
            self._code.keep_used(self._recordings.values())     # their programs too
            for node, call in again:
                self._record(node, call)
        if store is not None:
            self.program_cache_stats = {"hits": store.hits, "misses": store.misses,
                                        "folder": store.folder}

    def _record(self, node, call):
        """Record the layer's launches without running them (its program assembled, its
        uniforms built), unless the memory budget is spent."""
        if call is None:
            return
        recording = self._recordings[node.name] = Recording(self.device)
        with recording.capture(run=False):
            self._invoke(node, call)
        programs = len(self._code.programs)
        recording.pack(self._code)
        if not self._within_budget():
            recording.forget()      # over the budget: this layer is called every run
            self._code.keep_first(programs)

    def _within_budget(self):
        return self.memory_budget is None or self.memory()["total_bytes"] <= self.memory_budget

    def _choose_per_layer(self, image_input, tolerance, output_tolerance, calibration,
                          progress):
        """precision="auto": the storage of each layer (precision_session.choose_storage); the
        session is then built with it."""
        reference = InferenceSession(self.path, self.device, self.num_qpus, image_input,
                                     progress=False, replay=False, memory_budget=None)
        self.storage = precision_session.choose_storage(self, reference, tolerance,
                                                        output_tolerance, calibration, progress)

    def built_with(self, storage, progress, measure):
        """``measure(self)`` with this session built with ``storage`` (unrecorded)."""
        replay, self.replay, self.storage = self.replay, False, storage
        try:
            self._build(progress)
            return measure(self)
        finally:
            self.replay = replay
            self._free_layers()

    def _view(self, name, shape=None):
        owner = self.plan.storage[name]
        if shape is None:
            shape = self.graph.shapes[name]
            if name in self.channel_major:
                h, w, c = shape
                shape = (c, h, w)
        shape = tuple(shape)
        dtype = self.storage.dtype(owner)
        start = self.plan.offsets[owner]
        end = start + math.prod(shape) * dtype.itemsize
        return self._arena.view(np.uint8)[start:end].view(dtype).reshape(shape)

    def _layout(self, name):
        return "chw" if name in self.channel_major else "hwc"

    def hwc_view(self, name):
        """Value ``name`` in the arena as the graph shapes it, (H, W, C) for a feature map: a
        transposed view of a value handed over channel-major (sessions may differ in which
        values they hand over: precision "auto" compares one with another)."""
        view = self._view(name)
        return view.transpose(1, 2, 0) if name in self.channel_major else view

    # -- run ---------------------------------------------------------------------------------
    def _write_input(self, feed):
        i = self.graph.inputs[0]
        expected = self.get_inputs()[0]
        if not isinstance(feed, dict) or set(feed) != {i.name}:
            given = sorted(feed) if isinstance(feed, dict) else type(feed).__name__
            raise InputError(f"run() takes {{{i.name!r}: array}}; got {given}")
        x = feed[i.name]
        if not isinstance(x, np.ndarray):
            raise InputError(f"input {i.name!r} is a {type(x).__name__}; give a numpy array")
        if tuple(x.shape) != tuple(expected.shape) or x.dtype != np.dtype(expected.type):
            raise InputError(f"input {i.name!r} has shape {x.shape} and dtype {x.dtype}; the "
                             f"model takes {expected.shape} {expected.type}")
        if x.ndim == 4:
            x = x[0] if self._frame.layout == "chw" or i.layout != "NCHW" \
                else x[0].transpose(1, 2, 0)
        if self._normalization is not None and not self._frame.folded:
            from .image import normalize            # no stem to fold into: on the host
            x = normalize(x, self._normalization)
        self._frame.write(x)

    def run(self, output_names=None, input_feed=None):
        if self.closed:
            raise InputError("run: this InferenceSession is closed; make a new one")
        output_names = check_output_names(output_names)
        names = list(self.graph.outputs) if output_names is None else list(output_names)
        unknown = [n for n in names if n not in self.graph.outputs]
        if unknown:
            raise InputError(f"unknown outputs {unknown}; the model's outputs are "
                             f"{self.graph.outputs}")
        self._write_input(input_feed)
        shown = _shows_progress(self.progress)
        segments = self._schedules[shown]
        done = []
        start = time.perf_counter()
        execute = self.device.execute_control_lists
        for segment in _progress(segments, shown, "running layers"):
            t0 = time.perf_counter()
            if type(segment) is LaunchGroup:
                result = execute(segment.launches)
            else:
                result = self._invoke(*segment)[1]
            done.append((segment, result, time.perf_counter() - t0))
        values = {}
        for node in self.host_steps:
            x = values.get(node.inputs[0])
            x = np.array(self._view(node.inputs[0]), np.float64) if x is None else x
            e = np.exp(node.attrs.get("beta", 1.0) * (x - x.max()))
            values[node.outputs[0]] = e / e.sum()
        self._last_segments = done
        self.last_wall_seconds = time.perf_counter() - start
        return [self._output(n, values) for n in names]

    @property
    def last_runs(self):
        """(node, RunResult, host wall seconds) of each layer of the last run, merged from the
        launches' reports when asked (``replay.layer_runs``)."""
        return layer_runs(self._last_segments)

    def _invoke(self, node, call):
        with scratch(self._scratch[node.name]) as lent, shared_zeros(self._zeros):
            result = call()
        recording = self._recordings.get(node.name)
        if recording is not None and lent is not None and lent[1]:
            recording.used_workspace = True
        return result

    def _output(self, name, values):
        y = values[name] if name in values else np.array(self._view(name))
        y = np.asarray(y, np.float32)
        if self.graph.format == "onnx" and y.ndim == 3:
            y = y.transpose(2, 0, 1)
        return y.reshape(self._file_shape(name))

    def profile(self, input_feed=None):
        """Per-layer records of the last run (or of a run on ``input_feed``, or on a zero input)."""
        if input_feed is not None or not self._last_segments:
            if input_feed is None:
                i = self.get_inputs()[0]
                input_feed = {i.name: np.zeros(i.shape, i.type)}
            self.run(None, input_feed)
        leaders = {name: c.names[0] for c in self._chains for name in c.names[1:]}
        return [layer_record(node, self.graph, result, host, self.storage.layer(node),
                             self.storage.notes.get(node.name, ""), leaders.get(node.name, ""),
                             self.weight_storage(node))
                for node, result, host in self.last_runs]

    def weight_storage(self, node):
        """Storage of the layer's weights as its kernel reads them ("-": it has none)."""
        return self.storage.weights(node) if precision_choice.has_weights(self.graph, node) \
            else "-"

    # -- memory ------------------------------------------------------------------------------
    def memory(self):
        """Device bytes this session holds: the activation arena, the prepared weights, the
        recorded launches (uniform streams, control lists, programs) and the zero rows the
        layers share."""
        weights = 0 if self._weights is None else self._weights.nbytes
        arena = 0 if self._arena is None else int(self._arena.nbytes)
        recorded = sum(r.nbytes for r in self._recordings.values()) + \
            (0 if self._code is None else self._code.nbytes) + \
            sum(c.nbytes for c in self._chains)
        zeros = 0 if self._zeros is None else self._zeros.nbytes
        return {"arena_bytes": arena, "weight_bytes": weights, "recorded_bytes": recorded,
                "zero_bytes": zeros, "total_bytes": arena + weights + recorded + zeros,
                "peak_live_activation_bytes": self.plan.peak_live_bytes}

    def close(self):
        self.closed = True
        self._free_layers()
        if self._own_device and self.device is not None:
            self.device.close()
            self.device = None

    def _free_layers(self):
        for chained in self._chains:
            chained.free()
        self._chains = []
        for recording in self._recordings.values():
            recording.free()
        self._recordings = {}
        if self._code is not None:
            self._code.free()
            self._code = None
        if self._zeros is not None:
            self._zeros.free()
            self._zeros = None
        if self._weights is not None:
            self._weights.free()
            self._weights = None
        if self._arena is not None:
            self.device.free(self._arena)
            self._arena = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _shows_progress(progress):
    import sys
    return sys.stderr.isatty() if progress is None else bool(progress)


def _progress(items, progress, desc):
    if not _shows_progress(progress):
        return items
    from tqdm import tqdm
    from ..progress import DELAY_S
    return tqdm(items, desc=desc, unit="layer", leave=False, delay=DELAY_S)
