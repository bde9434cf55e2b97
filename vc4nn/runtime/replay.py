"""Record a layer call's launches once (at load, without running them), relaunch them afterwards
without the layer's host work.

A session's layers always run on the same buffers (arena views, prepared weights), so the code,
uniforms and control lists a layer call builds are the same on every run. While a call is
recorded, the device's frees are deferred (the call's temporaries: code, uniforms, control lists,
workspaces stay in device memory), each launch's control list address is kept, and the launch
itself is not run (``capture(run=False)``): the session records every layer at load, so the
programs are assembled and the uniform streams built then, once. ``pack()`` then copies the code,
uniform streams and control lists that ``Device.execute`` placed (each in an allocation of its
own, page-aligned) into one allocation per layer and frees the originals; a replay launches
them with ``execute_control_lists`` (each launch one execute_qpu, as the mailbox takes it).

A session's run is a ``schedule``: the recorded launches of consecutive layers go to the
device in one ``execute_control_lists`` call (a ``LaunchGroup``), layers that are not recorded
are called; the per-layer reports are merged from the launches' only when asked
(``layer_runs``, for ``profile()``), so a run's host work is little more than the input copy.

A layer call that launched nothing (it computed on the host) is not replayable and is called
again each run. Layer calls of ``vc4nn.nn`` given ``out=`` and device buffers do all their work in
their launches (NN-CONTRACT.md), which is what makes a replay equal to the call.
"""

import contextlib
import numpy as np

from ..device import CONTROL_ENTRY_WORDS, Buffer, RunResult, per_qpu_uniforms, qpu_count
from ..nn.layer_call import chain

# A control list entry is (uniforms address, code address).
CODE_WORD = 1
# Code, uniform streams and control lists start on 64-byte boundaries in a packed layer: whole
# uniform-cache and TMU lines (code needs 8).
PACK_ALIGN = 64


@contextlib.contextmanager
def patched(obj, name, replacement):
    """``obj.name`` is ``replacement`` inside the block, whatever it was before (nests)."""
    had = name in vars(obj)
    before = vars(obj).get(name)
    setattr(obj, name, replacement)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, before)
        else:
            delattr(obj, name)


def stream_words(values):
    """Words of one QPU's uniforms as Device.execute places them: one a value (uniform_words
    encodes each as one word or refuses it), [0] for None or none. Counted, not encoded: the
    recorded call encodes them itself, and values it refuses fail that call."""
    if values is None:
        return 1
    if isinstance(values, Buffer):
        return values.nbytes // 4
    return max(len(values), 1)


