"""The device interface: one small abstraction, one execution path for every backend.

A backend (the emulator, the Raspberry Pi) provides four primitives: allocate device memory,
free it, view it as bytes, and launch a control list the way the firmware's ``execute_qpu``
mailbox call does. Everything else (buffers as numpy arrays, placing code and uniforms in device
memory, building the control list, checking arguments) lives here, once.
"""

import abc
import dataclasses
import math
import numbers
from typing import Dict, List, Optional

import numpy as np

from asm import isa

from .errors import DeviceError
from .hardware import BUS_ALIAS_SHIFT

# Bus addresses: bits 31:30 select the cache alias of the same memory and are ignored for
# addressing (fact sheet section 3).
BUS_ALIAS_MASK = 0b11 << BUS_ALIAS_SHIFT
BUS_ADDRESS_MASK = (1 << BUS_ALIAS_SHIFT) - 1
# execute_qpu's (uniforms address, code address) pairs; the control list is an array of them.
CONTROL_ENTRY_WORDS = 2
DEFAULT_TIMEOUT_S = 10.0
# The bus address space is 1 GiB (bits 29:0); no buffer can be larger.
MAX_BUFFER_BYTES = 1 << BUS_ALIAS_SHIFT
MAX_ALIGN = 1 << 24
# How the host starts a launch: through the firmware (execute_qpu) or by writing the V3D's
# user-program registers itself (docs/hardware-choices.md "Launch paths"). Every backend takes
# ``launch=`` with one of these; kernels and the runtime never see which.
LAUNCH_PATHS = ("mailbox", "direct")
DEFAULT_LAUNCH_PATH = "mailbox"


class Buffer(np.ndarray):
    """A numpy array living in device memory. ``address`` is its bus address.

    Slicing keeps the device and recomputes the address of the first element, so a view of a
    contiguous part of a buffer can be handed to a kernel too.
    """

    # numpy 2 gives ndarray a read-only ``device`` property (array API); a plain class attribute
    # shadows it, so that a Buffer can carry its vc4nn device.
    device = None

    def __new__(cls, device, allocation, shape, dtype, offset=0):
        array = np.ndarray.__new__(cls, shape, dtype=dtype, buffer=allocation.memory, offset=offset)
        array.device = device
        array.allocation = allocation
        return array

    def __array_finalize__(self, obj):
        self.device = getattr(obj, "device", None)
        self.allocation = getattr(obj, "allocation", None)

    @property
    def address(self):
        """Bus address of element 0 (as the GPU sees it, alias bits included)."""
        if self.allocation is None:
            raise DeviceError("this array is not in device memory")
        offset = self.__array_interface__["data"][0] - self.allocation.memory.ctypes.data
        return self.allocation.bus_address + offset

    def __reduce__(self):
        # Pickling a device buffer copies it to the host.
        return np.asarray(self).copy().__reduce__()


@dataclasses.dataclass
class Allocation:
    """A block of device memory: bus address, size and a writable host view (uint8 ndarray)."""

    bus_address: int
    size: int
    memory: np.ndarray
    handle: object = None
    freed: bool = False
    label: str = ""         # what the buffer holds (shape and dtype), named in memory faults


