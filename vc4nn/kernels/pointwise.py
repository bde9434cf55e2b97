"""The pointwise (1x1) convolution as the SGEMM panel kernel with a fused epilogue.

A 1x1 convolution of an (H, W, Cin) activation is the product [H*W, Cin] x [Cin, Cout]. The
activation plays A (each QPU gathers up to 8 pixels' channels through the TMU), the weights play
B (the operand every QPU shares: one DMA per k-row of a panel into the VPM), so the weights are
read once per pass of (pixels per QPU) x 12 QPUs and the activation once per panel of 64, 96 or
128 output channels (``PointwisePlan.vectors``; docs/sgemm.md, "The panel kernel"). The bias is
where the accumulators start, the residual is gathered and added before the store, the
activation is applied on the VPM write (vc4nn/kernels/epilogue.py): no extra pass over the
result.

When the pixels that share a TMU cache lie a multiple of 512 bytes apart (Cin a multiple of 128,
and Cin = 384, 640, ...), they share sets of the direct-mapped cache and the gathers miss: then
each QPU takes fewer pixels (4 for Cin = 128), or the activation is first transposed on the GPU
([Cin, H*W], one extra launch) and the panel kernel's TN path reads it (``route``). The
weights need no such care: B is only ever DMA'd.

Storage: x, the residual, y and the weights are each float32 or halves (``x_storage``, ...;
arithmetic float32): the panel kernel's halves branches (panel_act_halves.py, panel_halves.py)
and a transpose of halves. The bias is float32.
"""

import dataclasses
import functools
import typing

import collections

from .. import hardware
from ..errors import DeviceError
from . import panel_park, panel_stagger, sgemm_panel, transpose
from .panel_kloop import shared_chunk, steady_chunks
from .common import LAYOUTS, MAX_VDW_STRIDE, WORD
from .epilogue import Epilogue
from .spatial import STORAGE_BITS, check_storage