def _align(n):
    return -(-n // PACK_ALIGN) * PACK_ALIGN


class CodePool:
    """The programs of a session's recordings, each distinct program once in device memory."""

    def __init__(self, device):
        self.device = device
        self.programs = {}                  # code bytes -> device buffer

    def address(self, code):
        key = np.asarray(code).tobytes()
        buf = self.programs.get(key)
        if buf is None:
            buf = self.programs[key] = self.device.array(np.frombuffer(key, np.uint8))
        return buf.address

    @property
    def nbytes(self):
        return sum(int(buf.allocation.size) for buf in self.programs.values())

    def keep_first(self, count):
        """Free the programs added after the first ``count`` (those of a forgotten recording)."""
        for key in list(self.programs)[count:]:
            self.device.free(self.programs.pop(key))

    def keep_used(self, recordings):
        """Free the programs no launch of ``recordings`` runs (a layer recorded again leaves
        its first recording's programs behind)."""
        used = {code for r in recordings for launch in r.entries for _, code in launch}
        for key, buf in list(self.programs.items()):
            if buf.address not in used:
                self.device.free(self.programs.pop(key))

    def free(self):
        programs, self.programs = self.programs, {}
        for buf in programs.values():
            self.device.free(buf)


class Recording:
    """The launches of one layer call and the device buffers they need kept."""

    def __init__(self, device):
        self.device = device
        self.launches = []          # (num_qpus, control list address, timeout)
        self.stream_words = []      # per launch: each QPU's uniform stream length in words, or
        #                             None (launched without Device.execute: not chainable)
        self.entries = []           # after pack(): per launch [(uniforms, code address)]
        self.used_workspace = False  # the call took a workspace from the lent scratch region
        self.kept = []
        self.placed = {}            # bus address -> buffer Device.execute placed (code, uniforms,
        self.packed = None          # control list); after pack(): the one allocation of them

    @contextlib.contextmanager
    def capture(self, run=True):
        """Record the launches made inside the block; ``run=False`` records without running
        them (each launch reports an empty RunResult)."""
        device = self.device
        launch, place, execute = device._launch, device._place, device.execute
        lengths = []                # of the streams of the Device.execute call being made

        def recorded_execute(program, num_qpus=1, uniforms=None, *args, **kwargs):
            lengths[:] = map(stream_words, per_qpu_uniforms(uniforms, qpu_count(num_qpus)))
            try:
                return execute(program, num_qpus, uniforms, *args, **kwargs)
            finally:
                lengths.clear()

        def recorded_launch(num_qpus, control_address, timeout):
            self.launches.append((num_qpus, control_address, timeout))
            self.stream_words.append(list(lengths) if len(lengths) == num_qpus else None)
            if run:
                return launch(num_qpus, control_address, timeout)
            return RunResult(num_qpus=num_qpus, host_interrupts=0, qpus=[], seconds=None,
                             estimated=False, launches=1)

        def recorded_place(data, temporaries):
            buf = place(data, temporaries)
            self.placed[buf.address] = buf
            return buf

        with patched(device, "_launch", recorded_launch), \
                patched(device, "execute", recorded_execute), \
                patched(device, "free", self.kept.append), \
                patched(device, "_place", recorded_place):
            yield self

    def pack(self, code_pool=None):
        """Move what Device.execute placed into one allocation (programs into ``code_pool``, a
        CodePool, if given); launches point there."""
        if not self.launches or self.packed is not None:
            return
        blobs, where = [], {}               # old address -> offset in the packed allocation
        size = 0

        def add(address):
            nonlocal size
            if address not in where:
                data = np.asarray(self.placed[address]).view(np.uint8)
                where[address] = size
                blobs.append((size, data))
                size = _align(size + data.nbytes)
            return where[address]

        lists = []                          # (offset, [(word, relative to the packing)])
        for num_qpus, control, timeout in self.launches:
            entries = np.asarray(self.placed[control]).view("<u4")[:num_qpus * CONTROL_ENTRY_WORDS]
            # A uniforms address the layer gave as its own buffer stays as it is.
            words = []
            for index, word in enumerate(map(int, entries)):
                if word not in self.placed:
                    words.append((word, False))
                elif code_pool is not None and index % CONTROL_ENTRY_WORDS == CODE_WORD:
                    words.append((code_pool.address(self.placed[word]), False))
                else:
                    words.append((add(word), True))
            lists.append((size, words))
            size = _align(size + 4 * len(words))
        packed = self.device.alloc(max(size, 1), np.uint8)
        for offset, data in blobs:
            packed[offset:offset + data.nbytes] = data
        base = packed.address
        launches, entries = [], []
        for (offset, words), (num_qpus, _, timeout) in zip(lists, self.launches):
            fixed = np.array([base + w if relative else w for w, relative in words], "<u4")
            packed[offset:offset + fixed.nbytes] = fixed.view(np.uint8)
            launches.append((num_qpus, base + offset, timeout))
            entries.append([tuple(map(int, pair)) for pair in fixed.reshape(num_qpus, -1)])
        placed = {id(buf.allocation) for buf in self.placed.values()}
        self.kept = [buf for buf in self.kept if id(getattr(buf, "allocation", buf)) not in placed]
        for buf in self.placed.values():
            self.device.free(buf)
        self.placed, self.launches, self.packed = {}, launches, packed
        self.entries = entries

    def buffers(self):
        """The device buffers holding this call's code, uniforms and control lists."""
        return self.kept + ([] if self.packed is None else [self.packed])

    @property
    def nbytes(self):
        return sum(int(getattr(getattr(b, "allocation", b), "size", 0)) for b in self.buffers())

    def free(self):
        held = self.buffers() + list(self.placed.values())
        self.kept, self.placed, self.packed = [], {}, None
        for buf in held:
            self.device.free(buf)

    def forget(self):
        """Free what the call kept and drop its launches: the call is no longer replayable."""
        self.free()
        self.launches, self.stream_words, self.entries = [], [], []


class LaunchGroup:
    """Recorded launches of consecutive layers, launched in one call: ``launches`` [(num_qpus,
    control address, timeout)] (each launch keeps its own timeout); ``layers`` [(node, how
    many of the launches)]."""

    __slots__ = ("launches", "layers")

    def __init__(self, launches, layers):
        self.launches, self.layers = launches, layers


def schedule(steps, recordings, per_layer=False, chains=()):
    """A run of ``steps`` [(node, call or None)] as segments, in order: a ``LaunchGroup`` (the
    recorded launches of one or more layers: one ``execute_control_lists`` call; one group per
    layer if ``per_layer``) or the (node, call) of a layer called every run (not recorded, or
    its call launched nothing). The layers of a chain (``replay_chain.Chain``) are its one
    launch: the first layer counts it, the others 0 launches."""
    chained = {}                    # layer name -> its chain's launches, [] after the first
    for each in chains:
        chained[each.names[0]] = [(each.pair[0], each.pair[1], each.timeout)]
        chained.update((name, []) for name in each.names[1:])
    segments = []
    for node, call in steps:
        if call is None:
            continue
        recording = recordings.get(node.name)
        if node.name in chained:
            launches = chained[node.name]
            if not launches:
                segments[-1].layers.append((node, 0))
                continue
        elif recording is None or not recording.launches:
            segments.append((node, call))
            continue
        else:
            launches = recording.launches
        last = segments[-1] if segments else None
        if per_layer or not isinstance(last, LaunchGroup):
            last = LaunchGroup([], [])
            segments.append(last)
        last.launches.extend(launches)
        last.layers.append((node, len(launches)))
    return segments


def layer_runs(done):
    """(node, RunResult, host wall seconds) per layer from a run's ``done`` [(segment, its
    result: the RunResult list of a group or a call's RunResult, wall seconds)]. A layer
    launched in one call with others has no wall time of its own (None)."""
    runs = []
    for segment, result, seconds in done:
        if type(segment) is not LaunchGroup:
            runs.append((segment[0], result, seconds))
            continue
        at = 0
        for node, count in segment.layers:
            if not count:               # ran in the launch of the layer before it
                runs.append((node, chained_run(result[at - 1]), None))
                continue
            part = chain(result[at:at + count])
            at += count
            if runs and runs[-1][0] is node:            # a layer split across groups
                runs[-1] = (node, runs[-1][1].followed_by(part), None)
            else:
                runs.append((node, part, seconds if len(segment.layers) == 1 else None))
    return runs


def chained_run(launch):
    """The report of a layer that ran inside ``launch`` (chained to the layer before it): no
    launch and no time of its own; the launch's report carries its work."""
    return RunResult(num_qpus=launch.num_qpus, host_interrupts=0, qpus=[], cycles=0,
                     seconds=None if launch.seconds is None else 0.0, board=launch.board,
                     clock_hz=launch.clock_hz, estimated=launch.estimated, programs=0,
                     launches=0)