@dataclasses.dataclass(frozen=True)
class QpuStats:
    """One QPU's part of a launch. Frozen: a backend may hand the same instance to many reports
    (a Pi's, which counts nothing)."""

    instructions: Optional[int] = None    # None where the backend cannot count (a real Pi)
    cycles: Optional[int] = None
    # stall cause -> cycles (cycle-model estimate; empty on real hardware)
    stalls: Dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunResult:
    """What a launch reports. Cycle figures are estimates of the cycle model (None on a Pi)."""

    num_qpus: int
    host_interrupts: int
    qpus: List[QpuStats]
    cycles: Optional[int] = None          # estimate: total V3D clocks from launch to last thrend
    seconds: Optional[float] = None       # estimate at the board's V3D clock, or measured on a Pi
    board: Optional[str] = None
    clock_hz: Optional[float] = None
    estimated: bool = True
    warnings: List[str] = dataclasses.field(default_factory=list)   # dynamic checks in "warn" mode
    programs: Optional[int] = None        # programs launched (one per QPU per launch)
    launches: int = 1
    # estimate: clocks the memory bus was busy (DMA rows, TMU and instruction line fills, the
    # cycle model's MemoryBus); None where the backend cannot tell (a real Pi)
    bus_busy_clocks: Optional[int] = None

    def __post_init__(self):
        if self.programs is None:
            self.programs = self.num_qpus

    @property
    def instructions(self):
        """Instructions executed by all QPUs, or None where the backend cannot count them."""
        counts = [q.instructions for q in self.qpus]
        return None if None in counts else sum(counts)

    def followed_by(self, other):
        """The report of this launch and ``other``, run one after the other on one device:
        times and counts add up, per QPU number (a QPU absent from one launch counts 0)."""
        def add(x, y):
            return None if x is None or y is None else x + y

        idle = QpuStats(0, 0, {})
        qpus = []
        for i in range(max(len(self.qpus), len(other.qpus))):
            first = self.qpus[i] if i < len(self.qpus) else idle
            second = other.qpus[i] if i < len(other.qpus) else idle
            stalls = dict(first.stalls)
            for cause, clocks in second.stalls.items():
                stalls[cause] = stalls.get(cause, 0) + clocks
            qpus.append(QpuStats(add(first.instructions, second.instructions),
                                 add(first.cycles, second.cycles), stalls))
        return RunResult(num_qpus=max(self.num_qpus, other.num_qpus),
                         host_interrupts=self.host_interrupts + other.host_interrupts, qpus=qpus,
                         cycles=add(self.cycles, other.cycles),
                         seconds=add(self.seconds, other.seconds), board=self.board,
                         clock_hz=self.clock_hz, estimated=self.estimated or other.estimated,
                         warnings=self.warnings + other.warnings,
                         programs=self.programs + other.programs,
                         launches=self.launches + other.launches,
                         bus_busy_clocks=add(self.bus_busy_clocks, other.bus_busy_clocks))


