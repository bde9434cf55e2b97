"""The VPM, shared by all QPUs, with its generic QPU access and its two DMA engines (facts §3).

Storage: rows of 16 little-endian 32-bit words. Generic QPU access reaches rows 0..63; DMA
addresses have a 7-bit Y, so 128 rows are modelled, and DMA beyond row 63 is flagged (rule
``vpm_out_of_range``, facts §5.15). The readings of the guide used here (packed and laned sub-word
vectors, DMA byte offsets, VPITCH, BLOCKMODE) are listed in docs/hardware-choices.md
"Emulator units" and pinned by tests/emulator/test_vpm.py and test_dma.py.

A VPM *line* is what one vector or one DMA row runs along: a row (horizontal) or a column
(vertical). Along a line, byte ``p`` is byte ``p % 4`` of the line's word ``p // 4``.

Time: every method takes the QPU's clock ``now`` (V3D clocks) and returns when the access
completes. A DMA has its functional effect when it starts; its completion time comes from the
cycle model (vc4nn.emulator.timing) and the shared memory bus.
"""

import bisect
import collections
import functools
from types import MappingProxyType

import numpy as np

from asm import isa

from ..device import BUS_ADDRESS_MASK, BUS_ALIAS_MASK
from ..hardware import BUS_ALIAS_SHIFT, VC_L2_ALLOCATING_ALIASES, VC_L2_CACHED_ALIASES
from .cache import LruCache
from .checks import Rule
from .timing import Timing

