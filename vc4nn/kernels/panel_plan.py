"""The panel kernel's plan: everything the host decides before assembling.

The shape (M, N, K, op(A)), the QPUs, the epilogue and the tiling (rows of A per QPU, panel
width, k-rows per chunk) and what follows from them: passes, panels and their edge variant,
chunks, who loads, and the TMU-cache aliasing rules the SGEMM and pointwise routes use.
vc4nn/kernels/sgemm_panel.py explains the kernel.
"""

import collections
import dataclasses

from asm import isa

from .. import hardware
from .common import LANES, WORD, ceil_div
from .epilogue import Epilogue
from .panel_registers import free_registers, piece_registers


# By default a panel is 6 vectors (96 columns): 8 rows x 6 vectors = 48 accumulators per QPU,
# and with 12 QPUs the 96 rows of AlexNet conv1 in one pass (docs/sgemm.md: the bus table for
# W = 96). A plan may take another width (``panel_vectors``) and chunk depth (``chunk_depth``):
# rows x vectors <= ACCUMULATORS, and both chunk buffers plus one staging row per QPU within the
# VPM rows a QPU can read (isa.VPM_ROWS): 6 x 4, 8 x 3 (128 columns) or 12 x 2 k-rows.
PANEL_VECTORS = 6
ACCUMULATORS = 48               # registers for accumulators besides the 16 of bookkeeping
MAX_ROWS = 8                    # rows of A (of C) per QPU: lanes 0-7 of a two-k gather
CHUNK_ROWS = 4                  # k-rows per chunk: 2 x 4 x 6 = 48 VPM rows double-buffered
ROW_BYTES = LANES * WORD
TMU_REQUESTS = 4                # a QPU's TMU requests in flight at most (facts §5.13)
HALF = 2                        # bytes of an IEEE half
GATHERED_RELAYS = 3             # relays of the barrier with gathered B at most (``loaders``)
SMALL_IMMEDIATES = range(-16, 16)

# ROLE word (first word after "participates"): bit 31 = barrier master (so the N flag of the
# word tests it), bit 0 = loader. Any other QPU that does not load has role 0 (the Z flag).
ROLE_MASTER, ROLE_LOADER = 1 << 31, 1


@dataclasses.dataclass(frozen=True)
class PanelVariant:
    """The code of one kind of panel: ``vectors`` of B's columns starting at column ``start``.

    ``partial`` is (vector index, VPM x, depth) of the one vector that is stored only in part,
    or None. Two kinds of edge: when N >= 96 the last panel's window is shifted
    left to end at column N (its first vector overlaps the panel before and stores only its
    last ``depth`` lanes); when N < 96 is not a multiple of 16 the window starts at 0 and its
    last vector is loaded and stored with ``depth`` < 16 columns ("narrow").
    """

    vectors: int
    start: int
    partial: tuple = None
    narrow: bool = False


