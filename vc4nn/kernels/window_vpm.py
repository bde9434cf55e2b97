"""The VPM budget of a sliding-window plan (vc4nn/kernels/window_plan.py): user programs reach
64 VPM rows, shared by the QPUs (QPU q owns rows [q R, (q+1) R), R = 64 // QPUs), and a QPU's
rows hold its two load buffers and its store staging. How many QPUs a plan spreads over, how
many pixels a load and a store take, and where the buffers lie follow from it
(docs/kernels.md "Tiling", "Half-row load buffers", "Handing over transposed")."""

import dataclasses

from asm import isa

from .common import LANES

TRANSPOSED_LOAD_PIXELS = 4           # pixels per load of the default "chw" plans
# pixels per load and per store of the default "hwc" plans
HWC_LOAD_PIXELS, HWC_STORE_PIXELS = 3, 2


class WindowVpmBudget:
    """Mixed into WindowPlan: needs its shape, tiling fields and storages."""

    @property
    def can_halve_load_rows(self):
        """A pixel's load row is half a VPM row where it is 16 halves (fp16 input, one channel
        per lane: 32 bytes), so the two load buffers fit in the same rows, one in words 0..7,
        the other in words 8..15 (a 16-bit generic read's packed vector ``offset`` 1)."""
        return self.in_access_bits == 16

    def _halves_load_rows(self):
        """Half-row load buffers wherever they can be (fp16 input, one channel per lane): the
        rows of two whole-row buffers take twice the pixels per load, so a QPU waits for and
        sets up half as many loads, and the bus, busier, gets through the 32-byte rows sooner.
        v1 1.0/224, pi_zero, fp16, ms (the "chw" layers on 4-5 QPUs, 4-pixel loads -> 8-9):
        dw3 2.559 -> 2.537, dw7 0.647 -> 0.631, dw13 0.368 -> 0.362; v2 b2 (56x56x144 "chw")
        3.060 -> 2.849, b3 (NHWC, 8 QPUs, 3 -> 6 pixels) 1.972 -> 1.916; of the smaller
        networks' layers only 64x64x8 (v1 0.25/128 dw1, +0.4%) and 6x6x192 (v2 0.35/96, +0.5%)
        lose (docs/kernels.md "Half-row load buffers")."""
        return self.can_halve_load_rows

    @property
    def rows_per_load_pixel(self):
        """VPM rows a pixel of ``in_chunk`` takes in the two load buffers together."""
        return 1 if self.half_row_buffers == 1 else self.buffers

    def load_rows(self, pixels):
        """VPM rows of the two load buffers of ``pixels`` each."""
        return pixels * self.rows_per_load_pixel

    def default_load_pixels(self, pixels):
        """``pixels`` per load of two whole-row buffers; with half-row buffers, as many as
        take the same rows (twice as many)."""
        return pixels * self.buffers // self.rows_per_load_pixel

    def load_buffer_place(self, buffer):
        """(first VPM row relative to the QPU's, first word) of load buffer ``buffer``."""
        if self.half_row_buffers == 1:
            return 0, buffer * LANES // 2
        return buffer * self.in_chunk, 0

    def _with_room_for_transposed_stores(self):
        """Spread "chw" tiles over as many QPUs as leave each the VPM rows to stage a whole
        tile row (one store buffer) next to two load buffers of TRANSPOSED_LOAD_PIXELS: with 12
        QPUs a QPU's 5 rows stage 3 float32 pixels per store, and the short memory rows cost
        more bus time than the QPUs given up (v1 1.0/224, pi_zero: dw7 1.50 ms on 12 QPUs with
        3-pixel stores, 1.30 on 6 with 8-pixel ones; NHWC 1.22); 4 QPUs with 4-pixel loads keep
        the bus as busy with a quarter of the DMAs (dw7 1.184 ms against 1.203 on 6 QPUs with
        1-pixel loads; docs/kernels.md "Handing over transposed")."""
        need = self.load_rows(self.in_chunk or self.default_load_pixels(TRANSPOSED_LOAD_PIXELS)) \
            + self.stage_rows(self.out_chunk or self.tile_cols)
        qpus = max(1, min(self.num_qpus, isa.VPM_ROWS // need))
        return dataclasses.replace(self, max_qpus=qpus)

    def _with_room_for_chunks(self):
        """Spread "hwc" tiles over as many QPUs as leave each the VPM rows for two load buffers
        of HWC_LOAD_PIXELS and one store buffer of HWC_STORE_PIXELS (8 QPUs): on 12 a QPU's 5
        rows hold 1-pixel loads and stores, whose per-chunk code (a wait, a branch, the setups)
        costs as much as the pixel's multiply-adds, and a QPU's one load in flight at a time
        leaves the bus idle between them. v1 1.0/224, pi_zero, tiles as wide as the
        accumulators, 16-channel tiles, ms on 12 QPUs with two 1-pixel store buffers -> 8 QPUs:
        fp16 dw1 2.671 -> 2.612, dw6 1.146 -> 0.850; fp32 dw1 4.518 -> 4.439, dw2 6.071 ->
        5.632, dw6 1.560 -> 1.408, dw13 0.582 -> 0.547."""
        need = self.load_rows(self.in_chunk or self.default_load_pixels(HWC_LOAD_PIXELS)) + (
            self.store_buffers or 1) * (self.out_chunk or HWC_STORE_PIXELS)
        return dataclasses.replace(self, max_qpus=max(1, min(self.num_qpus,
                                                             isa.VPM_ROWS // need)))

    def _hwc_store_buffers(self, rows):
        """Two store buffers where a QPU's ``rows`` hold them next to the loads (6 QPUs or
        fewer), else one: a row's few stores then wait for each other while the loads go on
        (on the default 8 QPUs the best of a sweep of QPUs, chunks and buffers in both
        storages; with 1 or 4 QPUs two buffers were up to 3% faster: v1 fp32 dw3 on 1 QPU
        5.700 -> 5.545 ms, dw13 on 4 0.551 -> 0.545)."""
        both = self.load_rows(self.default_load_pixels(HWC_LOAD_PIXELS)) + 2 * HWC_STORE_PIXELS
        return 2 if rows >= both else 1

    def _with_transposed_stores(self, rows):
        """Store chunks for the "chw" layout: a vertical store writes one memory row per channel
        (16 rows of ``out_chunk`` pixels), so its cost per pixel falls with the chunk (16 x
        (9.96 ns + 4 P bytes / 1184 MB/s) / P in the model: 3.3x a horizontal pixel's at P = 1,
        1.16x at 8). Loads keep one pixel each (double-buffered: 2 rows); the rest of the QPU's
        VPM rows stage stores: double-buffered if that still holds a tile row, else one buffer
        of as many pixels as fit (the QPU then waits for each store before staging the next,
        while its loads go on)."""
        room = rows - self.load_rows(self.in_chunk or
                                     self.default_load_pixels(TRANSPOSED_LOAD_PIXELS))
        per_row = self.pixels_per_stage_row
        if self.store_buffers:
            buffers = self.store_buffers
        else:
            buffers = 2 if room // 2 * per_row >= self.tile_cols else 1
        chunk = self.out_chunk or max(1, min(self.tile_cols, room // buffers * per_row))
        return dataclasses.replace(self, store_buffers=buffers, out_chunk=chunk)

    @property
    def pixels_per_stage_row(self):
        """Pixels one VPM row of a store buffer holds: 2 for fp16 "chw" (a word holds the two
        pixels' halves of its channel), else 1 (a pixel's block per row)."""
        return 2 if self.out_layout == "chw" and self.out_bits == 16 else 1

    def stage_rows(self, pixels):
        return -(-pixels // self.pixels_per_stage_row)

    @property
    def stage_bits(self):
        """Element size of the generic writes that stage results: fp16 "chw" writes whole words
        (a pixel pair), otherwise the stored element (channel pairs: a word)."""
        return 32 if self.out_layout == "chw" else self.out_access_bits

    @staticmethod
    def vpm_rows_per_qpu(qpus):
        return isa.VPM_ROWS // qpus