WORD_BYTES = 4
ROW_WORDS = isa.SIMD_WIDTH
ROW_BYTES = ROW_WORDS * WORD_BYTES
VERTICAL_SPAN = isa.SIMD_WIDTH          # a vertical vector covers 16 rows starting at Y[5:4]
_ZEROS = np.zeros(isa.SIMD_WIDTH, dtype=np.uint32)
_ZEROS.setflags(write=False)
_SIZE_BYTES = {code: bits // 8 for bits, code in isa.VPM_SIZES.items()}

# Dynamic checks of this unit (vc4nn/emulator/checks.py): rule -> Rule(default, catches, hardware).
CHECK_RULES = MappingProxyType({
    "vpm_setup_invalid": Rule(
        "error", "a vr_setup/vw_setup word that selects no setup, or a reserved SIZE or MODEW",
        "the guide leaves these codes undefined (facts §3); no model of what a Pi does "
        "exists, so any result the emulator gave would be invented"),
    "vpm_setup_unused_bits": Rule(
        "warn", "a setup word with bits set that no field uses",
        "the emulator ignores them, as the hardware presumably does; nothing published says "
        "so, and a computed setup that spills into them is usually a bug"),
    "dma_pitch_out_of_range": Rule(
        "error", "an extended VDR pitch word (1001 in 31:28) with bits 27:14 set: a pitch of "
        "16 KB or more",
        "qmkl reports DMA rows 16 KB and more apart loading the wrong rows on a Pi; 14 bits "
        "are proven by py-videocore's SGEMM (facts §5.18)"),
    "vpm_missing_setup": Rule(
        "error", "a VPM read or write, or a DMA start, with no setup written before",
        "a read with no setup waits for vectors that never come (hangs, facts §3); a write or "
        "DMA uses whatever setup the previous program left in the hardware"),
    "vpm_read_past_setup": Rule(
        "error", "more VPM reads than the read setups' NUM",
        "the read waits on an empty read FIFO: the QPU hangs (facts §3)"),
    "vpm_read_queue_overflow": Rule(
        "error", "a third VPM read setup queued while two have vectors unread",
        "the guide allows 2 queued setups (facts §3); the third is lost and the reads that "
        "count on it hang"),
    "vpm_read_pending_at_end": Rule(
        "warn", "a QPU ended with VPM vectors of its read setups unread",
        "whether the vectors stay in the QPU's read FIFO into its next program is not "
        "documented"),
    "vpm_out_of_range": Rule(
        "warn", "a VPM access reaching rows 64..127 (generic access: ADDR beyond Y 63; DMA: "
        "Y 64..127), or a DMA row running past its VPM row or column",
        "the VPM has 12 KB on a Pi 1 but how much a user program owns is disputed (facts "
        "§5.15); how a row wraps is not documented. The emulator wraps into 128 rows"),
    "vpm_dma_race": Rule(
        "error", "a VPM access overlapping a DMA its issuer has not waited for, unless both "
        "only read the VPM (docs/cycle-model.md)",
        "on a Pi the access sees the VPM before or during the DMA (stale or torn data); the "
        "emulator applies a DMA at once and cannot show it"),
    "dma_alignment": Rule(
        "warn", "a DMA memory address that is not a multiple of the element size",
        "the emulator drops the low bits, as the address register presumably does; not "
        "documented"),
    "dma_unsupported": Rule(
        "error", "a DMA store with LANED set (the guide: write as 0) or vertical BLOCKMODE",
        "undefined by the guide and not modelled; any result would be invented"),
    "dma_in_flight_at_end": Rule(
        "warn", "a QPU ended without waiting for its last DMA store",
        "the store keeps running after thrend; the host's wait for the launch (a mailbox "
        "round trip or register polls, microseconds) normally outlasts it, but nothing "
        "guarantees that the data has landed"),
})


def _whose(issuer, qpu):
    return "its own" if issuer == qpu else f"QPU {issuer}'s"


# The messages of those checks, by key: the Python Vpm below and the C core (csrc/vpm.c,
# csrc/dma.c, through ccore's glue) both report with these.
MESSAGES = MappingProxyType({
    "setup_unused_bits": lambda what, word, unused: (
        f"{what} {word:#010x} sets bits {unused:#010x} that no field uses (the emulator "
        f"ignores them)"),
    "pitch_out_of_range": lambda word: (
        f"extended DMA load pitch word {word:#010x} asks for a pitch of {word & 0x0FFFFFFF} "
        f"bytes; the hardware honours 14 bits (pitches below 16384, facts §5.18) and rows 16 KB "
        f"or more apart load wrongly on a Pi"),
    "selects_no_setup": lambda register, word: (
        f"{register} {word:#010x} selects no setup (bits 31:30 = 01)"),
    "reserved_size": lambda register, word: f"{register} {word:#010x} has the reserved SIZE 3",
    "unused_modew": lambda word: f"DMA store setup {word:#010x} has the unused MODEW 1",
    "read_queue_overflow": lambda queued, unread, limit: (
        f"a third VPM read setup while {queued} are queued with {unread} vectors unread "
        f"(facts §3: at most {limit})"),
    "read_missing_setup": lambda: "VPM read with no read setup (hangs on a Pi)",
    "read_past_setup": lambda: "VPM read past the count NUM of its setup (hangs on a Pi)",
    "write_missing_setup": lambda: "VPM write with no write setup",
    "load_missing_setup": lambda: "vr_addr written with no DMA load setup",
    "store_missing_setup": lambda: "vw_addr written with no DMA store setup",
    "store_laned": lambda word: (
        f"DMA store setup {word:#010x} sets LANED, which the guide says to write as 0"),
    "store_vertical_blockmode": lambda: (
        "BLOCKMODE with a vertical DMA store is not modelled (docs/hardware-choices.md)"),
    "store_columns_past_row": lambda units, x: (
        f"DMA store of {units} columns from column {x} runs past column {ROW_WORDS - 1}"),
    "generic_out_of_range": lambda what, addr: (
        f"generic VPM {what} at ADDR {addr} reaches past row {isa.VPM_ROWS - 1}, the generic "
        f"access range (facts §3); the emulator wraps it"),
    "dma_beyond_user_rows": lambda what, row: (
        f"{what} reaches VPM row {row}; rows {isa.VPM_ROWS}..{isa.VPM_DMA_ROWS - 1} are "
        f"reachable only by DMA and may not belong to user programs (facts §5.15)"),
    "dma_row_past_end": lambda what: f"{what} row runs past the end of its VPM row (64 bytes)",
    "dma_race": lambda what, issuer, qpu, kind: (
        f"{what} touches VPM words of {_whose(issuer, qpu)} DMA {kind} that has not been waited "
        f"for (vr_wait/vw_wait)"),
    "dma_alignment": lambda kind, address, width: (
        f"DMA {kind} memory address {address:#010x} is not a multiple of the element size "
        f"({width} bytes); the low bits are dropped"),
    "store_in_flight": lambda: (
        "the program ended without waiting for its last DMA store (read vw_wait): the host "
        "may read memory before it lands"),
    "read_pending": lambda unread: (
        f"the program ended with {unread} VPM vectors of its read setups unread"),
})


class MemoryBus:
    """The memory path the DMA engines, the TMUs and the uniform fetches share, with the V3D L2.

    The bus carries one transfer at a time: a transfer takes the first idle stretch at or after
    the clock it is asked for, so transfers of all 12 QPUs queue behind each other (contention).
    The QPUs are stepped one at a time, and one that waited inside a unit (a DMA behind its own
    previous one) books its slot at that later clock before the others have asked for theirs;
    keeping the idle stretches (not just the end of the last booking) lets their earlier
    transfers still use the time before it.

    Writes behind the caches' backs (facts §3: the VDW does not invalidate the TMU, uniform or
    L2 caches) are counted: ``write_epoch`` goes up by one per DMA store, and ``written`` maps
    each bus word address the store wrote to that epoch. Every cached line remembers the epoch
    at which its data was read from memory, so a read served by a line filled before the last
    write to the word it reads is stale (the TMU's ``tmu_stale_read`` check).

    The L2 (timing.l2_cache_*) is shared by all slices and sits in front of the bus for TMU and
    uniform line fills (``read_line``): a line another QPU has read recently costs no bus time,
    and a line whose fill is still under way is waited for rather than read twice. The DMA
    engines use the bus directly (``reserve``): the VDW writes memory directly (maazl/vc4asm#5,
    after the guide's block diagram, p. 13), and the VDR is assumed to do the same.

    The parameters come from ``timing`` (or the first unit that calls ``use``), so that a bus
    made without one still runs at its machine's board clock.
    """

    # Bookings that ended this many clocks before a new request are forgotten: QPUs ask within
    # a few instructions of each other's clocks (the scheduler runs the one that is behind).
    HISTORY_CLOCKS = 4096
    HISTORY_BOOKINGS = 64           # ... looked for once more bookings than this are kept

    def __init__(self, timing=None):
        self._starts, self._ends = [], []     # booked stretches [start, end), sorted, disjoint
        self.write_epoch = 0
        self.written = {}             # bus word address -> epoch of the DMA store that wrote it
        self.busy_clocks = 0          # statistics of the launch: bus occupancy, L2 hits/misses
        self.l2_hits = self.l2_misses = 0
        self.vc_l2_hits = 0           # V3D L2 misses served by the VideoCore L2
        self.timing = None
        self.use(timing if timing is not None else Timing())

    def use(self, timing):
        """Take the cycle model's parameters (board clock, L2 geometry and latency)."""
        if timing is self.timing:
            return
        self.timing = timing
        self.l2 = LruCache(timing.l2_cache_bytes, timing.l2_cache_line_bytes,
                           timing.l2_cache_ways)
        self._l2_fill = timing.line_fill_clocks(timing.l2_cache_line_bytes)
        self.vc_l2 = LruCache(timing.vc_l2_bytes, timing.vc_l2_line_bytes, timing.vc_l2_ways)
        self._vc_l2_fill = timing.vc_l2_fill_clocks(timing.l2_cache_line_bytes)

    def reserve(self, now, clocks):
        """Occupy the bus for ``clocks`` in the first idle stretch at or after ``now`` that is
        long enough; returns the start."""
        starts, ends = self._starts, self._ends
        if len(starts) > self.HISTORY_BOOKINGS:
            del_to = bisect.bisect_right(ends, now - self.HISTORY_CLOCKS)
            del starts[:del_to], ends[:del_to]
        i = bisect.bisect_right(ends, now)
        begin = now
        while i < len(starts) and starts[i] < begin + clocks:
            begin = max(begin, ends[i])
            i += 1
        end = begin + clocks
        self.busy_clocks += clocks
        if i and ends[i - 1] == begin:          # join the booking before
            i -= 1
            ends[i] = end
        else:
            starts.insert(i, begin)
            ends.insert(i, end)
        if i + 1 < len(starts) and starts[i + 1] == end:     # and the one after
            ends[i] = ends.pop(i + 1)
            del starts[i + 1]
        return begin

    def transfer(self, now, clocks):
        """Occupy the bus for ``clocks`` from ``now`` or when it frees; returns the end."""
        return self.reserve(now, clocks) + clocks

    def record_write(self, address, nbytes):
        """A DMA store wrote ``nbytes`` at bus ``address``, behind the caches."""
        self.write_epoch += 1
        start = (address & BUS_ADDRESS_MASK) // WORD_BYTES
        end = ((address & BUS_ADDRESS_MASK) + nbytes - 1) // WORD_BYTES + 1
        self.written.update(dict.fromkeys(range(start, end), self.write_epoch))

    def read_line(self, now, address, nbytes, miss_latency):
        """A TMU or uniform cache asks at ``now`` for its ``nbytes`` line at bus ``address``:
        (the clock at which the line is there, the write epoch its data dates from).

        Per L2 line: a hit arrives after ``l2_hit_latency``, or when the fill under way brings
        it, with the data the L2 read when it was filled; a miss takes its turn on the bus and
        arrives ``miss_latency`` after the request, or when its bus slot ends if the queue made
        it later, and is kept in the L2.
        """
        line = self.l2.line
        first = (address & BUS_ADDRESS_MASK) // line
        last = ((address & BUS_ADDRESS_MASK) + nbytes - 1) // line
        ready, epoch = now, self.write_epoch
        for number in range(first, last + 1):
            cached = self.l2.get(number)
            if cached is not None:
                self.l2_hits += 1
                arrives, filled = cached
                arrives = max(arrives, now + self.timing.l2_hit_latency)
                epoch = min(epoch, filled)
            else:
                self.l2_misses += 1
                arrives = self._fill(now, number * line, address >> BUS_ALIAS_SHIFT,
                                     miss_latency)
                self.l2.put(number, (arrives, self.write_epoch))
            ready = max(ready, arrives)
        return ready, epoch

    def _fill(self, now, bus_byte, alias, miss_latency):
        """A V3D L2 line fill asked at ``now``: from the VideoCore L2 when the memory's bus
        ``alias`` is cached there and the line is in it, else from SDRAM (kept in the
        VideoCore L2 for the allocating aliases). The clock at which the line arrives."""
        if alias in VC_L2_CACHED_ALIASES and self.vc_l2.ways:
            vc_line = bus_byte // self.vc_l2.line
            if self.vc_l2.get(vc_line) is not None:
                self.vc_l2_hits += 1
                end = self.transfer(now, self._vc_l2_fill)
                return max(now + self.timing.vc_l2_hit_latency, end)
            if alias in VC_L2_ALLOCATING_ALIASES:
                self.vc_l2.put(vc_line, True)
        end = self.transfer(now, self._l2_fill)
        return max(now + miss_latency, end)

    def uniform_line(self, now, address):
        """The uniform stream reaches a new line at bus ``address``: when it is there (for the
        QPU core, which keeps the line it has; see docs/cycle-model.md)."""
        timing = self.timing
        size = timing.uniform_line_bytes
        start = (address & BUS_ADDRESS_MASK) // size * size | (address & BUS_ALIAS_MASK)
        return self.read_line(now, start, size, timing.uniform_miss_latency)[0]


def field_count(word, field):
    """A count field whose maximum is stored as 0 (NUM, STRIDE, ROWLEN, UNITS, ...)."""
    value = isa.field_get(word, field)
    return value or 1 << field[1]


def scalar(value):
    """Element 0 of a register value (setup and address writes only use element 0)."""
    if isinstance(value, (int, np.integer)):
        return int(value) & 0xFFFFFFFF
    return int(np.asarray(value).reshape(-1)[0]) & 0xFFFFFFFF


def dma_width(modew):
    """(element bytes, sub-word offset index) of a DMA MODEW code, or None if unused."""
    for bits, base in isa.DMA_MODEW.items():
        if base <= modew < base + isa.WORD_BITS // bits:
            return bits // 8, modew - base
    return None


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


def line_bytes(vertical, y, x, offset, nbytes):
    """VPM byte indices (not yet wrapped) of ``nbytes`` consecutive bytes along a line starting
    at word (y, x) plus ``offset`` bytes: along row y (horizontal), down column x (vertical)."""
    along = offset + np.arange(nbytes)
    if vertical:
        q = WORD_BYTES * y + along
        return ROW_BYTES * (q // WORD_BYTES) + WORD_BYTES * x + q % WORD_BYTES
    return ROW_BYTES * y + WORD_BYTES * x + along


class _Dma:
    """One DMA transfer, until its issuer has observed that it finished (``settled``)."""

    __slots__ = ("qpu", "kind", "words", "complete", "settled")

    def __init__(self, qpu, kind, words, complete):
        self.qpu, self.kind, self.words, self.complete = qpu, kind, words, complete
        self.settled = False


class Vpm:
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
        self._vdr = [None] * n
        self._vdr_pitch = [0] * n
        self._vdw = [None] * n
        self._vdw_stride = [(0, False)] * n   # (bytes between rows, blockmode)
        self._load = [None] * n
        self._store = [None] * n
        self._unsettled = []

    # -- setups ---------------------------------------------------------------------------------
    def write_vr_setup(self, qpu, value, now):
        word = scalar(value)
        if isa.field_get(word, isa.VPM_GENERIC_READ["id"]) == isa.VPM_GENERIC_ID:
            self._unused_bits(word, isa.VPM_GENERIC_READ, "generic VPM read setup", qpu)
            self._queue_read(qpu, word, now)
        elif isa.field_get(word, isa.VDR_EXTENDED["id"]) == isa.VDR_EXTENDED_ID:
            if word & isa.unused_bits(isa.VDR_EXTENDED):
                self._report("dma_pitch_out_of_range", qpu, "pitch_out_of_range", word)
            self._vdr_pitch[qpu] = isa.field_get(word, isa.VDR_EXTENDED["mpitchb"])
        elif isa.field_get(word, isa.VDR_SETUP["id"]) == isa.VDR_SETUP_ID:
            self._vdr[qpu] = word
        else:
            self._report("vpm_setup_invalid", qpu, "selects_no_setup", "vr_setup", word)
        return now

    def write_vw_setup(self, qpu, value, now):
        word = scalar(value)
        kind = isa.field_get(word, isa.VDW_SETUP["id"])
        if kind == isa.VPM_GENERIC_ID:
            self._unused_bits(word, isa.VPM_GENERIC_WRITE, "generic VPM write setup", qpu)
            setup = GenericSetup(word, isa.VPM_GENERIC_WRITE)
            if self._valid_generic(setup, word, "vw_setup", qpu):
                self._write[qpu] = setup
        elif kind == isa.VDW_SETUP_ID:
            self._vdw[qpu] = word
        elif kind == isa.VDW_STRIDE_ID:
            self._unused_bits(word, isa.VDW_STRIDE, "DMA store stride setup", qpu)
            self._vdw_stride[qpu] = (isa.field_get(word, isa.VDW_STRIDE["stride"]),
                                     bool(isa.field_get(word, isa.VDW_STRIDE["blockmode"])))
        else:
            self._report("vpm_setup_invalid", qpu, "selects_no_setup", "vw_setup", word)
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
                return _ZEROS.copy(), now
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

    # -- DMA ------------------------------------------------------------------------------------
    def write_vr_addr(self, qpu, addr, now):
        """Start a DMA load. Stalls until this QPU's previous load has finished."""
        now = self._retire(self._load, qpu, now)
        word = self._vdr[qpu]
        if word is None:
            self._report("vpm_missing_setup", qpu, "load_missing_setup")
            return now
        table = isa.VDR_SETUP
        # MODEW 1 cannot occur here: id bits 1001 make the word an extended-pitch setup.
        width, sel = dma_width(isa.field_get(word, table["modew"]))
        rowlen, nrows = field_count(word, table["rowlen"]), field_count(word, table["nrows"])
        vpitch = field_count(word, table["vpitch"])
        vertical = bool(isa.field_get(word, table["vertical"]))
        y, x = divmod(isa.field_get(word, table["addrxy"]), ROW_WORDS)
        mpitch = isa.field_get(word, table["mpitch"])
        pitch = isa.VDR_MPITCH_BYTES << mpitch if mpitch else self._vdr_pitch[qpu]
        address = self._dma_address(scalar(addr), width, "load", qpu)
        per_word = WORD_BYTES // width
        # VPITCH is added to {Y, H} (16-bit), {Y, B} (8-bit) or Y (32-bit) after each row.
        rows = []
        for r in range(nrows):
            row_y, row_sel = divmod(y * per_word + sel + r * vpitch, per_word)
            rows.append(line_bytes(vertical, row_y, x, row_sel * width, rowlen * width))
        index = self._wrap(np.stack(rows), vertical, False, "DMA load", qpu)
        data = [self.memory.read_bytes(address + r * pitch, rowlen * width, "dma_load", qpu)
                for r in range(nrows)]
        words = self._mask(index)
        self._check_race(qpu, np.flatnonzero(words), True, "a DMA load into the VPM")
        for r in range(nrows):
            self.bytes[index[r]] = data[r]
        self._transfer(self._load, qpu, "load", words, now,
                       self.timing.dma_load_clocks(nrows, rowlen * width),
                       self.timing.dma_load_latency)
        return now

    def write_vw_addr(self, qpu, addr, now):
        """Start a DMA store. Stalls until this QPU's previous store has finished."""
        now = self._retire(self._store, qpu, now)
        word = self._vdw[qpu]
        if word is None:
            self._report("vpm_missing_setup", qpu, "store_missing_setup")
            return now
        table = isa.VDW_SETUP
        decoded = dma_width(isa.field_get(word, table["modew"]))
        if decoded is None:
            self._report("vpm_setup_invalid", qpu, "unused_modew", word)
            return now
        if isa.field_get(word, table["laned"]):
            self._report("dma_unsupported", qpu, "store_laned", word)
            return now
        width, sel = decoded
        units, depth = field_count(word, table["units"]), field_count(word, table["depth"])
        vertical = not isa.field_get(word, table["horizontal"])
        y, x = divmod(isa.field_get(word, table["vpmbase"]), ROW_WORDS)
        stride, blockmode = self._vdw_stride[qpu]
        nbytes = depth * width
        if blockmode and vertical:
            self._report("dma_unsupported", qpu, "store_vertical_blockmode")
            return now
        if blockmode:       # memory rows taken one after another from a linear VPM stream
            index = line_bytes(False, y, x, sel * width, units * nbytes).reshape(units, nbytes)
        elif vertical:
            if x + units > ROW_WORDS:
                self._report("vpm_out_of_range", qpu, "store_columns_past_row", units, x)
            index = np.stack([line_bytes(True, y, (x + u) % ROW_WORDS, sel * width, nbytes)
                              for u in range(units)])
        else:
            index = np.stack([line_bytes(False, y + u, x, sel * width, nbytes)
                              for u in range(units)])
        index = self._wrap(index, vertical, blockmode, "DMA store", qpu)
        address = self._dma_address(scalar(addr), width, "store", qpu)
        words = self._mask(index)
        self._check_race(qpu, np.flatnonzero(words), False, "a DMA store from the VPM")
        data = self.bytes[index]
        pitch = nbytes + stride
        if stride == 0:
            self.memory.write_bytes(address, data.reshape(-1), "dma_store", qpu)
        else:
            for u in range(units):
                self.memory.write_bytes(address + u * pitch, data[u], "dma_store", qpu)
        for u in range(units):
            self.bus.record_write(address + u * pitch, nbytes)
        self._transfer(self._store, qpu, "store", words, now,
                       self.timing.dma_store_clocks(units, nbytes), self.timing.dma_store_latency)
        return now

    def read_vr_wait(self, qpu, now):
        return _ZEROS.copy(), self._retire(self._load, qpu, now)

    def read_vw_wait(self, qpu, now):
        return _ZEROS.copy(), self._retire(self._store, qpu, now)

    def read_vr_busy(self, qpu, now):
        return self._busy(self._load, qpu, now)

    def read_vw_busy(self, qpu, now):
        return self._busy(self._store, qpu, now)

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

    def _retire(self, slots, qpu, now):
        """Wait for this QPU's DMA in ``slots`` to finish; the QPU has now observed it."""
        dma = slots[qpu]
        if dma is None or dma.settled:
            return now
        dma.settled = True
        self._unsettled.remove(dma)
        return max(now, dma.complete)

    def _busy(self, slots, qpu, now):
        dma = slots[qpu]
        busy = dma is not None and not dma.settled and dma.complete > now
        if not busy:
            self._retire(slots, qpu, now)
        return np.full(isa.SIMD_WIDTH, int(busy), dtype=np.uint32), now

    def _transfer(self, slots, qpu, kind, words, now, occupancy, latency):
        """Book a DMA on the memory bus; it completes ``latency`` after its bus slot ends."""
        begin = self.bus.reserve(now, occupancy)
        dma = _Dma(qpu, kind, words, begin + occupancy + latency)
        slots[qpu] = dma
        self._unsettled.append(dma)

    def _dma_address(self, address, width, kind, qpu):
        if address % width:
            self._report("dma_alignment", qpu, "dma_alignment", kind, address, width)
        return address - address % width

    def _wrap(self, index, vertical, blockmode, what, qpu):
        """Range-check DMA byte indices (one row of ``index`` per memory row) against the VPM
        and wrap them into it."""
        rows = index // ROW_BYTES
        if rows.max() >= isa.VPM_ROWS:
            self._report("vpm_out_of_range", qpu, "dma_beyond_user_rows", what, int(rows.max()))
        if not vertical and not blockmode and (rows != rows[:, :1]).any():
            self._report("vpm_out_of_range", qpu, "dma_row_past_end", what)
        return index % (self.TOTAL_ROWS * ROW_BYTES)

    def _mask(self, index):
        words = np.zeros(self.words.size, dtype=bool)
        words[index.reshape(-1) // WORD_BYTES] = True
        return words

    def _check_race(self, qpu, words, writes_vpm, what):
        """A VPM access overlapping a DMA its issuer has not yet waited for races with it on a
        real Pi, unless both only read the VPM (rule vpm_dma_race, docs/cycle-model.md)."""
        for dma in self._unsettled:
            if (writes_vpm or dma.kind == "load") and dma.words[words].any():
                self._report("vpm_dma_race", qpu, "dma_race", what, dma.qpu, qpu, dma.kind)
                return
