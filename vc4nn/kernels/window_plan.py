"""Plans of the sliding-window kernels (depthwise convolution, average pooling): tiling and the
static schedule both the code generator (window.py) and the uniform streams (window_streams.py)
follow.

A *tile* is one channel block (16 channels on the 16 lanes), a strip of ``tile_cols`` output
columns and ``tile_rows`` output rows. Its QPU walks the strip's input rows top to bottom; each
input row is split into *chunks* of ``in_chunk`` pixels, each one DMA load (VDR) into one of two
VPM buffers, so the load of chunk k+1 runs while chunk k is multiplied in. Every input vector
(one pixel's 16 channels) is read from the VPM once and added, times the tap's weight, into the
accumulators of every output it touches. Output rows finish in order and leave through VDW
stores of ``out_chunk`` pixels from two more VPM buffers.

Padding is handled inside the kernel, never by a padded copy of the activation:
- left/right: the code of each *variant* (a class of strips: which local input columns exist)
  simply has no load and no multiply for the missing columns;
- top/bottom: the row loop is the same for every row; the uniform stream gives each input row's
  address, 0 for a row outside the image, whose buffer the kernel fills with zero vectors by
  generic VPM writes instead of a load (the bus never carries padding).
The loop body covers ``body_rows`` input rows. The loop's ramp-up and ramp-down compute output
rows the tile does not own: their store address is 0 and the kernel skips the store (no QPU
writes another's outputs); input rows past the last one the tile needs have address 0 too and
are zero-filled, not loaded.

The result is NHWC (``out_layout`` "hwc") or channel-major (C, H*W) ("chw": what the pointwise
kernel's transposed-input path reads, docs/kernels.md "Handing over transposed"): the same
staged VPM rows leave through *vertical* VDW stores, one memory row per channel of ``out_chunk``
pixels; fp16 pixels are staged in pairs (two pixels' halves per word: a vertical 16-bit DMA row
runs down a column two halves per VPM row).
"""

import dataclasses
import functools

from asm import isa
from asm.vpm import MAX_EXTENDED_PITCH

from .common import LANES, LAYOUTS, MAX_VDW_STRIDE
from .spatial import STORAGE_BITS, PlanError, SpatialShape, check_storage
from .window_registers import ACCUMULATOR_REGISTERS, SPLIT_COLS, WEIGHT_REGISTERS
from .window_schedule import WindowSchedule
from .window_vpm import WindowVpmBudget

MAX_CHUNK = 1 << isa.VDR_SETUP["nrows"][1]      # memory rows of one DMA load (16)
# For the tile-height choice (cycle model, docs/kernels.md): a 64-byte store row costs 0.7 of a
# load row (the DMA row models of docs/cycle-model.md), and one QPU alone keeps about 2/3 of the
# bus busy (vc4nn bench-layers --kind spatial --qpus 1).
STORE_ROW_COST = 0.7
ONE_QPU_BUS_SHARE = 0.66


@dataclasses.dataclass(frozen=True)
class Variant:
    """A class of strips: input columns ``lo``..``hi`` (local) exist, ``cols`` outputs."""
    lo: int
    hi: int
    cols: int


@dataclasses.dataclass(frozen=True)
class Tile:
    block: int          # channel block (16 channels)
    col0: int           # first output column
    row0: int           # first output row
    rows: int           # output rows
    variant: int


# The fields with_defaults chooses when they hold their defaults (0 or -1: choose).
CHOSEN_FIELDS = ("tile_cols", "tile_rows", "in_chunk", "out_chunk", "store_buffers", "max_qpus",
                 "rolled", "by_variant", "channel_pairs", "split_accumulators",
                 "half_row_buffers")