@dataclasses.dataclass(frozen=True)
class PointwisePlan:
    """Everything the two launches of one pointwise layer depend on.

    ``transpose_input``, ``max_rows``: None follows the aliasing rule (``route``); a value
    forces the route (a tuner's choice). ``panel_vectors``: the panel width, None for the
    cheapest of PANEL_WIDTHS (``vectors``). ``gather_weights``: whether every QPU gathers the
    weights' chunks through the TMU (``PanelPlan.b_gather``, vc4nn/kernels/panel_gather_b.py)
    instead of DMA loaders; None: wherever the panel allows it (``gathers``).
    ``balance_passes``: the last pass with as few rows per QPU as its pixels need
    (``PanelPlan.last_rows``; 14x14x512->512: 6, 6, 5 pixels per QPU, panel launch 5.80 ->
    5.57 ms, pi_zero). ``spread_rows``: one pass of H*W // QPUs pixels per QPU, the pixels
    left over spread one vector per QPU (``PanelPlan.spread_rows``, panel_spread.py; 7x7 on
    12 QPUs: 4 pixels and a vector of pixel 48 each); None: wherever the panel allows it
    (``spreads``). ``spread_leaves``: those pieces on the leaves only, the QPUs without barrier
    work (``PanelPlan.spread_leaves``; 7x7 on 12 QPUs: one vector of pixel 48 on each of the 8
    leaves); None: wherever the panel allows it (``spreads_on_leaves``). ``pair_gathers``: x
    gathered two k at a time also where a chunk's k-rows are odd (``PanelPlan.pair_gathers``);
    None: on the transposed route wherever the panel allows it (``pairs``). ``park_rows``: the
    last rows of each pass stored during the next pass (``PanelPlan.park_rows``,
    panel_park.py); None: where it pays (``parks``), 0: never. ``chunk_depth``: k-rows of
    weights per chunk; None: ``depth``'s default. The panel kernel's own tiling (rows per
    QPU, passes) is derived in ``panel``.
    """

    height: int
    width: int
    cin: int
    cout: int
    num_qpus: int
    bias: bool = False
    residual: bool = False
    activation: typing.Optional[str] = None
    x_storage: str = "fp32"     # of the activation x, the result y, the residual, the weights
    y_storage: str = "fp32"
    r_storage: str = "fp32"
    w_storage: str = "fp32"
    transpose_input: typing.Optional[bool] = None
    max_rows: typing.Optional[int] = None
    panel_vectors: typing.Optional[int] = None
    # "hwc": x is [H*W, Cin] (NHWC); "chw": x is already [Cin, H*W] (a depthwise layer wrote it
    # so), the TN path reads it and the plan has no transpose launch.
    input_layout: str = "hwc"
    gather_weights: typing.Optional[bool] = None
    balance_passes: bool = True
    spread_rows: typing.Optional[bool] = None
    spread_leaves: typing.Optional[bool] = None
    pair_gathers: typing.Optional[bool] = None
    park_rows: typing.Optional[int] = None
    chunk_depth: typing.Optional[int] = None
    stagger: typing.Optional[bool] = None

    def __post_init__(self):
        for name in ("x_storage", "y_storage", "r_storage", "w_storage"):
            check_storage(f"pointwise: {name}", getattr(self, name))
        if self.input_layout not in LAYOUTS:
            raise DeviceError(f"pointwise: input_layout={self.input_layout!r}; "
                              f"{' or '.join(map(repr, LAYOUTS))}")
        if self.input_layout == "chw" and self.transpose_input is False:
            raise DeviceError("pointwise: an input in 'chw' layout is read by the transposed "
                              "route only (transpose_input=False cannot apply)")
        if self.w_storage == "fp16" and self.panel_vectors and self.panel_vectors % 2:
            raise DeviceError(f"pointwise: panel_vectors {self.panel_vectors} with fp16 weights; "
                              f"give an even width (panels start on a 32-channel block)")

    @property
    def pixels(self):
        return self.height * self.width

    @property
    def epilogue(self):
        return Epilogue(self.bias, self.residual, self.activation)

    def _panel(self, trans_a, max_rows=sgemm_panel.MAX_ROWS, vectors=None):
        vectors = vectors or self.vectors
        if self.stagger is not False and trans_a:
            staggered = self._staggered(vectors)
            if staggered is not None:
                return staggered
        elif self.stagger:
            raise ValueError("stagger: it needs the transposed route")
        deepest = sgemm_panel.deepest_chunk(vectors, self.num_qpus)

        def plan(depth, gather):
            return sgemm_panel.PanelPlan(
                self.pixels, self.cout, self.cin, trans_a, self.num_qpus, True, True,
                self.epilogue, max_rows, vectors, depth, self.w_storage == "fp16",
                self.x_storage == "fp16", self.y_storage == "fp16",
                self.residual and self.r_storage == "fp16", gather, self.balance_passes)

        gather = self.gather_weights
        panel = None
        if gather is not False:
            panel = self._gathered(plan, vectors, gather)
            if panel is None and gather is None:
                gather = False      # the default (``gathers``)
        if panel is None:
            panel = plan(self.chunk_depth or deepest, gather)
        panel = self._paired(panel)
        if self.park_rows:          # forced: the panel plan says why it cannot
            return dataclasses.replace(panel, park_rows=self.park_rows)
        if self.park_rows is None and max_rows == sgemm_panel.MAX_ROWS and \
                self.spread_rows is not True and not self.spread_leaves:
            parked = parking_default(panel)     # (``parks``)
            if parked.park_rows:
                return parked
        if self.spread_rows is False or max_rows < sgemm_panel.MAX_ROWS:
            if self.spread_leaves:
                raise ValueError("spread_leaves: it needs spread_rows")
            return panel
        if self.spread_rows:        # forced: the panel plan says why it cannot
            panel = dataclasses.replace(panel, spread_rows=True)
        else:
            try:                    # the default (``spreads``)
                panel = dataclasses.replace(panel, spread_rows=True)
            except ValueError:
                if self.spread_leaves:
                    raise
                return panel
        if self.spread_leaves is False:
            return panel
        if self.spread_leaves:      # forced
            return dataclasses.replace(panel, spread_leaves=True)
        try:                        # the default (``spreads_on_leaves``)
            return dataclasses.replace(panel, spread_leaves=True)
        except ValueError:
            return panel

    def _staggered(self, vectors):
        """The staggered panel plan (``staggers``): the weights' K k-rows and the bias's, 5
        pixels per QPU retiring at different chunks (vc4nn/kernels/panel_stagger.py), or None
        where it cannot run (unless forced: ``stagger``=True raises why) or, by default, where
        it does not pay: more than one panel (each panel's cycles have a warm-up and a last
        cycle of their own)."""
        if self.stagger is None and self.cout > vectors * sgemm_panel.LANES:
            return None
        try:
            return sgemm_panel.PanelPlan(
                self.pixels, self.cout, self.cin + 1, True, self.num_qpus, True, True,
                self.epilogue, max_rows=panel_stagger.ROWS, panel_vectors=vectors,
                chunk_depth=self.chunk_depth or sgemm_panel.deepest_chunk(vectors,
                                                                         self.num_qpus),
                b_halves=self.w_storage == "fp16", a_halves=self.x_storage == "fp16",
                c_halves=self.y_storage == "fp16", b_gather=True, stagger=True)
        except ValueError:
            if self.stagger:
                raise
            return None

    def _gathered(self, plan, vectors, forced):
        """The panel with gathered weights in the deepest chunk whose rows the QPUs can gather
        (``chunk_depth``: in that one), or None; unless ``forced`` (gather_weights=True) or
        the depth is, None also where that chunk's panel has fewer than MIN_GATHER_CHUNKS
        chunks. By default a chunk of k-rows whose read setups are small immediates from
        k-row 1's (PanelPlan.base_row; 4 vectors: 5 k-rows, gathered in 3), or where the
        result is stored as halves a deeper one if it can be gathered (4 vectors: 6 k-rows,
        2 rows per QPU, x gathered two k at a time; ``depth``)."""
        def first(depths):
            for depth in depths:
                try:
                    return plan(depth, True)
                except ValueError:
                    continue
            return None

        if self.chunk_depth:
            return first([self.chunk_depth])
        shallow = first(gather_depths(vectors, self.num_qpus))
        if not forced and (shallow is None or shallow.chunks < MIN_GATHER_CHUNKS):
            return None
        deep = first(gather_depths(vectors, self.num_qpus, far=True)) \
            if self.y_storage == "fp16" else None
        if shallow is None or deep is None or deep.chunk_rows <= shallow.chunk_rows:
            return shallow
        return deep

    def _paired(self, panel):
        """``panel`` with A gathered two k at a time across chunks (``pairs``) or not."""
        if self.pair_gathers is False or panel.gather_k == 2:
            if self.pair_gathers and not panel.pair_gathers:
                return dataclasses.replace(panel, pair_gathers=True)   # (nothing to pair)
            return panel
        if self.pair_gathers:       # forced: the panel plan says why it cannot
            return dataclasses.replace(panel, pair_gathers=True)
        if not panel.trans_a or panel.passes > 1 or shared_chunk(panel) == "plain":
            return panel                                # the default (``pairs``)
        try:
            return dataclasses.replace(panel, pair_gathers=True)
        except ValueError:
            return panel

    @property
    def x_bytes(self):
        return STORAGE_BITS[self.x_storage] // 8

    @property
    def vectors(self):
        """The panel's width in vectors: ``panel_vectors``, else a width whose panel staggers
        (``staggers``: fp16 pw3, 4 vectors by the estimate 6.509 ms, staggered 8 5.778), else
        the width of PANEL_WIDTHS whose panel kernel gathers the weights (``gathers``: the
        layers are bound by the bus) and issues the fewest instructions
        (``sgemm_panel.issue_estimate``) on its route. Wider panels spend fewer instructions
        per multiply-add on broadcasting A but hold fewer rows per QPU and fewer k-rows per
        chunk (PanelPlan); edge panels waste lanes. (Cout = 64 on 12
        QPUs, channel-major x, pi_zero, full layers: 4 vectors in chunks of 5 k-rows DMA'd,
        then 4 in chunks of 3 gathered: 112x112x32->64 6.594 -> 6.391 ms, 14x14x384->64 0.790
        -> 0.637; 6 vectors DMA'd, which the issue estimate alone would pick: 6.475, 0.787.)"""
        if self.panel_vectors:
            return self.panel_vectors
        estimates = {}
        for vectors in PANEL_WIDTHS:
            try:
                panel = self._panel(*self._route(vectors), vectors)
            except ValueError:      # a forced option this width cannot take
                continue
            estimates[vectors] = (not panel.stagger, not panel.b_gather,
                                  sgemm_panel.issue_estimate(panel))
        return min(estimates, key=estimates.get) if estimates else PANEL_WIDTHS[0]

    @property
    def route(self):
        return self._route(self.vectors)

    def _route(self, vectors):
        """(transposed, rows per QPU at most): how the layer avoids gathers that alias in the
        TMU cache. SGEMM's rule for the rows of one QPU (``sgemm_panel.transpose_a_first``,
        with lines counted by ``lines_per_set``) transposes; on more than 8 QPUs, when the rows
        of the QPUs sharing a TMU cache alias, fewer rows per QPU (at least MIN_ROWS) if that
        avoids it, else the transpose. Measured in the cycle model (pi1, 12 QPUs, clocks of both launches, bias
        and relu6 included): 192 pixels 128->128: 8 rows 465 374, 4 rows 218 028, transposed
        228 253; 96 pixels 256->128: 8 rows 620 468, 2 rows 318 408, transposed 214 039; 96
        pixels 384->64: 8 rows 347 400, 4 rows 160 548, transposed 208 220; without aliasing, 64->384: direct
        121 758, transposed 135 240. On 8 QPUs (64 pixels 128->128: direct 78 157, transposed
        92 786) and 4 (32 pixels: 69 059, 77 496) the misses cost less than the transpose. The
        transpose's VDW stride limits it to H*W <= 16384 pixels (32768 in halves)."""
        fits = (self.pixels - 1) * self.x_bytes <= MAX_VDW_STRIDE
        if self.input_layout == "chw":
            return True, self.max_rows or sgemm_panel.MAX_ROWS
        if self.transpose_input is not None or self.max_rows is not None:
            return bool(self.transpose_input) and fits, self.max_rows or sgemm_panel.MAX_ROWS
        ways = hardware.TMU_CACHE_WAYS
        direct = self._panel(False, vectors=vectors)
        own = lines_per_set(direct)
        if (direct.qpus > 4 and own > ways) or (direct.qpus > 2 and own >= 4 * ways):
            return fits, sgemm_panel.MAX_ROWS       # transpose_a_first's rule, lines counted
        # With single-k gathers (odd chunk depths: 8 vectors x 3 k-rows, 4 x 5), two lines per
        # set within a TMU pair cost less than re-reading the weights for 4 pixels per QPU
        # (pi_zero, 12 QPUs, full layers, ms: 56x56x128->128 V8 8.06 against V8 4 pixels 10.16;
        # 28x28x128->256 3.70 / 4.87; 14x14x384->64 V4 0.93 / 1.19; 14x14x384->96 V8 1.16
        # against V6 4 pixels 1.53).
        shared = ways * (2 if direct.gather_k == 1 else 1)
        if direct.qpus <= 8 or lines_per_set(direct, hardware.QPUS_PER_TMU) <= shared:
            return False, sgemm_panel.MAX_ROWS
        for rows in range(sgemm_panel.MAX_ROWS - 1, MIN_ROWS - 1, -1):
            if lines_per_set(self._panel(False, rows, vectors), hardware.QPUS_PER_TMU) <= ways:
                return False, rows
        return fits, sgemm_panel.MAX_ROWS

    @property
    def gathers(self):
        """Whether the weights come through the TMU (``gather_weights``). By default wherever
        the panel allows it and a panel has MIN_GATHER_CHUNKS chunks: 64-byte rows as TMU
        line fills cost the bus ~16 clocks at 300 MHz against ~27 as DMA rows, and the layers
        are bound by the bus. Measured (pi_zero, 12 QPUs, full layers, panel launch only, ms,
        DMA -> gathered): 7x7x1024->1024 7.47 -> 6.50; 14x14x512->512 6.18 -> 5.88;
        28x28x256->256 6.22 -> 5.87; 56x56x128->128 8.06 -> 7.63; 28x28x32->192 (8 chunks)
        1.231 -> 1.175 ms; but 112x112x16->96 (4 chunks) 7.56 -> 7.64, where the stores
        bound it and the gathers only add instructions."""
        return self.panel.b_gather

    @property
    def spreads(self):
        """Whether the last pass's leftover pixels are spread over the QPUs in pieces
        (``spread_rows``). By default wherever the panel allows it: pixels left over after
        whole rows per QPU in the last pass, the weights gathered, no residual, the last pass's
        rows and piece within the registers (7x7 and 14x14 on 12 QPUs with 8-vector panels).
        Halves too (pi_zero, 12 QPUs, full layers, channel-major x, fp16 storage, ms, plain
        passes -> pieces on the leaves): 14x14x512->512 5.867 -> 5.716; 7x7x512->1024 3.311
        -> 2.833; 7x7x1024->1024 6.529 -> 5.512."""
        return self.panel.spread_rows

    @property
    def parks(self):
        """How many rows of each pass are parked and stored during the next pass
        (``park_rows``, vc4nn/kernels/panel_park.py); by default ``parking_default`` (pw1: 4 of
        8 rows, pw2: 2 of 4)."""
        return self.panel.park_rows

    @property
    def staggers(self):
        """Whether the rows retire at staggered points of a cyclic k stream, stored one vector
        per chunk while the others compute (``stagger``, vc4nn/kernels/panel_stagger.py). By
        default where it runs (the transposed route, float32 weights, x and y either, a bias,
        no residual, 12 QPUs for 8-vector panels, K + 1 in chunks that make 5 segments: Cin =
        128) and N is one panel; its panel width then wins (``vectors``). Measured (pi_zero, 12
        QPUs, full layers, channel-major x, ms): 56x56x128->128 6.678 -> 5.614 (53% -> 64% of
        peak), with fp16 x and y 6.509 (4 vectors, not staggered) -> 5.778; not 28x28x128->256
        (two panels, each with its warm-up and last cycle): 3.360 -> 3.761."""
        return self.panel.stagger

    @property
    def most_rows(self):
        """Rows per QPU at most as the panel runs (``max_rows`` resolved): the route's, or the
        fewer that ``parking_default`` takes to park its rows (pw1: 7 of the route's 8, 5 of
        them parked). A tiling that gives it with ``park_rows`` rebuilds the same panel."""
        return self.panel.max_rows

    @property
    def pairs(self):
        """Whether x is gathered two k at a time across the chunks (``pair_gathers``: one
        request and one copy per two k instead of per k, where 8-vector panels have chunks of
        3 k-rows; the chunk loop's body becomes two chunks, 2.9 KB for 6 pixels per QPU). By
        default on the transposed route, where the panel allows it (the weights gathered,
        float32 x) and the plan has one pass; the NHWC routes keep their aliasing rule, which
        counts lines per gather. Measured (pi_zero, 12 QPUs, full layers, channel-major input,
        ms, one k -> two k per gather), before the cycle model had an instruction cache:
        56x56x128->128 6.611 -> 6.573; 28x28x128->256 3.324 -> 3.303; 14x14x512->512 5.400 ->
        5.341; 7x7x512->1024 2.934 -> 2.860; with it (main at e64d5d2 merged): 56x56x128->128
        7.490 -> 7.975, 28x28x128->256 3.860 -> 4.150, 14x14x512->512 5.712 -> 5.820,
        112x112x32->64 7.723 -> 8.449, but 7x7x1024->1024 5.861 -> 5.700, 7x7x512->1024 3.077
        -> 3.073: the doubled loop body costs instruction-cache misses where a plan has several
        passes (more code per panel). Nor where the unpaired panel's chunk after its loop runs
        the loop's body as it is (``panel_kloop.shared_chunk`` "plain": K = 128, 512), whose
        chunk loop and tail then fit the cache: 7x7x512->1024 3.050 paired, 2.950 not; but
        7x7x1024->1024 5.631 paired, 5.704 not (branch pwstore)."""
        return self.panel.pair_gathers

    @property
    def depth(self):
        """k-rows of weights per chunk (``chunk_depth``): by default the deepest chunk the
        QPUs gather whose k-rows' read setups are small immediates from k-row 1's, or where
        the result is stored as halves the deepest they gather (``_gathered``): fp16 pw1, 6
        k-rows of 4 vectors instead of 3 (chunks of 5 do not split over 12 QPUs), so half the
        chunk barriers, x gathered two k at a time (a copy of halves per 2 k instead of per
        k) and the 6 rows of a pass all parked, 5 store slots per chunk. Measured (pi_zero,
        12 QPUs, full layers, NHWC x, fp16 x, y and weights, ms, 3 -> 6 k-rows): 112x112x32->64
        5.378 -> 5.034; v2's 14x14x192->64 0.412 -> 0.387, 14x14x384->64 0.711 -> 0.664,
        7x7x960->320 2.149 -> 2.146. Not float32: 112x112x32->64 at its memory roofline
        already, 5.763 -> 6.044 (channel-major x, 6 rows all parked; 8 rows, 2 parked: 6.519)."""
        return self.panel.chunk_depth

    def depths(self):
        """The chunk depths a tuner tries on this plan's panel width: the deepest gathered
        (or DMA'd) with r3 at k-row 1's read setup, the deepest with r3 anywhere and the
        shallowest gathered (MIN_GATHER_DEPTH)."""
        vectors = self.vectors
        return sorted({sgemm_panel.deepest_chunk(vectors, self.num_qpus, far)
                       for far in (False, True)} | {MIN_GATHER_DEPTH})

    @property
    def spreads_on_leaves(self):
        """Whether only the leaves take the pieces (``spread_leaves``): the master and the
        relays, whose barrier work is on every chunk's path, then run the last pass without a
        piece, and the leaves' chunk boundaries without the branches to the barrier roles.
        By default wherever there are at least as many leaves as pixels left over (pw6-pw13 on
        12 QPUs). Measured (pi_zero, 12 QPUs, full layers, channel-major input, ms, pieces on
        every QPU -> on the leaves): 7x7x512->1024 3.011 -> 2.934; 7x7x1024->1024 5.846 ->
        5.690; 14x14x512->512 5.441 -> 5.400; 14x14x256->512 2.943 -> 2.926."""
        return self.panel.spread_leaves

    @property
    def transposed(self):
        """Whether the activation is transposed on the GPU first (``route``)."""
        return self.route[0]

    @property
    def panel(self):
        return self._panel(*self.route)

    @property
    def transpose(self):
        """The transpose launch's plan, or None (also when x comes transposed: "chw")."""
        if not self.transposed or self.input_layout == "chw":
            return None
        return transpose.TransposePlan(self.pixels, self.cin, self.num_qpus, self.x_storage)