@dataclasses.dataclass(frozen=True)
class PanelPlan:
    m: int
    n: int
    k: int
    trans_a: bool
    num_qpus: int
    alpha_one: bool
    beta_zero: bool
    # The layers' fused bias / residual / activation (vc4nn/kernels/epilogue.py): the bias is
    # where the accumulators start, the residual is gathered and added before the store, the
    # activation is applied on the VPM write. It replaces alpha and beta (their registers).
    epilogue: Epilogue = Epilogue()
    # At most this many rows per QPU (1..MAX_ROWS): fewer keep the rows that the QPUs sharing a
    # TMU cache gather from aliasing (vc4nn/kernels/pointwise.py), at the price of more passes.
    max_rows: int = MAX_ROWS
    # The panel's width in vectors of 16 columns and the k-rows per chunk (see PANEL_VECTORS).
    panel_vectors: int = PANEL_VECTORS
    chunk_depth: int = CHUNK_ROWS
    # B stored as IEEE halves in channel-pair words (vc4nn/kernels/panel_halves.py): each loader
    # widens its k-row to float32 in the VPM before the barrier, so the k loop is unchanged.
    b_halves: bool = False
    # A, C and the epilogue's residual stored as IEEE halves, one per element in their natural
    # order (vc4nn/kernels/panel_act_halves.py): the gathers keep each lane's half by its
    # address, C is packed on its way to the VPM. The bias stays float32.
    a_halves: bool = False
    c_halves: bool = False
    r_halves: bool = False
    # B's k-rows gathered through the TMU by every QPU instead of DMA'd by the loaders
    # (vc4nn/kernels/panel_gather_b.py): a 64-byte row costs the bus a line fill, not a VDR row.
    b_gather: bool = False
    # The last pass with fewer rows per QPU when its rows are fewer (``last_rows``); its code is
    # generated once more. Off by default (SGEMM's programs stay as they were).
    balance_passes: bool = False
    # The last pass with L = (its rows) // QPUs rows per QPU, and the E rows left over spread
    # over the QPUs, a piece of W vectors each (vc4nn/kernels/panel_spread.py): 7x7 = 49
    # pixels on 12 QPUs as 4 rows + one vector of pixel 48, instead of 5 rows on 10 QPUs.
    spread_rows: bool = False
    # spread_rows with the pieces on the leaves only (``piece_qpus``): the master and the
    # relays, whose barrier work is on every chunk's path, run the last pass without a piece
    # and the leaves' boundary has no branch to theirs (panel_spread). Off by default.
    spread_leaves: bool = False
    # A gathered two k at a time also when a chunk's k-rows are odd (8 vectors x 3): a gather
    # then spans two chunks, so the chunk loop's body is two chunks (``chunk_period``) and r1
    # holds A's gather across the boundary. Gathered B and float32 A only. Off by default.
    pair_gathers: bool = False
    # The last ``park_rows`` rows of each pass but the last parked in spare registers at the
    # panel's end and stored during the next pass's chunks (vc4nn/kernels/panel_park.py), so
    # that part of the store burst overlaps the k steps. 0: off (the default).
    park_rows: int = 0
    # Staggered retirement (vc4nn/kernels/panel_stagger.py): the k-rows run as a cycle whose
    # last k-row is the bias (A = 1 there), each row of a QPU's block retiring at another
    # chunk of it and stored one vector per chunk while the others compute. ``k`` then counts
    # the bias row. Off by default.
    stagger: bool = False

    def __post_init__(self):
        if not 1 <= self.max_rows <= MAX_ROWS:
            raise ValueError(f"max_rows must be 1..{MAX_ROWS}")
        if not 1 <= self.panel_vectors <= LANES:
            raise ValueError(f"panel_vectors must be 1..{LANES}")
        if self.chunk_depth < 1 or self.staging_y + self.num_qpus > isa.VPM_ROWS:
            raise ValueError(f"chunk_depth {self.chunk_depth} x panel_vectors "
                             f"{self.panel_vectors}, double-buffered, and {self.num_qpus} "
                             f"staging rows exceed the {isa.VPM_ROWS} VPM rows")
        if self.base_row is None:
            raise ValueError(f"chunk_depth {self.chunk_depth} x panel_vectors "
                             f"{self.panel_vectors}: the k-rows' VPM read setups lie too far "
                             f"apart for small-immediate offsets")
        if not self.epilogue.is_identity and not (self.alpha_one and self.beta_zero):
            raise ValueError("a panel plan with an epilogue takes alpha = 1 and beta = 0")
        if self.b_gather:
            self._check_b_gather()
        if self.spread_rows:
            self._check_spread()
        elif self.spread_leaves:
            raise ValueError("spread_leaves: it needs spread_rows")
        if self.park_rows:
            self._check_park()
        if self.stagger:
            from .panel_stagger import check     # (it imports this module)
            why = check(self)
            if why:
                raise ValueError(f"stagger: {why}")
        if self.pair_gathers and (not self.b_gather or self.a_halves):
            raise ValueError("pair_gathers: it needs gathered B and float32 A (the chunk "
                             "boundary of the DMA path and fp16 A's copies use r1)")
        if (self.c_halves or self.r_halves) and not (self.alpha_one and self.beta_zero):
            raise ValueError("fp16 C or residual needs alpha = 1 and beta = 0")
        if self.b_halves and self.panel_vectors % 2 and self.n > self.panel_vectors * LANES:
            raise ValueError(f"panel_vectors {self.panel_vectors}: fp16 B needs an even panel "
                             f"width (panels start on a 32-column block of channel pairs)")

    def _check_b_gather(self):
        rows = self.chunk_rows * self.panel_vectors
        if self.b_halves and self.b_rows not in (1, 2):
            raise ValueError(f"b_gather: fp16 B is gathered a channel-pair block (2 rows) per "
                             f"QPU or per two QPUs, not {self.b_rows} rows per QPU")
        if self.n % (self.panel_vectors * LANES):
            raise ValueError(f"b_gather: N = {self.n} is not a multiple of the panel's "
                             f"{self.panel_vectors * LANES} columns")
        if rows % self.qpus or self.b_rows > TMU_REQUESTS - 2 or self.panel_vectors % self.b_rows:
            raise ValueError(f"b_gather: {self.chunk_rows} k-rows x {self.panel_vectors} "
                             f"vectors per chunk do not split into 1 or 2 vectors of one "
                             f"k-row for each of {self.qpus} QPUs")

    def _check_spread(self):
        why = None
        if not (self.b_gather and self.alpha_one and self.beta_zero):
            why = "it needs gathered B and alpha = 1, beta = 0"
        elif self.epilogue.residual:
            why = "it takes no residual"
        elif self.base_row != 1:
            why = f"its pieces' reads count from k-row 1 (chunks of {self.chunk_rows} k-rows)"
        elif self.edge:
            why = f"N = {self.n} leaves an edge panel"
        else:
            rows, extra = self._spread_split()
            if not rows or not extra:
                why = (f"M = {self.m} on {self.num_qpus} QPUs leaves {extra} rows past "
                       f"{rows} per QPU in the last pass")
            elif self.piece_qpus[1] < extra:
                why = (f"spread_leaves: {self.piece_qpus[1]} leaves for the {extra} rows left "
                       f"over")
            elif rows + 1 > self.max_rows or \
                    rows * self.panel_vectors + self.piece_vectors > self.accumulator_budget:
                why = f"{rows} rows per QPU and a piece of {self.piece_vectors} vectors do not fit"
        if why:
            raise ValueError(f"spread_rows: {why}")
        piece_registers(self)               # (raises if the piece's own registers do not fit)

    def _check_park(self):
        from .panel_park import check       # (it imports this module)
        why = check(self)
        if why:
            raise ValueError(f"park_rows: {why}")

    def _spread_split(self):
        """(rows per QPU of the last pass, rows left over for the pieces) with spread_rows."""
        left = self.m - (self.passes - 1) * self.num_qpus * self.rows
        return divmod(left, self.num_qpus)

    @property
    def piece_qpus(self):
        """spread_rows: (the first QPU with a piece, how many have one): all of them, or
        (``spread_leaves``) the QPUs after the master and the relays (QPUs 1..``loaders``,
        loader_slot)."""
        if not self.spread_leaves:
            return 0, self.num_qpus
        loaders = self.loaders
        first = 1 + loaders if self.qpus > loaders else self.qpus
        return first, self.num_qpus - first

    @property
    def pieces_per_row(self):
        """spread_rows: QPUs per row left over (each takes a piece of it)."""
        return self.piece_qpus[1] // self._spread_split()[1]

    @property
    def piece_vectors(self):
        """spread_rows: W, the vectors of a piece (the row's last piece may store fewer)."""
        return ceil_div(self.panel_vectors, self.pieces_per_row)

    @property
    def b_rows(self):
        """b_gather: rows of 16 columns of B each QPU gathers per chunk."""
        return self.chunk_rows * self.panel_vectors // self.qpus

    @property
    def b_gathers(self):
        """b_gather: TMU gathers per QPU per chunk: one per row, or (fp16 B) one channel-pair
        block for both rows, or for its own row and its neighbour's (b_rows 1: panel_gather_b)."""
        return 1 if self.b_halves else self.b_rows

    # -- rows: R rows of C per QPU, in passes of (participating QPUs) x R rows ----------------
    @property
    def rows(self):
        """R: as many as fit (8, or fewer accumulators of wider panels) unless fewer balance the
        QPUs better in the last pass."""
        most = min(self.max_rows, self.accumulator_budget // self.panel_vectors)
        passes = ceil_div(self.m, most * self.num_qpus)
        return ceil_div(self.m, self.num_qpus * passes)

    @property
    def last_rows(self):
        """Rows per QPU of the last pass: ``rows``, or with ``balance_passes`` as few as hold
        the rows the passes before leave (196 pixels on 12 QPUs: 6, 6 and 5)."""
        if self.spread_rows:
            return max(1, self._spread_split()[0])     # (_check_spread refuses 0)
        if not self.balance_passes:
            return self.rows
        before = (self.passes - 1) * self.qpus * self.rows
        return ceil_div(self.m - before, self.qpus)

    def pass_blocks(self):
        """(first row, rows per QPU) of every pass."""
        return [(p * self.qpus * self.rows, self.rows if p + 1 < self.passes else self.last_rows)
                for p in range(self.passes)]

    @property
    def accumulator_budget(self):
        """ACCUMULATORS, less the regfile-A register fp16 B widens through when a bias, a
        residual and an odd K's lane_k leave no spare register, or what b_gather's registers
        leave (panel_registers)."""
        if self.b_gather:           # its three registers: count what is left
            return min(ACCUMULATORS, free_registers(self))
        spare = 2 - self.epilogue.bias - self.epilogue.residual - self.k % 2
        return ACCUMULATORS - (self.b_halves and spare < 1)

    @property
    def blocks(self):
        return ceil_div(self.m, self.rows)

    @property
    def qpus(self):
        """QPUs that take part (the others exit at once): there is no point in more than the
        row blocks, since every participant computes a whole block on every panel; with
        b_gather all of them, since all gather B (the extra ones compute a block again)."""
        return self.num_qpus if self.b_gather else min(self.num_qpus, self.blocks)

    @property
    def passes(self):
        return ceil_div(self.blocks, self.qpus)

    # -- k: chunks of Kc k-rows, one k-row loaded by each of the first Kc QPUs ----------------
    @property
    def chunk_rows(self):
        return min(self.chunk_depth, self.qpus)

    @property
    def buffer_rows(self):
        """VPM rows of one chunk buffer; buffer 1 follows buffer 0."""
        return self.chunk_depth * self.panel_vectors

    @property
    def staging_y(self):
        """QPU q stages C in VPM row staging_y + q, after both buffers."""
        return 2 * self.buffer_rows

    @property
    def base_row(self):
        """The k-row whose read setup r3 holds during a chunk (``row_base``): row 1, or where a
        deep chunk's rows lie too far apart for that (4 vectors x 6 k-rows: offsets -4 .. 20
        from row 1), the first row from which every k-row's setup is a small immediate away
        (row 2: -8 .. 12). None when no row is."""
        return _base_row(self.chunk_rows, self.panel_vectors)

    @property
    def row_base(self):
        """r3 during a chunk, less the chunk buffer's setup: that of k-row ``base_row``, so
        that every k-row's setup is r3 plus a small immediate (-6, 0, 6, 12 for 6-vector
        panels)."""
        return self.base_row * self.panel_vectors

    @property
    def chunks(self):
        return ceil_div(self.k, self.chunk_rows)

    def loader_slot(self, q):
        """The k-row of each chunk QPU ``q`` loads, or None. The loaders are QPUs 1..Kc (with
        gathered B 1..``loaders``, relays of the barrier only): not
        the master, whose barrier work is on everybody's path, unless every QPU must load
        (QPUs <= 4). A loader reads its load words just after the barrier, and the emulator hands
        out the "go" tokens in QPU order: the first ones out find the bus free of the others'
        loads (loaders as the last QPUs waited up to 5% of the run for their uniforms)."""
        first = 1 if self.qpus > self.loaders else 0
        return q - first if first <= q < first + self.loaders else None

    @property
    def loaders(self):
        """QPUs with a loader's role: one per k-row of a chunk (Kc); with gathered B, where
        every QPU gathers its share and a loader only relays the barrier (panel_barrier), at
        most GATHERED_RELAYS of them: the master's semaphore instructions per chunk on 12
        QPUs are 22 with 6 relays (it acquires 5 ARRIVED and 6 DONE, releases 6 RELAY and 5
        GO), 14 with 4, 10 with 3 (each relay takes 3 arrivals and hands out 2 GO), and the
        master's are on every chunk's path. Measured (pi_zero, 12 QPUs, full layers, fp16 x,
        y and weights, ms, Kc relays -> 3): 112x112x32->64 in chunks of 6 k-rows 4.673 ->
        4.625 (2 relays: 4.643, 4: 4.656); v2's 6-vector panels in chunks of 4 k-rows:
        28x28x32->192 1.178 -> 1.165, 14x14x96->576 1.568 -> 1.487, 7x7x160->960 1.054 ->
        0.975."""
        if self.b_gather:
            return min(self.chunk_rows, GATHERED_RELAYS)
        return self.chunk_rows

    @property
    def gather_k(self):
        """k per TMU gather of A: 2 when every chunk's k-rows pair up or ``pair_gathers`` (see
        panel_kloop.GATHERS_AHEAD)."""
        return 2 if self.chunk_rows % 2 == 0 or self.pair_gathers else 1

    @property
    def chunk_period(self):
        """Chunks after which the k steps' gather pattern repeats: the chunk loop's body."""
        return 2 if self.chunk_rows % self.gather_k else 1

    # -- n: full panels, then one edge variant ------------------------------------------------
    @property
    def full_panels(self):
        return self.n // (self.panel_vectors * LANES)

    @property
    def edge(self):
        """The variant of the last, narrower panel, or None when N is a multiple of 96."""
        width = self.panel_vectors * LANES
        rest = self.n % width
        if not rest:
            return None
        vectors = ceil_div(rest, LANES)
        tail = rest - (vectors - 1) * LANES          # columns of the partial vector
        if self.b_halves:           # B's rows are padded to whole pairs: no window shift
            start = self.full_panels * width
            return PanelVariant(vectors, start, None if tail == LANES else (vectors - 1, 0, tail))
        if self.full_panels:                         # shift the window to end at column N
            start = self.n - vectors * LANES
            partial = None if tail == LANES else (0, LANES - tail, tail)
            return PanelVariant(vectors, start, partial)
        partial = None if tail == LANES else (vectors - 1, 0, tail)
        return PanelVariant(vectors, 0, partial, narrow=partial is not None)

    @property
    def variants(self):
        full = [PanelVariant(self.panel_vectors, 0)] if self.full_panels else []
        return tuple(full + ([self.edge] if self.edge else []))

    def panel_starts(self):
        """(variant, first column) of every panel, in the order the kernel runs them."""
        width = self.panel_vectors * LANES
        out = [(self.variants[0], p * width) for p in range(self.full_panels)]
        if self.edge:
            out.append((self.edge, self.edge.start))
        return out

    # -- element sizes and strides of op(A) ---------------------------------------------------
    @property
    def a_bytes(self):
        return HALF if self.a_halves else WORD

    @property
    def c_bytes(self):
        return HALF if self.c_halves else WORD

    @property
    def r_bytes(self):
        return HALF if self.r_halves else WORD

    @property
    def a_lane(self):
        """Bytes between rows of op(A) (the gather's lanes)."""
        return self.a_bytes if self.trans_a else self.k * self.a_bytes

    @property
    def a_k(self):
        """Bytes between k of op(A) (the gather address step)."""
        return self.m * self.a_bytes if self.trans_a else self.a_bytes


def deepest_chunk(vectors, num_qpus, far=False):
    """The most k-rows per chunk a panel of ``vectors`` can take on ``num_qpus`` QPUs (see
    PanelPlan's checks: VPM rows and small-immediate read setups), with r3 at k-row 1's setup
    (PanelPlan.base_row), or (``far``) at whichever k-row lets the chunk be deepest (4 vectors
    on 12 QPUs: 5 k-rows, far 6)."""
    def fits(rows):
        base = _base_row(rows, vectors)
        return base == 1 or (far and base is not None)

    rows = (isa.VPM_ROWS - num_qpus) // (2 * vectors)
    while rows > 2 and not fits(rows):
        rows -= 1
    return rows


def _base_row(chunk_rows, vectors):
    """PanelPlan.base_row of chunks of ``chunk_rows`` k-rows of ``vectors`` vectors."""
    for base in range(1, max(2, chunk_rows)):
        if all((row - base) * vectors in SMALL_IMMEDIATES for row in range(chunk_rows)):
            return base
    return None


# What one chunk boundary costs besides its k-rows, in instructions' time (barrier, loads,
# waits), and what a panel costs besides its chunks (bias, store): rough values, which rank the
# widths as the cycle model does (pi_zero, 12 QPUs, full layers: 14x14x512->512 8 > 6 > 4
# vectors, 2.13 / 2.34 / 2.58 M clocks; 56x56x64->128 8 > 6; 112x112x32->64 4 = 6 within 0.4%).
BOUNDARY_COST = 40
PANEL_COST = 30


def issue_estimate(plan):
    """Instructions' time one QPU spends on a plan, roughly: per k of each panel, R broadcasts
    and R x V multiply-adds plus the gather's copy and request, per chunk BOUNDARY_COST, per
    panel PANEL_COST plus its stores. For choosing a panel width, not for reporting."""
    per_k_gather = 2 / plan.gather_k
    total = 0
    for index, (_, rows) in enumerate(plan.pass_blocks()):
        # the last pass's piece (spread_rows): a broadcast and its multiply-adds
        piece = plan.piece_vectors + 1 if plan.spread_rows and index + 1 == plan.passes else 0
        for variant, _ in plan.panel_starts():
            k_loop = plan.k * (rows * (variant.vectors + 1) + piece + per_k_gather)
            boundary = BOUNDARY_COST
            if plan.b_halves and not plan.b_gather:     # the loaders' widening, on the path
                boundary += 4 + 3 * ceil_div(variant.vectors, 2)    # (panel_halves.widen)
            total += k_loop + plan.chunks * boundary + PANEL_COST + 6 * rows * variant.vectors
    return total


def a_rows_per_set(plan):
    """How many of the rows of A that one gather reads (NN: K floats apart) fall on the same set
    of the TMU cache (vc4nn/hardware.py); more than its ways and every gather misses. With K a
    multiple of 256, as in most of MobileNet's pointwise layers: K = 256 puts rows g and g+4
    together, K = 1024 all of them. The rows of A^T that a TN gather reads are one row, so the
    SGEMM API can transpose such an A on the GPU first (transpose_a_first)."""
    if plan.trans_a:
        return 1
    line, ways = hardware.TMU_CACHE_LINE_BYTES, hardware.TMU_CACHE_WAYS
    sets = hardware.TMU_CACHE_BYTES // (line * ways)
    return max(collections.Counter(g * plan.a_lane // line % sets for g in range(plan.rows))
               .values())


def transpose_a_first(plan):
    """Whether the SGEMM API should transpose A on the GPU and run the TN path instead: when A's
    rows alias (a_rows_per_set) on more than 4 QPUs, or 4 rows or more share a set on 3 or 4
    QPUs. With fewer QPUs the misses are served by the L2 without queueing on the bus and the
    transpose launch costs more than it saves. Measured in the cycle model (pi1; clocks direct
    -> transposed, the transpose launch included):

    - 12 QPUs: 49x128x256 285 612 -> 124 576; 96x96x256 279 704 -> 135 992; 96x192x1024
      2 269 536 -> 786 300; 392x64x256 1 079 072 -> 528 400. 8 QPUs: 49x128x256 241 480 ->
      139 512. 6 QPUs: 96x192x256 605 908 -> 339 056.
    - 4 QPUs: 49x128x256 (2 rows per set) 215 220 -> 240 490; 96x192x256 (2) 424 810 ->
      469 108; 96x192x512 (4) 1 433 164 -> 950 292; 49x128x1024 (7) 1 523 512 -> 971 010.
      3 QPUs: 49x128x256 (2) 301 734 -> 330 660; 49x128x1024 (6) 2 565 274 -> 1 279 998.
    - 2 QPUs: 49x128x1024 1 910 230 -> 1 978 288; 96x192x512 1 781 684 -> 1 901 896. 1 QPU:
      49x128x256 850 346 -> 902 832; 49x128x1024 3 301 802 -> 3 513 600.
    """
    shared = a_rows_per_set(plan)
    ways = hardware.TMU_CACHE_WAYS
    return (plan.qpus > 4 and shared > ways) or (plan.qpus > 2 and shared >= 4 * ways)


def relays(plan):
    """The relays: the loaders other than the master (see boundary)."""
    return [q for q in range(1, plan.qpus) if plan.loader_slot(q) is not None]