@dataclasses.dataclass(frozen=True)
class WindowPlan(SpatialShape, WindowSchedule, WindowVpmBudget):
    """Everything the generated program depends on (the program cache's key).

    op: "depthwise" (weights and bias per channel, fused activation) or "avg_pool" (the mean
    over the window's valid elements, TFLite AVERAGE_POOL_2D / ONNX count_include_pad=0).
    """
    op: str
    in_h: int
    in_w: int
    channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    pads: tuple                 # (top, bottom, left, right)
    activation: object = None
    num_qpus: int = 12
    in_storage: str = "fp32"    # the input activation, the output, the depthwise weights
    out_storage: str = "fp32"
    w_storage: str = "fp32"
    out_layout: str = "hwc"     # "hwc" (NHWC) or "chw" (channel-major: C rows of H*W pixels)
    tile_cols: int = 0          # 0: choose (see with_defaults)
    tile_rows: int = 0
    in_chunk: int = 0
    out_chunk: int = 0
    buffers: int = 2            # double buffering of loads
    store_buffers: int = 0      # staging buffers of the stores: 2 (double) or 1; 0: choose
    max_qpus: int = 0           # QPUs the tiles are spread over at most; 0: choose (all, "hwc")
    rolled: int = -1            # 1: one output row per iteration (sets shifted); 0: a period; -1: choose
    by_variant: int = -1        # 1: QPUs take the tiles variant by variant; 0: in strips; -1: choose
    channel_pairs: int = -1     # 1: two channels per lane (fp16 words); 0: one; -1: choose
    split_accumulators: int = -1    # 1: the newest row's on regfile B (14 columns); -1: choose
    half_row_buffers: int = -1  # 1: the two load buffers share VPM rows, one half each; -1: choose

    # -- shape ---------------------------------------------------------------------------------
    @property
    def lane_channels(self):
        """Channels per lane: 2 with ``channel_pairs`` (a lane's word holds channels 2i (16a)
        and 2i + 1 (16b) of the tile's 32, as they lie in memory), else 1."""
        return 2 if self.channel_pairs == 1 else 1

    @property
    def block_channels(self):
        """Channels of a tile: one block."""
        return LANES * self.lane_channels

    @property
    def blocks(self):
        return -(-self.channels // self.block_channels)

    @property
    def padded_channels(self):
        return self.blocks * self.block_channels

    @property
    def in_access_bits(self):
        """Element size of the input's DMA loads and generic reads: whole words with channel
        pairs, else the stored element (a 16-channel block of halves is one 16-bit row)."""
        return 32 if self.channel_pairs == 1 else self.in_bits

    @property
    def out_access_bits(self):
        """Element size of the result's DMA stores (as ``in_access_bits``)."""
        return 32 if self.channel_pairs == 1 else self.out_bits

    @property
    def acc_sets(self):
        """Output rows whose accumulators are live at once: an input row feeds this many."""
        return -(-self.kernel_h // self.stride_h)

    @property
    def accumulators(self):
        """Registers for accumulators: acc_sets x tile_cols x lane_channels of them at most
        (``split_accumulators``: three rows of 14 columns, window_registers.py)."""
        return 3 * SPLIT_COLS if self.split_accumulators == 1 else ACCUMULATOR_REGISTERS

    @property
    def can_split_accumulators(self):
        """The split needs a 3x3 depthwise window at stride 1 (three rows in flight, only the
        newest fed by the top row alone), one channel per lane and rolled loops (the sets keep
        their registers: the newest row moves to regfile A once the top row has fed it)."""
        return (self.op == "depthwise" and self.channel_pairs != 1 and self.rolled != 0
                and (self.kernel_h, self.kernel_w, self.stride_h) == (3, 3, 1))

    @property
    def period(self):
        """Input rows after which the accumulator sets are back in the same roles."""
        return self.acc_sets * self.stride_h

    def strip_in_cols(self, cols):
        return (cols - 1) * self.stride_w + self.kernel_w

    # -- tiling --------------------------------------------------------------------------------
    def with_defaults(self):
        """This plan with every 0 tiling choice replaced by the default for the shape."""
        plan = self
        if plan.channel_pairs == -1:
            plan = dataclasses.replace(plan, channel_pairs=int(plan._pairs_channels()))
        if plan.split_accumulators == -1:
            plan = dataclasses.replace(plan, split_accumulators=int(plan._split_widens_strips()))
        if plan.half_row_buffers == -1:
            plan = dataclasses.replace(plan, half_row_buffers=int(plan._halves_load_rows()))
        if plan.tile_cols == 0:
            widest = max(1, min(plan.accumulators // (plan.acc_sets * plan.lane_channels),
                                plan.out_w))
            cols = min(widest, 8)
            strips = -(-plan.out_w // widest)
            if strips < -(-plan.out_w // cols):
                # As few strips as the accumulators allow, as even as they go: each strip
                # re-reads the halo columns, and a channel-major store's memory rows are a
                # strip row long (v1 1.0/224 stride 2: 14 columns, 3-5% faster than 8).
                cols = -(-plan.out_w // strips)
            plan = dataclasses.replace(plan, tile_cols=cols)
        if plan.max_qpus == 0:
            plan = plan._with_room_for_transposed_stores() if plan.out_layout == "chw" else \
                plan._with_room_for_chunks()
        if plan.tile_rows == 0:
            # More than three tiles per QPU never pays: the balance is fine by then.
            strips = plan.blocks * -(-plan.out_w // plan.tile_cols)
            most = max(1, min(plan.out_h, -(-3 * plan.spread // strips)))
            heights = {-(-plan.out_h // splits) for splits in range(1, most + 1)}
            plan = min((dataclasses.replace(plan, tile_rows=h) for h in sorted(heights)),
                       key=lambda p: p.estimated_bus_time())
        if plan.by_variant == -1:
            plan = dataclasses.replace(plan, by_variant=int(plan._runs_cycle_variants()))
        rows = plan.vpm_rows_per_qpu(plan.qpus)
        if plan.out_layout == "chw" and (plan.out_chunk == 0 or plan.store_buffers == 0):
            plan = plan._with_transposed_stores(rows)
        if plan.store_buffers == 0:
            plan = dataclasses.replace(plan, store_buffers=plan._hwc_store_buffers(rows))
        if plan.out_chunk == 0:
            plan = dataclasses.replace(plan, out_chunk=max(1, min(plan.tile_cols, rows // 4)))
        if plan.in_chunk == 0:
            room = (rows - plan.store_buffers * plan.stage_rows(plan.out_chunk)) \
                // plan.rows_per_load_pixel
            plan = dataclasses.replace(plan, in_chunk=max(1, min(MAX_CHUNK, room,
                                                                 plan.strip_in_cols(plan.tile_cols))))
        if plan.rolled == -1:
            plan = dataclasses.replace(plan, rolled=int(plan.split_accumulators == 1
                                                        or plan._rolling_shortens_loops()))
        return plan

    def _pairs_channels(self):
        """Two channels per lane wherever they can be: a pixel's 32 channels are one 64-byte
        DMA row instead of two 32-byte ones (a row's fixed cost is paid half as often), one
        VPM read and one write instead of two; the tiles are half as wide (the accumulators
        hold both channels), which at stride 2 re-reads few more halo columns (v1 1.0/224,
        pi_zero: dw2 3.316 -> 2.929 ms, dw4 1.683 -> 1.470, dw6 0.850 -> 0.754) and at stride 1
        about as many as the rows save (dw1 2.612 -> 2.579, dw3 2.608 -> 2.552; with the odd
        channels' bias out of regfile A 5 columns: 2.475, 2.480). Some small layers lose
        (docs/kernels.md "Channel pairs"), every network's total gains."""
        return self.can_pair_channels

    @property
    def can_pair_channels(self):
        """Channel pairs need fp16 input, weights and NHWC result, whole 32-channel blocks (a
        pixel's 64 bytes: one 32-bit DMA row) and a depthwise window whose two weight sets and
        the odd channels' bias fit regfile B."""
        return (self.op == "depthwise" and self.out_layout == "hwc"
                and (self.in_bits, self.out_bits, self.w_bytes) == (16, 16, 2)
                and self.channels % (2 * LANES) == 0
                and 2 * self.kernel_h * self.kernel_w < WEIGHT_REGISTERS)

    def _split_widens_strips(self):
        """Split accumulators where their 14-column strips are fewer than 10-column ones: fewer
        halo columns, and a channel-major store's rows a strip row long (v1 1.0/224, pi_zero,
        fp32, ms: dw1 4.656 -> 4.309, dw3 4.573 -> 4.305, dw7 1.190 -> 1.074; NHWC dw7 1.116 ->
        1.027). Not for fp16 NHWC plans: on their 8 QPUs the halves' unpack makes the wider
        loops issue-bound and the fewer tiles balance worse (v2's 56x56x144: 2.926 -> 3.292).
        Where the strips are as many (7 columns: dw13), the split would only cost instructions
        (docs/kernels.md "Split accumulators")."""
        narrow = -(-self.out_w // (ACCUMULATOR_REGISTERS // self.acc_sets))
        return (self.can_split_accumulators and -(-self.out_w // SPLIT_COLS) < narrow
                and not (self.in_storage == "fp16" and self.out_layout == "hwc"))

    def _rolling_shortens_loops(self):
        """Whether a rolled loop body is shorter than the unrolled period for some variant: then
        its code is smaller (a slice's 4 KB instruction cache holds it, docs/kernels.md
        "Schedule"); where two store buffers make it two output rows anyway (an odd store count
        per row at stride 2), the unrolled body is as short and needs no shifts."""
        rolled, unrolled = (dataclasses.replace(self, rolled=r) for r in (1, 0))
        return any(rolled.body_rows(v) < unrolled.body_rows(v) for v in self.variants)

    def _runs_cycle_variants(self):
        """Whether QPUs taking contiguous runs of the tile list would cycle through more
        variants than a slice's instruction cache holds the loops of (a run longer than a
        block's tiles): three, or two for "chw" plans, whose loops (the vertical stores' pixel
        pairs, split accumulators on 2-5 QPUs of one slice) are longer (v1 1.0/224's dw5, two
        variants of 300-400 instructions). Then the tiles are better taken variant by variant.
        (With shorter runs the neighbouring QPUs of a slice take neighbouring strips, mostly of
        one variant, and the contiguous runs balance better.) Two-variant "chw" layers, pi_zero,
        ms: v1 1.0/224 dw5 fp32 2.212 -> 2.153, fp16 1.310 -> 1.271; v2 b3 fp32 3.479 -> 3.200,
        b4/b5 fp32 1.662 -> 1.622, fp16 0.987 -> 0.960 (docs/kernels.md "Tiling")."""
        per_block = len(self.tiles) // self.blocks
        fits = 1 if self.out_layout == "chw" else 2
        return (len(self.variants) > fits and len(self.tiles) >= per_block * self.qpus
                or self._slices_mix_variants())

    def _slices_mix_variants(self):
        """Whether the QPUs of a slice, taking contiguous runs of the tile list, would run
        tiles of different variants at the same time (their k-th tiles): their loops then share
        the slice's instruction cache at once, which with two long loops (the stride-2 channel
        pairs', ~500 instructions each; 16-channel tiles on 8 QPUs) misses it on every pass,
        while variant by variant the slice runs one loop. (The model's slices: QPUs 4s..4s+3,
        docs/cycle-model.md "Instruction cache".) pi_zero, 12 QPUs, full layers, contiguous ->
        variant by variant, ms: v1 1.0/224 fp16 dw2 2.932 -> 2.905, dw4 1.472 -> 1.461; v2
        1.0/224 fp16 b1 4.379 -> 4.343, b6 0.620 -> 0.558; v2 0.25/224 fp16 b1 2.779 -> 2.521,
        b4 0.359 -> 0.327; v1 0.75/192 fp16 dw2 2.032 -> 1.869; fp32 v1 1.0/128 dw1 1.527 ->
        1.500; the most it loses: v1 0.75/192 fp16 dw4 0.833 -> 0.866, v2 0.5/224 fp16 b6
        0.299 -> 0.306 (docs/kernels.md "Tiling")."""
        runs = self.qpu_tiles()
        for first in range(0, len(runs), isa.QPUS_PER_SLICE):
            slice_runs = runs[first:first + isa.QPUS_PER_SLICE]
            for k in range(max(map(len, slice_runs))):
                if len({run[k].variant for run in slice_runs if k < len(run)}) > 1:
                    return True
        return False

    @property
    def spread(self):
        """QPUs the plan may use: ``num_qpus``, or fewer by ``max_qpus``."""
        return min(self.num_qpus, self.max_qpus or self.num_qpus)

    def estimated_bus_time(self):
        """Memory-bus time of the tiling in units of a 64-byte DMA load row: every tile's input
        rows in the image (halo included; padding rows are zero-filled in the VPM) and output
        rows; or, if more, the busiest QPU's share divided by
        the part of the bus one QPU keeps busy on its own (its loads wait for each other). The
        default tile height minimizes it: the layers are memory bound, so fewer halo rows beat
        an even spread over all QPUs."""
        variants = self.variants

        def bus_time(tile):
            v = variants[tile.variant]
            top = tile.row0 * self.stride_h - self.pads[0]
            bottom = top + (tile.rows - 1) * self.stride_h + self.kernel_h
            loads = (min(bottom, self.in_h) - max(top, 0)) * (v.hi - v.lo)   # padding is free
            return loads + STORE_ROW_COST * tile.rows * v.cols

        per_qpu = [sum(map(bus_time, tiles)) for tiles in self.qpu_tiles()]
        return max(sum(per_qpu), max(per_qpu) / ONE_QPU_BUS_SHARE)

    @property
    def qpus(self):
        return min(self.spread, len(self.tiles))

    def check(self):
        """Raise PlanError if the tiling does not fit the registers, the VPM or the DMA fields."""
        for name in ("in_storage", "out_storage", "w_storage"):
            check_storage(name, getattr(self, name))
        if self.channel_pairs not in (0, 1):
            raise PlanError(f"channel_pairs={self.channel_pairs}: 0 or 1")
        if self.channel_pairs and not self.can_pair_channels:
            raise PlanError("channel_pairs=1: needs a depthwise layer with fp16 input, weights "
                            "and result, the result NHWC and channels a multiple of 32")
        if self.split_accumulators not in (0, 1):
            raise PlanError(f"split_accumulators={self.split_accumulators}: 0 or 1")
        if self.split_accumulators and not (self.can_split_accumulators and self.rolled == 1):
            raise PlanError("split_accumulators=1: needs a 3x3 depthwise window at stride 1, "
                            "rolled loops and one channel per lane")
        need = self.acc_sets * self.tile_cols * self.lane_channels
        if need > self.accumulators:
            raise PlanError(f"tile_cols={self.tile_cols}: {self.acc_sets} output rows x "
                            f"{self.tile_cols} columns x {self.lane_channels} channels per lane "
                            f"of accumulators exceed the {self.accumulators} registers")
        if self.kernel_h * self.kernel_w > WEIGHT_REGISTERS and self.op == "depthwise":
            raise PlanError(f"a {self.kernel_h}x{self.kernel_w} depthwise window needs more "
                            f"weight registers than regfile B has")
        if self.op == "avg_pool" and self.tile_cols > WEIGHT_REGISTERS:
            raise PlanError(f"tile_cols={self.tile_cols}: too many column scales")
        if not 1 <= self.in_chunk <= MAX_CHUNK or not 1 <= self.out_chunk <= self.tile_cols:
            raise PlanError(f"in_chunk={self.in_chunk} (1..{MAX_CHUNK}), out_chunk="
                            f"{self.out_chunk} (1..tile_cols)")
        if self.max_qpus < 0:
            raise PlanError(f"max_qpus={self.max_qpus}: 0 (all) or more")
        for name in ("by_variant", "rolled"):
            if getattr(self, name) not in (0, 1):
                raise PlanError(f"{name}={getattr(self, name)}: 0 or 1")
        if self.store_buffers not in (1, 2):
            raise PlanError(f"store_buffers={self.store_buffers}: 1 or 2")
        if self.half_row_buffers not in (0, 1):
            raise PlanError(f"half_row_buffers={self.half_row_buffers}: 0 or 1")
        if self.half_row_buffers and not self.can_halve_load_rows:
            raise PlanError("half_row_buffers=1: needs loads of 16-bit elements with one channel "
                            "per lane (fp16 input without channel pairs)")
        need = self.load_rows(self.in_chunk) + self.store_buffers * self.stage_rows(
            self.out_chunk)
        if need > self.vpm_rows_per_qpu(self.qpus):
            raise PlanError(f"{self.qpus} QPUs x {need} VPM rows ({self.buffers} buffers of "
                            f"{self.in_chunk} input and {self.store_buffers} of "
                            f"{self.out_chunk} output pixels) exceed the "
                            f"{isa.VPM_ROWS} rows generic access reaches")
        if self.out_layout not in LAYOUTS:
            raise PlanError(f"out_layout={self.out_layout!r}: one of "
                            f"{', '.join(map(repr, LAYOUTS))}")
        plane = self.out_h * self.out_w * self.out_bytes
        if self.out_layout == "chw" and plane - self.out_bytes > MAX_VDW_STRIDE:
            raise PlanError(f"out_layout='chw': a channel's row of {self.out_h}x{self.out_w} "
                            f"pixels is {plane} bytes, more than one VDW stride reaches")
        pitch = self.channels * self.in_bytes
        if pitch > MAX_EXTENDED_PITCH:
            raise PlanError(f"{self.channels} channels: a pixel is {pitch} bytes, more than the "
                            f"DMA load pitch field holds")
        if self.buffers != 2:
            raise PlanError("buffers: the kernels double-buffer (2)")
        return self

    @functools.cached_property
    def variants(self):
        return tuple(sorted({self._variant(c0) for c0 in range(0, self.out_w, self.tile_cols)},
                            key=lambda v: (v.lo, v.hi, v.cols)))

    def _variant(self, col0):
        cols = min(self.tile_cols, self.out_w - col0)
        first = col0 * self.stride_w - self.pads[2]         # global column of local column 0
        width = self.strip_in_cols(cols)
        return Variant(max(0, -first), min(width, self.in_w - first), cols)

    @functools.cached_property
    def tiles(self):
        variants = self.variants
        out = []
        for block in range(self.blocks):
            for col0 in range(0, self.out_w, self.tile_cols):
                v = variants.index(self._variant(col0))
                for row0 in range(0, self.out_h, self.tile_rows):
                    out.append(Tile(block, col0, row0, min(self.tile_rows, self.out_h - row0), v))
        return out

    def qpu_tiles(self):
        """Tiles of each QPU, counts within one of each other: contiguous runs of the tile list
        (strip after strip), or (``by_variant``) the list grouped by variant and dealt out in
        turn, so that every QPU runs its share of one variant's tiles before the next
        variant's: the QPUs of a slice share an instruction cache, which holds the loops of
        two variants but not of three (docs/kernels.md "Schedule")."""
        tiles, qpus = self.tiles, self.qpus
        if self.by_variant == 1:      # (-1, not chosen yet: contiguous)
            ordered = sorted(tiles, key=lambda tile: tile.variant)
            return [ordered[q::qpus] for q in range(qpus)]
        bounds = [len(tiles) * q // qpus for q in range(qpus + 1)]
        return [tiles[bounds[q]:bounds[q + 1]] for q in range(qpus)]

    # -- sizes the launcher allocates --------------------------------------------------------------
    def bytes_moved(self):
        """Bytes the layer must move at least: the input and output once (weights are tiny)."""
        return (self.in_h * self.in_w * self.in_bytes
                + self.out_h * self.out_w * self.out_bytes) * self.channels

    @property
    def w_bytes(self):
        return STORAGE_BITS[self.w_storage] // 8


def make_plan(op, in_h, in_w, channels, kernel, stride, pads, activation=None, num_qpus=12,
              in_storage="fp32", out_storage="fp32", w_storage="fp32", out_layout="hwc",
              **tiling):
    """A checked plan with defaults filled in."""
    plan = WindowPlan(op, in_h, in_w, channels, kernel[0], kernel[1], stride[0], stride[1],
                      tuple(pads), activation, num_qpus, in_storage, out_storage, w_storage,
                      out_layout, **tiling)
    return plan.with_defaults().check()