# Panel widths (vectors of 16 output channels) the default plan chooses from: 8 (128 channels,
# no edge panel for MobileNet's multiples of 128), the SGEMM default 6, and 4 (Cout = 64).
PANEL_WIDTHS = (8, 6, 4)
MIN_ROWS = 4        # fewer rows per QPU re-read the weights too often to beat the transpose
MIN_GATHER_CHUNKS = 8   # fewer chunks per panel: the weights are DMA'd (``gathers``)
MIN_GATHER_DEPTH = 3    # k-rows per chunk at least, to gather the weights in shallower chunks


def gather_depths(vectors, num_qpus, far=False):
    """The chunk depths to gather a panel of ``vectors`` in, deepest first (``far``: see
    sgemm_panel.deepest_chunk)."""
    deepest = sgemm_panel.deepest_chunk(vectors, num_qpus, far)
    return range(deepest, min(deepest, MIN_GATHER_DEPTH) - 1, -1)


# What the bus spends on one 64-byte store row, in instructions' time (~19 clocks at 300 MHz:
# the model's ~1 GB/s of store rows); a row of halves (fp16 C) is taken as half that.
STORE_ROW_COST = 4.8
# No rows parked where a pass's store burst takes less than this share of its k steps
# (``parking_default``).
MIN_PARK_BURST = 0.4


