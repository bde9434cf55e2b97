"""The VPM's two DMA engines (facts §3): the VDR loads rows of memory into the VPM, the VDW
stores VPM rows to memory. Part of the Vpm (vpm.py), which mixes them in.

A DMA has its functional effect when it starts; its completion time comes from the cycle model
(vc4nn.emulator.timing: the bus occupancy of its rows) and the shared memory bus (bus.py), and
the QPU that started it sees it finished only once it waits for it (vr_wait / vw_wait, a busy
flag read as 0, or its next DMA of the same kind). The readings of the guide used here (DMA
byte offsets, VPITCH, the extended pitch, BLOCKMODE) are listed in docs/hardware-choices.md
"Emulator units" and pinned by tests/emulator/test_dma.py.
"""

import numpy as np

from asm import isa

from .vpm_layout import ROW_BYTES, ROW_WORDS, WORD_BYTES, ZEROS, field_count, scalar


def dma_width(modew):
    """(element bytes, sub-word offset index) of a DMA MODEW code, or None if unused."""
    for bits, base in isa.DMA_MODEW.items():
        if base <= modew < base + isa.WORD_BITS // bits:
            return bits // 8, modew - base
    return None


def line_bytes(vertical, y, x, offset, nbytes):
    """VPM byte indices (not yet wrapped) of ``nbytes`` consecutive bytes along a line starting
    at word (y, x) plus ``offset`` bytes: along row y (horizontal), down column x (vertical)."""
    along = offset + np.arange(nbytes)
    if vertical:
        q = WORD_BYTES * y + along
        return ROW_BYTES * (q // WORD_BYTES) + WORD_BYTES * x + q % WORD_BYTES
    return ROW_BYTES * y + WORD_BYTES * x + along


class Dma:
    """One DMA transfer, until its issuer has observed that it finished (``settled``)."""

    __slots__ = ("qpu", "kind", "words", "complete", "settled")

    def __init__(self, qpu, kind, words, complete):
        self.qpu, self.kind, self.words, self.complete = qpu, kind, words, complete
        self.settled = False


class DmaEngines:
    """The VDR and VDW of a Vpm (the class mixes them in): their setup registers per QPU, and
    each QPU's latest load and store until the QPU has observed its end. They use the Vpm's
    storage (``bytes``), memory, bus, timing, checks and race check."""

    def __init__(self):
        n = isa.NUM_QPUS
        self._vdr = [None] * n
        self._vdr_pitch = [0] * n
        self._vdw = [None] * n
        self._vdw_stride = [(0, False)] * n   # (bytes between rows, blockmode)
        self._load = [None] * n
        self._store = [None] * n
        self._unsettled = []

    # -- setup registers (the words of vr_setup / vw_setup that are not generic setups) ----------
    def _write_vdr_setup(self, qpu, word):
        if isa.field_get(word, isa.VDR_EXTENDED["id"]) == isa.VDR_EXTENDED_ID:
            if word & isa.unused_bits(isa.VDR_EXTENDED):
                self._report("dma_pitch_out_of_range", qpu, "pitch_out_of_range", word)
            self._vdr_pitch[qpu] = isa.field_get(word, isa.VDR_EXTENDED["mpitchb"])
        elif isa.field_get(word, isa.VDR_SETUP["id"]) == isa.VDR_SETUP_ID:
            self._vdr[qpu] = word
        else:
            self._report("vpm_setup_invalid", qpu, "selects_no_setup", "vr_setup", word)

    def _write_vdw_setup(self, qpu, word):
        kind = isa.field_get(word, isa.VDW_SETUP["id"])
        if kind == isa.VDW_SETUP_ID:
            self._vdw[qpu] = word
        elif kind == isa.VDW_STRIDE_ID:
            self._unused_bits(word, isa.VDW_STRIDE, "DMA store stride setup", qpu)
            self._vdw_stride[qpu] = (isa.field_get(word, isa.VDW_STRIDE["stride"]),
                                     bool(isa.field_get(word, isa.VDW_STRIDE["blockmode"])))
        else:
            self._report("vpm_setup_invalid", qpu, "selects_no_setup", "vw_setup", word)

    # -- transfers ------------------------------------------------------------------------------
    def write_vr_addr(self, qpu, addr, now):
        """Start a DMA load. Stalls until this QPU's previous load has finished."""
        word, now = self._begin(self._load, self._vdr, qpu, now, "load_missing_setup")
        if word is None:
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
        word, now = self._begin(self._store, self._vdw, qpu, now, "store_missing_setup")
        if word is None:
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
        return ZEROS.copy(), self._retire(self._load, qpu, now)

    def read_vw_wait(self, qpu, now):
        return ZEROS.copy(), self._retire(self._store, qpu, now)

    def read_vr_busy(self, qpu, now):
        return self._busy(self._load, qpu, now)

    def read_vw_busy(self, qpu, now):
        return self._busy(self._store, qpu, now)

    # -- helpers --------------------------------------------------------------------------------
    def _begin(self, slots, setups, qpu, now, missing):
        """Wait for this QPU's previous transfer in ``slots``; then its setup word in
        ``setups``, or None (reported as ``missing``) when it has written none."""
        now = self._retire(slots, qpu, now)
        word = setups[qpu]
        if word is None:
            self._report("vpm_missing_setup", qpu, missing)
        return word, now

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
        dma = Dma(qpu, kind, words, begin + occupancy + latency)
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
        return index % (isa.VPM_DMA_ROWS * ROW_BYTES)

    def _mask(self, index):
        words = np.zeros(self.words.size, dtype=bool)
        words[index.reshape(-1) // WORD_BYTES] = True
        return words