class Device(abc.ABC):
    """Base of every backend. Use as a context manager to free all allocations on exit."""

    name = "device"
    launch_path = DEFAULT_LAUNCH_PATH

    def __init__(self):
        self._allocations = []
        self.closed = False

    # -- backend primitives ------------------------------------------------------------------
    @abc.abstractmethod
    def _allocate(self, nbytes, align, flags) -> Allocation:
        """Reserve ``nbytes`` of device memory aligned to ``align`` bytes, with mailbox memory
        ``flags`` (None: the backend's default for the board)."""

    @abc.abstractmethod
    def _release(self, allocation):
        """Give an allocation back."""

    @abc.abstractmethod
    def _launch(self, num_qpus, control_address, timeout) -> RunResult:
        """Run ``num_qpus`` programs listed by a control list in device memory, as execute_qpu."""

    def _launch_sequence(self, launches):
        """RunResults of ``_launch`` on each checked (num_qpus, control_address, timeout), in
        order."""
        launch = self._launch
        return [launch(num_qpus, control_address, timeout)
                for num_qpus, control_address, timeout in launches]

    # -- memory ------------------------------------------------------------------------------
    def alloc(self, shape, dtype=np.uint32, align=4096, flags=None):
        """A zero-filled device buffer of the given shape and dtype (a numeric dtype: the GPU
        writes raw bits into it, which a Python-object or string array cannot hold). ``flags``:
        the mailbox mem_alloc flags (vc4nn.hardware.MEM_FLAG_*: which cache alias the memory
        uses); None takes the board's default (docs/hardware-choices.md)."""
        self._check_open("alloc")
        dtype = buffer_dtype(dtype)
        shape = buffer_shape(shape)
        if isinstance(align, bool) or not isinstance(align, numbers.Integral) \
                or not 0 < align <= MAX_ALIGN or align & (align - 1):
            raise DeviceError(f"align must be a power of two (an int) up to {MAX_ALIGN}, "
                              f"got {align!r}")
        nbytes = max(math.prod(shape) * dtype.itemsize, 1)
        if nbytes > MAX_BUFFER_BYTES:
            raise DeviceError(f"buffer of shape {shape} and dtype {dtype} needs {nbytes} bytes, "
                              f"more than the GPU can address ({MAX_BUFFER_BYTES} bytes)")
        if flags is not None and (isinstance(flags, bool) or not isinstance(flags, numbers.Integral)
                                  or not 0 <= flags < 1 << 32):
            raise DeviceError(f"flags must be a 32-bit int (mailbox mem_alloc flags) or None, "
                              f"got {flags!r}")
        # Whole 32-bit words: the TMU reads words, so a gather of a float16 buffer's last half
        # reads the word holding it (the Pi's allocator hands out whole pages anyway).
        allocation = self._allocate(-(-nbytes // 4) * 4, int(align), flags)
        allocation.memory[:] = 0
        allocation.label = f"{'x'.join(map(str, shape)) or 'scalar'} {dtype}"
        self._allocations.append(allocation)
        return Buffer(self, allocation, shape, dtype)

    def array(self, data, dtype=None, align=4096, flags=None):
        """Copy a host array (or anything numpy accepts) into a new device buffer."""
        self._check_open("array")
        if dtype is not None:
            dtype = buffer_dtype(dtype)
        try:
            data = np.asarray(data, dtype=dtype)
        except (TypeError, ValueError) as error:
            raise DeviceError(f"array: data cannot be read as a numeric array ({error})") from None
        buf = self.alloc(data.shape, data.dtype, align, flags)
        buf[...] = data
        return buf

    def free(self, buf):
        """Give a buffer (or its Allocation) back. Freeing twice is harmless."""
        if isinstance(buf, Buffer):
            allocation = buf.allocation
        elif isinstance(buf, Allocation):
            allocation = buf
        else:
            raise DeviceError(f"free: expected a device buffer from alloc() or array(), got "
                              f"{type(buf).__name__}" + (" (a host array, which needs no free)"
                                                         if isinstance(buf, np.ndarray) else ""))
        if allocation is None or allocation.freed:
            return
        if allocation not in self._allocations:
            raise DeviceError("free: the buffer belongs to another device")
        self._allocations.remove(allocation)
        allocation.freed = True
        self._release(allocation)

    def _check_open(self, method):
        if self.closed:
            raise DeviceError(f"{method}: this {self.name} device is closed (its buffers were "
                              f"freed); open a new one with vc4nn.open_device()")

    def close(self):
        """Free every allocation of this device; the device cannot be used afterwards."""
        self.closed = True
        while self._allocations:
            allocation = self._allocations.pop()
            allocation.freed = True
            self._release(allocation)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def owns(self, buf):
        return isinstance(buf, Buffer) and buf.device is self and not buf.allocation.freed

    # -- execution ---------------------------------------------------------------------------
    def execute(self, program, num_qpus=1, uniforms=None, timeout=DEFAULT_TIMEOUT_S):
        """Run a program on ``num_qpus`` QPUs and wait for it.

        program: an ``asm`` Program, raw code (numpy uint32/uint64 words or bytes), or a device
            Buffer already holding the code.
        uniforms: one entry per QPU; each a sequence of 32-bit values (ints, or floats which are
            stored as float32 bits) or a device Buffer holding them. None = no uniforms.
        timeout: seconds; on the Pi the firmware's timeout, in the emulator the modelled time.
        """
        self._check_open("execute")
        num_qpus = qpu_count(num_qpus)
        timeout = checked_timeout(timeout)
        per_qpu = per_qpu_uniforms(uniforms, num_qpus)
        temporaries = []
        try:
            code = program if self.owns(program) else \
                _labelled(self._place(code_bytes(program), temporaries), "the program's code")
            uniform_buffers = []
            for qpu, values in enumerate(per_qpu):
                if values is None:
                    values = [0]
                if isinstance(values, Buffer):
                    if not self.owns(values):
                        raise DeviceError(f"uniforms of QPU {qpu} are in another device's memory")
                    uniform_buffers.append(values)
                else:
                    words = uniform_words(values, qpu)
                    count = len(words) // 4
                    uniform_buffers.append(_labelled(
                        self._place(words, temporaries),
                        f"the uniforms of QPU {qpu}: {count} word{'s' * (count != 1)}"))
            control = np.zeros((num_qpus, CONTROL_ENTRY_WORDS), dtype=np.uint32)
            for qpu, ubuf in enumerate(uniform_buffers):
                control[qpu] = (ubuf.address, code.address)
            control_buf = _labelled(self._place(control.tobytes(), temporaries), "the control list")
            return self._launch(num_qpus, control_buf.address, timeout)
        finally:
            for buf in temporaries:
                self.free(buf)

    def execute_control_list(self, num_qpus, control_address, timeout=DEFAULT_TIMEOUT_S):
        """Launch exactly as the mailbox's execute_qpu does, from a control list already in memory."""
        self._check_open("execute_control_list")
        return self._launch(qpu_count(num_qpus), control_address_of(control_address),
                            checked_timeout(timeout))

    def execute_control_lists(self, launches, timeout=DEFAULT_TIMEOUT_S):
        """Launch each ``(num_qpus, control_address)`` of ``launches`` in order, each exactly as
        ``execute_control_list`` does (one launch, the V3D caches cleared before it); the list
        of their RunResults. A launch given as ``(num_qpus, control_address, timeout)`` has its
        own timeout instead of ``timeout``. Every launch is checked before the first runs. A
        recorded sequence (a session's layers) goes in one call: the host's work per launch
        stays small."""
        self._check_open("execute_control_lists")
        timeout = checked_timeout(timeout)
        try:
            given = list(launches)
        except TypeError:
            raise DeviceError(f"launches must be a sequence of (num_qpus, control_address[, "
                              f"timeout]) tuples, got {type(launches).__name__}") from None
        checked = []
        for index, launch in enumerate(given):
            if type(launch) is tuple and len(launch) in (2, 3) and type(launch[0]) is int \
                    and type(launch[1]) is int and 1 <= launch[0] <= isa.NUM_QPUS:
                if len(launch) == 2:         # the common cases, without the full checks
                    checked.append((launch[0], launch[1], timeout))
                    continue
                if len(launch) == 3 and type(launch[2]) is float and 0 < launch[2] < math.inf:
                    checked.append(launch)
                    continue
            if not isinstance(launch, (tuple, list)) or len(launch) not in (2, 3):
                raise DeviceError(f"launch {index}: expected a (num_qpus, control_address[, "
                                  f"timeout]) tuple, got {launch!r}")
            try:
                checked.append((qpu_count(launch[0]), control_address_of(launch[1]),
                                checked_timeout(launch[2]) if len(launch) == 3 else timeout))
            except DeviceError as error:
                raise DeviceError(f"launch {index}: {error}") from None
        return self._launch_sequence(checked)

    def _place(self, data, temporaries):
        raw = np.frombuffer(bytes(data), dtype=np.uint8)
        buf = self.array(raw)
        temporaries.append(buf)
        return buf


def _labelled(buf, label):
    """``buf``, its allocation named ``label`` in memory faults (a program reading past its
    uniforms hears whose uniforms ran out, not of a "4 uint8" buffer)."""
    buf.allocation.label = label
    return buf


def checked_launch_path(launch):
    """``launch`` if it names a launch path (LAUNCH_PATHS), else a DeviceError."""
    if launch not in LAUNCH_PATHS:
        raise DeviceError(f"launch path (launch=) must be one of "
                          f"{', '.join(map(repr, LAUNCH_PATHS))}, got {launch!r}")
    return launch


def control_address_of(control_address):
    """``control_address`` as an int, if it is one (a bus address)."""
    if isinstance(control_address, bool) or not isinstance(control_address, numbers.Integral):
        raise DeviceError(f"control_address must be an int bus address, got "
                          f"{control_address!r}")
    return int(control_address)


def qpu_count(num_qpus):
    """``num_qpus`` as an int, if it is a whole number of QPUs the V3D has."""
    if isinstance(num_qpus, bool) or not isinstance(num_qpus, numbers.Integral) \
            or not 1 <= num_qpus <= isa.NUM_QPUS:
        raise DeviceError(f"num_qpus must be an int 1..{isa.NUM_QPUS}, got {num_qpus!r}")
    return int(num_qpus)


def checked_timeout(timeout):
    """``timeout`` (seconds) as a float: a finite positive number, or None for no timeout."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise DeviceError(f"timeout must be a number of seconds (or None), got {timeout!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise DeviceError(f"timeout must be a finite number of seconds > 0 (or None for none), "
                          f"got {timeout!r}")
    return float(timeout)


def per_qpu_uniforms(uniforms, num_qpus):
    """The uniforms argument as a list with one entry per QPU (None: no uniforms)."""
    if uniforms is None:
        return [None] * num_qpus
    if isinstance(uniforms, (Buffer, str, bytes)) \
            or not isinstance(uniforms, (list, tuple, np.ndarray)):
        raise DeviceError(f"uniforms must be a list with one entry per QPU (a list of values or "
                          f"a device buffer), got {type(uniforms).__name__}")
    if len(uniforms) != num_qpus:
        raise DeviceError(f"uniforms given for {len(uniforms)} QPUs but num_qpus is {num_qpus}")
    for qpu, values in enumerate(uniforms):
        if not (values is None or isinstance(values, (Buffer, list, tuple, np.ndarray))):
            raise DeviceError(f"uniforms of QPU {qpu} must be a list of values or a device "
                              f"buffer, got {type(values).__name__}")
    return list(uniforms)


def buffer_dtype(dtype):
    """``dtype`` as a numpy dtype the GPU can fill: booleans, integers, floats, complex."""
    try:
        dtype = np.dtype(dtype)
    except TypeError as error:
        raise DeviceError(f"dtype {dtype!r} is not a numpy dtype ({error})") from None
    if dtype.kind not in "biufc" or dtype.fields is not None:
        raise DeviceError(f"dtype {dtype} cannot live in device memory: the GPU writes raw bits; "
                          f"use a numeric dtype (e.g. uint32, float32)")
    return dtype


def buffer_shape(shape):
    """``shape`` (an int or a sequence of ints) as a tuple of non-negative ints."""
    dims = (shape,) if not isinstance(shape, (tuple, list)) else tuple(shape)
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
            raise DeviceError(f"shape must be an int or a tuple of ints, got {shape!r}")
        if dim < 0:
            raise DeviceError(f"shape {shape!r} has a negative dimension")
    return tuple(int(d) for d in dims)


def code_bytes(program):
    """Bytes of code from a Program, numpy words (uint32 pairs or uint64) or raw bytes."""
    if hasattr(program, "to_bytes"):
        return program.to_bytes()
    if isinstance(program, (bytes, bytearray, memoryview)):
        data = bytes(program)
    else:
        words = np.asarray(program)
        if words.dtype == np.uint64:
            data = words.astype("<u8").tobytes()
        elif words.dtype == np.uint32:
            data = words.astype("<u4").tobytes()
        else:
            raise DeviceError(f"code must be uint32 or uint64 words, bytes or a Program; "
                              f"got an array of {words.dtype}")
    if len(data) == 0 or len(data) % isa.INSTRUCTION_BYTES:
        raise DeviceError(f"code is {len(data)} bytes; it must be a non-empty multiple of 8")
    return data


def streams_in_buffer(alloc, qpus, streams_at):
    """Uniform streams whose records hold addresses inside the streams themselves, in one device
    buffer: ``streams_at(bases)`` gives each QPU's words when the streams start at ``bases``,
    ``alloc(words)`` a uint32 buffer. Returns each QPU's view of the buffer."""
    sizes = [len(words) for words in streams_at([0] * qpus)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    buf = alloc(int(starts[-1]))
    bases = [buf.address + int(s) * 4 for s in starts[:-1]]
    for q, words in enumerate(streams_at(bases)):
        buf[starts[q]:starts[q + 1]] = np.frombuffer(uniform_words(words), dtype="<u4")
    return [buf[starts[q]:starts[q + 1]] for q in range(qpus)]


def uniform_words(values, qpu=0):
    """32-bit uniform words from ints (signed or unsigned) and floats (stored as float32)."""
    if isinstance(values, (list, tuple)) and values and all(type(v) is int for v in values):
        # The common case (kernels' streams of addresses and setup words), vectorised; values
        # out of range take the checking path below, which names them.
        try:
            words = np.array(values, dtype=np.int64)
        except OverflowError:
            words = None
        if words is not None and words.min() >= -(1 << 31) and words.max() < (1 << 32):
            return (words & 0xFFFFFFFF).astype("<u4").tobytes()
    out = []
    for i, v in enumerate(values):
        if isinstance(v, (float, np.floating)):
            out.append(int(np.array(v, dtype=np.float32).view(np.uint32)))
        elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            if not -(1 << 31) <= int(v) < (1 << 32):
                raise DeviceError(f"uniforms: value {i} of QPU {qpu} = {v} does not fit in "
                                  f"32 bits")
            out.append(int(v) & 0xFFFFFFFF)
        elif isinstance(v, Buffer):
            out.append(v.address)
        else:
            raise DeviceError(f"uniforms: value {i} of QPU {qpu} is {type(v).__name__}; "
                              f"give ints, floats or device buffers (their address)")
    if not out:
        out = [0]
    return np.asarray(out, dtype="<u4").tobytes()