def parking_default(panel):
    """``panel`` with the most rows parked (``PanelPlan.park_rows``), and with them the most
    rows per QPU whose registers leave room for them, whose store slots in the next pass are
    no more than the parked vectors and a chunk loop body's slots or a quarter more (the slots
    past the parked vectors store the last ones again: with many chunks per panel they would
    flood the bus; 14x14x384->64 0.637 -> 0.772 ms), or ``panel`` itself. Where its rows leave no
    register to park in and a pass's store burst takes at least half as long as its k steps
    (its rows' vectors from every QPU at STORE_ROW_COST, against ``issue_estimate`` per pass),
    the most rows per QPU of which half can be parked. Measured (pi_zero, 12 QPUs, full
    layers, channel-major input, ms): 112x112x32->64 6.391 -> 5.752 (8 rows, 4 parked);
    56x56x64->128 4.183 -> 3.916 (4 rows, 2 parked; 5 and 1: 4.152); but 56x56x128->128
    (burst a third of its k steps) 6.573 -> 6.823 with 4 and 2. Fewer rows with all parked
    lost then (112x112x32->64 with 4 and 4: 6.327). With the instruction cache in the model and
    the panel's code within it (branch pwstore): 112x112x32->64 8 rows, 4 parked 6.520; 7
    rows, 5 parked 5.762 (the most its store slots take, 20 vectors; the default); 6 and 5
    5.824; 5, all parked 6.062; 4, all parked 6.909; 56x56x64->128 4 rows, 2 parked 4.135
    (the default), 2 rows all parked 4.631; v2's pointwise layers keep their plans. None
    where the store burst (a row of halves at half a row's cost) takes less than
    MIN_PARK_BURST of the k steps: 56x56x128->128's third lost (above), and with fp16 x, y and
    weights (branch pw16, NHWC x, ms) 56x56x64->128 (burst 0.29 of its k steps) 4.192 parked
    (4 rows, 2 parked), 3.894 not (6 rows), while 112x112x32->64 (0.46) gains: 5.815 -> 5.378
    (7 rows, 5 parked)."""
    def parked(most, rows):
        try:
            plan = dataclasses.replace(panel, max_rows=most, park_rows=rows)
        except ValueError:
            return None
        step, vectors = panel_park.slots_per_body(plan), panel_park.parked_vectors(plan)
        # The chunk loop's bodies only, not a shared chunk's (panel_kloop.loop_bodies): counted
        # too, its slots take 56x56x64->128's parking away, 4.125 -> 4.214 ms.
        slots = step * (steady_chunks(plan) // plan.chunk_period)
        return plan if slots <= vectors + max(step, vectors // 4) else None

    burst = panel.rows * panel.panel_vectors * panel.qpus * STORE_ROW_COST * panel.c_bytes / WORD
    steps = sgemm_panel.issue_estimate(panel) / panel.passes
    if burst < MIN_PARK_BURST * steps:
        return panel
    for rows in range(panel.rows, 0, -1):             # the most parked rows first,
        for most in range(panel.rows, rows - 1, -1):    # then the most rows per QPU
            plan = parked(most, rows)
            if plan and plan.rows == most:
                return _stepped_drains(plan, parked)
    if burst * 2 < steps:
        return panel
    for most in range(panel.rows - 1, 1, -1):
        plan = parked(most, most // 2)
        if plan and plan.rows == most:
            return plan
    return panel


def _stepped_drains(plan, parked):
    """``plan``, or with one parked row fewer where that lets the store slots take their
    addresses from a register (panel_park.drain_registers: no uniform word per slot). fp16
    112x112x32->64 (pi_zero, 12 QPUs, full layers, NHWC x, ms): 6 rows, all parked (25 slots
    for 24 vectors, addresses from the uniform stream) 4.625; 5 of them parked (20 slots for
    20 vectors, stepped addresses) 4.519."""
    if plan.park_rows < 2 or panel_park.drain_registers(plan):
        return plan
    fewer = parked(plan.rows, plan.park_rows - 1)
    return fewer if fewer and fewer.rows == plan.rows and panel_park.drain_registers(fewer) \
        else plan


def lines_per_set(panel, qpus=1):
    """The most lines of A one set of a TMU cache must hold at once: those of the rows the first
    ``qpus`` QPUs gather (consecutive row blocks; 2 = the QPUs sharing a TMU,
    hardware.QPUS_PER_TMU). Each row keeps one line in use for 8 two-k gathers; rows on one line
    share it, more lines on a set than its ways evict each other before the next gather. (Unlike
    sgemm_panel.a_rows_per_set, rows sharing a line count once: with Cin <= 16 they do.)"""
    line, ways = hardware.TMU_CACHE_LINE_BYTES, hardware.TMU_CACHE_WAYS
    sets = hardware.TMU_CACHE_BYTES // (line * ways)
    rows = panel.rows * min(qpus, panel.qpus)
    lines = {g * panel.a_lane // line for g in range(rows)}
    return max(collections.Counter(n % sets for n in lines).values())


@functools.lru_cache(maxsize=128)
def programs_for(plan):
    """(transpose program or None, panel program) of a plan, assembled once per plan."""
    first = transpose.program_for(plan.transpose) if plan.transpose else None
    if plan.panel.stagger:
        return first, panel_stagger.program_for(plan.panel)
    return first, sgemm_panel.program_for(plan.panel)


def launches(plan, x, w, y, bias=None, residual=None, workspace=None):
    """[(program, QPUs, uniform streams)] of the layer, in order. Bus addresses: x the
    activation ([H*W, Cin], or [Cin, H*W] when the plan's input_layout is "chw"), w the weights
    (Cin, Cout), y the result, bias / residual when the plan has them, workspace a Cin x H*W
    buffer of x's storage when the plan transposes x itself (``plan.transpose``)."""
    first, main = programs_for(plan)
    out = []
    a = x
    if first is not None:
        out.append((first, plan.transpose.qpus, plan.transpose.uniform_streams(x, workspace)))
        a = workspace
    if plan.panel.stagger:
        streams = panel_stagger.uniform_streams(plan.panel, (a, w, y), bias)
    else:
        streams = sgemm_panel.uniform_streams(plan.panel, (a, w, y), 1.0, 0.0, bias=bias,
                                              residual=residual)
    out.append((main, plan.num_qpus, streams))
    return out
