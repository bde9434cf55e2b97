"""The VPM, shared by all QPUs, with its generic QPU access (facts §3); its two DMA engines are
in dma.py, its checks in vpm_checks.py, its geometry in vpm_layout.py.

Generic QPU access reaches rows 0..63; DMA addresses have a 7-bit Y, so 128 rows are modelled,
and DMA beyond row 63 is flagged (rule ``vpm_out_of_range``, facts §5.15). The readings of the
guide used here (packed and laned sub-word vectors) are listed in docs/hardware-choices.md
"Emulator units" and pinned by tests/emulator/test_vpm.py.

Time: every method takes the QPU's clock ``now`` (V3D clocks) and returns when the access
completes.
"""

import collections
import functools

import numpy as np

from asm import isa

from .bus import MemoryBus
from .dma import DmaEngines
from .vpm_checks import MESSAGES
from .vpm_layout import ROW_BYTES, ROW_WORDS, VERTICAL_SPAN, WORD_BYTES, ZEROS, field_count, \
    scalar

_SIZE_BYTES = {code: bits // 8 for bits, code in isa.VPM_SIZES.items()}


class GenericSetup:
    """A generic block read or write setup; ``addr`` advances by ``stride`` after each vector."""

    __slots__ = ("horizontal", "laned", "width", "stride", "addr", "remaining", "ready")

    def __init__(self, word, table):
        self.horizontal = bool(isa.field_get(word, table["horizontal"]))
        self.laned = bool(isa.field_get(word, table["laned"]))
        self.width = _SIZE_BYTES.get(isa.field_get(word, table["size"]))
        self.stride = field_count(word, table["stride"])
        self.addr = isa.field_get(word, table["addr"])
        self.remaining = field_count(word, table["num"]) if "num" in table else None
        self.ready = 0

    def positions(self):
        return generic_positions(self.horizontal, self.laned, self.width, self.addr)

    def advance(self):
        self.addr = (self.addr + self.stride) % (1 << isa.VPM_GENERIC_READ["addr"][1])


@functools.lru_cache(maxsize=None)
def generic_positions(horizontal, laned, width, addr):
    """(VPM byte index of each byte of the 16 elements, VPM word indices touched).

    ADDR is {line, sel}: sel (the low 1 or 2 bits for 16/8-bit) picks the half-word or byte;
    the line is Y[5:0] (horizontal) or {Y[5:4], X[3:0]} (vertical), facts §3.
    32-bit: element i is line word i. Laned: element i is sub-word ``sel`` of line word i.
    Packed: the 16 elements are consecutive sub-words of consecutive line words, and ``sel``
    picks which group of 16 (bytes 16*sel.. for 8-bit, 32*sel.. for 16-bit).
    """
    per_word = WORD_BYTES // width
    sel, line = addr % per_word, addr // per_word
    element = np.arange(isa.SIMD_WIDTH)
    if width == WORD_BYTES:
        start = WORD_BYTES * element
    elif laned:
        start = WORD_BYTES * element + width * sel
    else:
        start = isa.SIMD_WIDTH * width * sel + width * element
    along = (start[:, None] + np.arange(width)).reshape(-1)
    if horizontal:
        index = ROW_BYTES * (line % isa.VPM_ROWS) + along
    else:
        column = line % ROW_WORDS
        base = VERTICAL_SPAN * ((line // ROW_WORDS) % (isa.VPM_ROWS // VERTICAL_SPAN))
        index = ROW_BYTES * (base + along // WORD_BYTES) + WORD_BYTES * column + along % WORD_BYTES
    words = np.unique(index // WORD_BYTES)
    index.setflags(write=False)
    words.setflags(write=False)
    return index, words


class Vpm(DmaEngines):
    """The VPM: its storage, each QPU's generic read and write setups, and (from DmaEngines) the
    DMA engines. Every method takes the QPU's clock ``now`` and returns when the access
    completes."""

    TOTAL_ROWS = isa.VPM_DMA_ROWS

    def __init__(self, memory, timing, checks, bus=None):
        self.memory, self.timing, self.checks = memory, timing, checks
        self.bus = bus if bus is not None else MemoryBus()
        self.words = np.zeros(self.TOTAL_ROWS * ROW_WORDS, dtype="<u4")
        self.bytes = self.words.view(np.uint8)
        n = isa.NUM_QPUS
        self._reads = [collections.deque() for _ in range(n)]
        self._last_read = [None] * n          # exhausted setup, kept to model overruns
        self._write = [None] * n
        DmaEngines.__init__(self)

    # -- setups ---------------------------------------------------------------------------------
    def write_vr_setup(self, qpu, value, now):
        word = scalar(value)
        if isa.field_get(word, isa.VPM_GENERIC_READ["id"]) == isa.VPM_GENERIC_ID:
            self._unused_bits(word, isa.VPM_GENERIC_READ, "generic VPM read setup", qpu)
            self._queue_read(qpu, word, now)
        else:
            self._write_vdr_setup(qpu, word)
        return now

    def write_vw_setup(self, qpu, value, now):
        word = scalar(value)
        kind = isa.field_get(word, isa.VDW_SETUP["id"])
        if kind == isa.VPM_GENERIC_ID:
            self._unused_bits(word, isa.VPM_GENERIC_WRITE, "generic VPM write setup", qpu)
            setup = GenericSetup(word, isa.VPM_GENERIC_WRITE)
            if self._valid_generic(setup, word, "vw_setup", qpu):
                self._write[qpu] = setup
        else:
            self._write_vdw_setup(qpu, word)
        return now

    def _unused_bits(self, word, table, what, qpu):
        unused = word & isa.unused_bits(table)
        if unused:
            self._report("vpm_setup_unused_bits", qpu, "setup_unused_bits", what, word, unused)

    def _valid_generic(self, setup, word, register, qpu):
        if setup.width is None:
            self._report("vpm_setup_invalid", qpu, "reserved_size", register, word)
            return False
        return True

    def _queue_read(self, qpu, word, now):
        setup = GenericSetup(word, isa.VPM_GENERIC_READ)
        if not self._valid_generic(setup, word, "vr_setup", qpu):
            return
        queue = self._reads[qpu]
        if len(queue) >= self.timing.vpm_read_queue:
            self._report("vpm_read_queue_overflow", qpu, "read_queue_overflow", len(queue),
                         sum(s.remaining for s in queue), self.timing.vpm_read_queue)
        setup.ready = now + self.timing.vpm_read_latency
        queue.append(setup)

    # -- generic access -------------------------------------------------------------------------
    def read(self, qpu, now):
        queue = self._reads[qpu]
        if queue:
            setup = queue[0]
            setup.remaining -= 1
            if not setup.remaining:
                self._last_read[qpu] = queue.popleft()
        else:
            setup = self._last_read[qpu]
            if setup is None:
                self._report("vpm_missing_setup", qpu, "read_missing_setup")
                return ZEROS.copy(), now
            self._report("vpm_read_past_setup", qpu, "read_past_setup")
        index, words = self._generic_positions(setup, "read", qpu)
        self._check_race(qpu, words, False, "a generic VPM read")
        raw = self.bytes[index]
        if setup.width == WORD_BYTES:
            values = raw.view("<u4").astype(np.uint32)
        else:   # 8/16-bit reads are zero-extended (docs/hardware-choices.md)
            values = raw.view(f"<u{setup.width}").astype(np.uint32)
        setup.advance()
        return values, max(now, setup.ready)

    def write(self, qpu, values, now):
        setup = self._write[qpu]
        if setup is None:
            self._report("vpm_missing_setup", qpu, "write_missing_setup")
            return now
        index, words = self._generic_positions(setup, "write", qpu)
        self._check_race(qpu, words, True, "a generic VPM write")
        data = np.asarray(values, dtype=np.uint32).astype("<u4", copy=False)
        self.bytes[index] = data.view(np.uint8).reshape(-1, WORD_BYTES)[:, :setup.width].reshape(-1)
        setup.advance()
        return now

    def finish(self, qpus):
        """End-of-run checks; clears the per-launch DMA and read-queue state first."""
        problems = []
        for qpu in qpus:
            store = self._store[qpu]
            if store is not None and not store.settled:
                problems.append(("dma_in_flight_at_end", qpu, "store_in_flight"))
            unread = sum(s.remaining for s in self._reads[qpu])
            if unread:
                problems.append(("vpm_read_pending_at_end", qpu, "read_pending", unread))
            self._reads[qpu].clear()
            self._load[qpu] = self._store[qpu] = None
        self._unsettled = [d for d in self._unsettled if d.qpu not in qpus]
        for problem in problems:
            self._report(*problem)

    # -- helpers --------------------------------------------------------------------------------
    def _generic_positions(self, setup, what, qpu):
        line = setup.addr // (WORD_BYTES // setup.width)
        if line >= isa.VPM_ROWS:      # Y (horizontal) or {Y[5:4], X} (vertical) past 6 bits
            self._report("vpm_out_of_range", qpu, "generic_out_of_range", what, setup.addr)
        return setup.positions()

    def _report(self, rule, qpu, key, *args):
        self.checks.report(rule, MESSAGES[key](*args), qpu)

    def _check_race(self, qpu, words, writes_vpm, what):
        """A VPM access overlapping a DMA its issuer has not yet waited for races with it on a
        real Pi, unless both only read the VPM (rule vpm_dma_race, docs/cycle-model.md)."""
        for dma in self._unsettled:
            if (writes_vpm or dma.kind == "load") and dma.words[words].any():
                self._report("vpm_dma_race", qpu, "dma_race", what, dma.qpu, qpu, dma.kind)
                return
