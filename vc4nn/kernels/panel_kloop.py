"""The panel kernel's k loop: per k, the broadcast of A and the multiply-adds with B's k-row.

Also the schedule of A's TMU gathers along k (KStep): which k asks for a gather ahead, which
waits for one, and whether a gather holds one k or two.
"""

import functools
import typing

from asm import isa, null, r0, r1, r2, r3, r4, r5, r5rep, tmu0_s, vpm, vr_setup

from .common import LANES, ceil_div
from .halves import HALF_HIGH, HALF_LOW
from .panel_act_halves import copy_step, copy_steps, deferred_step
from .panel_gather_b import ROLE_FLAGS_STEP, carries_role_flags, pop_steps, stepped
from .panel_plan import MAX_ROWS, TMU_REQUESTS
from .panel_registers import LANE_DELTA, registers, stepped_loads
from .panel_spread import next_row_setup, read_setup


# A is gathered two k at a time when a chunk holds an even number of k-rows: lanes 0-7 hold
# A[rows, k], lanes 8-15 A[rows, k+1] (a QPU has at most 8 rows), which halves the TMU requests
# and the copies out of r4. A gather is asked for this many gathers ahead of its use: 4 k (or
# 3 single ones), well past the TMU latency and a line fill queued on the bus behind the other
# QPUs' fills and the chunk DMAs; at most that many requests are outstanding, within the FIFO
# depth of 4 (facts §5.13), and none reads past A (see KStep).
GATHERS_AHEAD = {1: 3, 2: 2}
# With B gathered (b_gather), A is asked at most this many gathers ahead: B's requests take
# the rest of the FIFO, and a k step of a gathered panel (~50 instructions) covers the latency.
GATHERS_AHEAD_WITH_B = 2


@functools.lru_cache(maxsize=256)
def gathers_ahead(plan):
    """How many gathers of A are asked for ahead: GATHERS_AHEAD, or with b_gather
    GATHERS_AHEAD_WITH_B at most, less what B's gathers take of the TMU FIFO
    (panel_gather_b); fp16 A (whose chunk cannot share the loop's body quietly: see
    shared_chunk) one, where that lets it share plainly and more do not (K = 64, 256, 1024 in
    chunks of 3 k-rows, one-k gathers: the last requests of the chunk after the loop then
    stay within A; a k step of 8-vector rows, ~60 instructions, still covers the TMU latency.
    pi_zero, 12 QPUs, full layers, fp16 x, y and weights, NHWC x, ms, 2 -> 1 ahead:
    56x56x64->128 4.444 -> 4.192, 28x28x256->256 6.127 -> 5.902, 14x14x256->512 3.002 ->
    2.928; but 56x56x128->128, which shares plainly with 2, 6.613 -> 6.715). Fewer ahead leave fewer last k without a request of their own, so the
    chunk after the chunk loop shares its body more often (shared_chunk: "plain" at K = 128
    and 512 with one row of B per QPU and chunk as with two; pi_zero, 12 QPUs, full layers,
    ms, 3 -> 2 ahead: fp16 56x56x128->128 7.175 -> 6.866, 14x14x512->512 6.016 -> 5.902;
    float32 112x112x32->64 6.565 -> 6.520)."""
    ahead = GATHERS_AHEAD[plan.gather_k]
    if plan.b_gather:
        ahead = min(ahead, GATHERS_AHEAD_WITH_B, TMU_REQUESTS - plan.b_gathers)
    if plan.a_halves and ahead > 1 and _shared(plan, 1) == "plain" != _shared(plan, ahead):
        return 1
    return ahead


class KStep(typing.NamedTuple):
    """What one k does with A, besides its multiply-adds.

    ``half``: which lanes of the gather hold this k (0: lanes 0-7, 1: lanes 8-15). ``request``:
    on the first k of a gather, ask for the gather gathers_ahead(plan) ahead: "full", or
    "single" for a last gather with one k (odd K), whose upper lanes then repeat the lower ones
    instead of reading past A. ``pop``: on the last k of a gather, wait for the next gather into r4.
    ``flip``: (fp16 A) on the first k of a gather, bit 1 of r2 differs from that of the
    gather's own address (panel_act_halves); ``flagged``: (fp16 A) the copy keeps the flags
    its chunk's first k set from r2 (reuses_flags), and ``flip`` says whether bit 1 of r2
    there differs from that of this gather's address."""

    half: int
    request: typing.Optional[str]
    pop: bool
    flip: bool = False
    flagged: bool = False
    ones: bool = False      # (stagger) the bias row: A is 1, no gather


def gather_kind(plan, gather):
    """"single" for a last two-k gather that holds one k (odd K), else "full"."""
    single = plan.gather_k == 2 and gather * 2 + 1 == plan.k
    return "single" if single else "full"


def k_kinds(plan, ahead=None):
    """The KStep of every k of a panel, in the order the panel runs them (``ahead``: with that
    many gathers ahead instead of gathers_ahead's)."""
    width, ahead = plan.gather_k, ahead or gathers_ahead(plan)
    k_a = plan.k - plan.stagger         # (stagger: the last k-row is the bias, A = 1)
    gathers = ceil_div(k_a, width)
    out = []
    for k in range(k_a):
        gather, half = divmod(k, width)
        request = gather_kind(plan, gather + ahead) if half == 0 and gather + ahead < gathers else None
        flagged = reuses_flags(plan) and k % plan.chunk_rows != 0
        flags_at = (k - k % plan.chunk_rows) // width if flagged else gather
        out.append(KStep(half, request, half == width - 1 and k + 1 < k_a,
                         flip(plan, r2_gather(plan, flags_at, ahead) - gather), flagged))
    return out + [KStep(0, None, False, ones=True)] * (plan.k - k_a)


def reuses_flags(plan):
    """Whether the copies of fp16 A but a chunk's first keep the flags that one set (KStep
    flagged): nothing between a chunk's copies sets flags (the chunk loop's count comes with
    its last copy, whose condition reads the flags before it; a chunk starts on a gather). A
    copy is then 2 instructions instead of 3: the request and r2's step take the moves' ADD
    slots (the last copy's step, whose slot the count takes, goes to the free ADD slot of the
    chunk's last group: k_step, loop_defers_step). Not with staggered retirement: its lane
    step tests the count mid-chunk (lane_step_row), which sets the flags."""
    return plan.a_halves and plan.chunk_rows % plan.gather_k == 0 and not plan.stagger


def r2_gather(plan, gather, ahead=None):
    """The gather whose address r2 holds when the k loop copies ``gather``: the copy comes
    before that k's request, and a "single" request does not step r2 (request_a)."""
    gathers = ceil_div(plan.k - plan.stagger, plan.gather_k)   # (stagger: the bias row's A is 1)
    asked = min(gather + (ahead or gathers_ahead(plan)), gathers)
    return asked - (asked == gathers and gather_kind(plan, gathers - 1) == "single")


def flip(plan, steps):
    """Whether bit 1 of A's address differs ``steps`` gathers on (fp16 A only): a gather
    step of an odd number of halves flips it."""
    if not plan.a_halves:
        return False
    return steps * plan.gather_k * (plan.a_k // plan.a_bytes) % 2 == 1


def steady_kinds(plan, ahead=None):
    """The KSteps of the chunks in the middle of a panel: the chunk loop's body, chunk_period
    chunks."""
    width, ahead = plan.gather_k, ahead or gathers_ahead(plan)
    out = []
    for row in range(plan.chunk_rows * plan.chunk_period):
        flagged = reuses_flags(plan) and row % plan.chunk_rows != 0
        steps = ahead - row % plan.chunk_rows // width if flagged else ahead
        out.append(KStep(row % width, "full" if row % width == 0 else None,
                         row % width == width - 1, flip(plan, steps), flagged))
    return out


def steady_chunks(plan, ahead=None):
    """How many of a panel's first chunks its chunk loop runs (a multiple of chunk_period):
    those whose k steps are steady_kinds and whose boundaries step B's addresses (the last
    chunks, whose k stop asking for gathers, are generated one by one)."""
    kinds, kc, period = k_kinds(plan, ahead), plan.chunk_rows, plan.chunk_period
    body = steady_kinds(plan, ahead)
    steady = 0
    while steady + period < plan.chunks and kinds[steady * kc:(steady + period) * kc] == body \
            and (not (plan.b_gather or stepped_loads(plan)) or
                 all(stepped(plan, c) for c in range(steady, steady + period))):
        steady += period
    return steady


def shared_chunk(plan):
    """How the chunk after the chunk loop's runs the loop's body, entered past its boundary
    after a boundary of its own (panel_chunks): None when it cannot; "plain" when its k steps
    are the body's (only its boundary does not step B's addresses, panel_gather_b.stepped:
    K = 128 or 512 in chunks of 3 k-rows, 2 gathers ahead: the chunk before the short last
    one); "quiet" when they are the body's but for A's requests past A's end (K = 64, 256 or
    1024 with 2 gathers ahead; K = 128 with 3, DMA'd B): the body's requests from count_row on
    then step r2 only while the chunk loop's
    count is not zero, so the shared chunk asks for its last valid gather again instead of
    reading past A (``quiet_gathers`` of them, waited for at the panel's end). The body is one
    chunk, the shared one is not the panel's last. It saves the chunk's ~180 instructions of
    code, which every panel fetched again through the instruction cache. fp16 A: never
    "quiet" (its copies' flags leave none for the requests' condition), so gathers_ahead takes
    fewer ahead where that makes it "plain"."""
    return _shared(plan, gathers_ahead(plan))


def _shared(plan, ahead):
    """shared_chunk with ``ahead`` gathers ahead."""
    kinds, kc, steady = k_kinds(plan, ahead), plan.chunk_rows, steady_chunks(plan, ahead)
    if plan.chunk_period != 1 or not 0 < steady < plan.chunks - 1:
        return None
    own, body = kinds[steady * kc:(steady + 1) * kc], steady_kinds(plan, ahead)
    if own == body:
        return "plain"
    if plan.a_halves:
        return None
    first = count_row(plan)
    quiet = body[:first + 1] + [kind._replace(request=None) for kind in body[first + 1:]]
    return "quiet" if own == quiet else None


def quiet_gathers(plan):
    """The gathers of A a "quiet" shared chunk asks for again (shared_chunk)."""
    if shared_chunk(plan) != "quiet":
        return 0
    return sum(1 for kind in steady_kinds(plan)[count_row(plan) + 1:] if kind.request)


def loop_bodies(plan):
    """How many times a panel runs the chunk loop's body (its store slots with parked rows,
    panel_park): the loop's chunks over its period, and the shared chunk."""
    return steady_chunks(plan) // plan.chunk_period + bool(shared_chunk(plan))


def count_row(plan):
    """The k-row whose first instruction steps the chunk loop's counter: the first after row 0
    that copies a gather (a free ADD slot next to the copy), else row 1 on its own. fp16 A:
    the last row that copies, after its copy, since a copy's flags would clobber the count's
    before the loop's branch."""
    last = steady_kinds(plan)[-plan.chunk_rows:]        # the body's last chunk (its branch)
    copies = [row for row, kind in enumerate(last) if kind.half == 0]
    if plan.a_halves:
        return copies[-1]
    rows = [row for row in copies if row]
    return rows[0] if rows else min(1, plan.chunk_rows - 1)


def loop_defers_step(plan):
    """Whether the chunk loop's count row leaves its r2 step to the chunk's last group
    (panel_act_halves.flagged_copy_steps), placed by k_step."""
    return deferred_step(steady_kinds(plan)[count_row(plan)], True)     # (it carries the count)


def lane_step_row(plan):
    """(stagger, one k per gather) The k-row of the chunk loop's last chunk whose request asks
    for the first gather of the next chunk: where a retiring row's lane moves to its next
    pixel (fp16 A; float32 A moves it at count_row, on the count's own flags)."""
    return plan.chunk_rows - gathers_ahead(plan)


def request_a(a, plan, kind, sig=None, upper=None, cond="always"):
    """Ask for one gather of A at r2 and step r2 to the next (the MUL reads r2 before the ADD
    writes it; ``cond``: the step's condition). A "single" gather is the last: its upper lanes
    repeat the lower ones, taking off ``upper`` (lane_k unless given)."""
    regs = registers(plan)[0]
    if kind == "single":
        return a.sub(tmu0_s, r2, regs["lane_k"] if upper is None else upper, sig=sig)
    return a.add(r2, r2, regs["a_step"], sig=sig, cond=cond).mov(tmu0_s, r2)


class ChunkLoop(typing.NamedTuple):
    """The chunk loop's control, given to the k steps of its body's last chunk: the branch back
    to ``label`` on ``cond``, the counter stepped down by ``step`` (count_row); ``quiet``: the
    requests from count_row on step r2 only while the count is not zero (shared_chunk)."""

    label: str
    cond: str = "all_zc"
    step: int = 1
    quiet: bool = False


def k_step(a, plan, acc, kind, row, last_row, loop=None, handles=None):
    """The k of k-row ``row`` of a chunk: up to 2 bookkeeping instructions, then per row g of A
    the broadcast of A[m0+g, k] and its V multiply-adds. ``kind``: a KStep.

    Group g's VPM reads are queued (facts §3: two setups) by group g-1's first multiply-add,
    and group 0's by the previous k-row's last group, except on a chunk's first k-row (the
    chunk before had no next k-row to queue). r3 is the setup of k-row 1 (see boundary), so
    every k-row's setup is r3 plus a small immediate. ``loop``: the chunk loop (a ChunkLoop);
    its counter is stepped in a free ADD slot (count_row) and its branch goes 3 instructions
    before the end of the last k-row (the delay slots are multiply-adds). ``handles``: a list
    that takes the instructions, for ops to be added to their free halves (panel_stagger)."""
    regs = registers(plan)[0]
    rows = len(acc)
    count_here = loop and row == count_row(plan)

    def setup(for_row, piece=False):
        """(emit(sig), small) of an instruction that queues reads of ``for_row`` (``piece``:
        the spread vector's, panel_spread) and multiplies."""
        if piece:
            return lambda sig: read_setup(a, plan, for_row, sig).fmul(r0, r5, vpm), False
        offset = for_row * plan.panel_vectors - plan.row_base
        if not offset:
            return lambda sig: a.mov(vr_setup, r3, sig=sig).fmul(r0, r5, vpm), False
        return lambda sig: a.add(vr_setup, r3, offset, sig=sig).fmul(r0, r5, vpm), True

    def count(sig):
        return a.sub(regs["chunks_left"], regs["chunks_left"], loop.step, sf=True, sig=sig)

    def first(sig):         # group 0's reads or the loop count, and a new gather to r1
        if row == 0:
            ins = a.add(vr_setup, r3, -plan.row_base, sig=sig)
        elif count_here:
            ins = count(sig)
        elif kind.ones:
            return a.mov(r1, 1.0)
        else:
            return a.mov(r1, r4, sig=sig)
        return ins.mov(r1, r4) if kind.half == 0 else ins   # r1: rotations read it (§5.12)

    # Each step: (emit(sig), True if it uses a small immediate, which excludes a signal).
    steps = []
    deferred = False
    if plan.a_halves:       # the copy, the request, group 0's reads and the count in 3 steps
        reads = (lambda sig: a.add(vr_setup, r3, -plan.row_base, sig=sig), True)
        first_reads, counts = reads if row == 0 else None, (count, True) if count_here else None
        steps = copy_steps(a, plan, kind, first_reads, counts)
        deferred = last_row and bool(loop) and loop_defers_step(plan)
        if loop and plan.stagger and row == lane_step_row(plan):
            test = (lambda sig: a.sub(null, regs["chunks_left"], loop.step, sf=True, sig=sig),
                    True)
            delta = (lambda sig: a.add(r2, r2, regs[LANE_DELTA], cond="nc", sig=sig), False)
            if row and row != count_row(plan) and not flip(plan, 1) and kind.request == "full":
                # the previous k-row's flags still hold (no k step flips the half bit): the
                # copy on them, the test in its free ADD slot, the move, then the request
                steps = [copy_step(a, None, HALF_LOW, "zs"), copy_step(a, test, HALF_HIGH, "zc"),
                         delta, (lambda sig: request_a(a, plan, "full", sig), False)]
            else:
                # a retiring row's lane moves on (panel_stagger) before this k-row's request,
                # on flags of the count to come (the copies' flags come between, the count
                # after)
                steps[:0] = [test, delta]
    elif row == 0 or count_here:
        steps.append((first, True))
        if count_here and plan.stagger:     # a retiring row's lane moves on (panel_stagger)
            steps.append((lambda sig: a.add(r2, r2, regs[LANE_DELTA], cond="nc", sig=sig),
                          False))
    elif kind.half == 0:
        steps.append((first, kind.ones))
    if kind.request and not plan.a_halves:
        cond = "zc" if loop and loop.quiet and row >= count_row(plan) else "always"
        steps.append((lambda sig: request_a(a, plan, kind.request, sig, cond=cond), False))
    if count_here and row == 0 and not plan.a_halves:
        steps.append((count, True))
    flags_at = len(steps) if count_here else 0
    prev = acc[-1][-1]
    for g in range(rows):
        rotate = (LANES - MAX_ROWS * kind.half - g) % LANES or None    # element g -> 0
        if acc.piece and g + 1 == rows and not last_row:
            # The piece's group (panel_spread) is short: its rotation queues the next k-row's
            # group 0, early enough for the VPM's read latency, and its first multiply-add adds
            # the product before it.
            steps.append((lambda sig, rotate=rotate: next_row_setup(a, plan, row + 1, sig)
                          .v8min(r5rep, r1, r1, rotate=rotate), True))
            last_rotation = len(steps) - 1
            steps.append((lambda sig, prev=prev:
                          a.fadd(prev, prev, r0, sig=sig).fmul(r0, r5, vpm), False))
            steps += [(lambda sig, reg=reg: a.fadd(reg, reg, r0, sig=sig).fmul(r0, r5, vpm),
                       False) for reg in acc[g][:-1]]
            prev = acc[g][-1]
            continue
        steps.append((lambda sig, prev=prev, rotate=rotate:
                      a.fadd(prev, prev, r0, sig=sig).v8min(r5rep, r1, r1, rotate=rotate), True))
        last_rotation = len(steps) - 1
        for j in range(len(acc[g])):
            if j == 0 and g + 1 < rows:     # queue the next group's reads
                steps.append(setup(row, acc.piece and g + 2 == rows))
            elif j == 0 and not last_row:   # last group: queue the next k-row's group 0
                steps.append(setup(row + 1))
            elif j == 0 and deferred:       # (flagged_copy_steps) r2's step, after its request
                steps.append((lambda sig: a.add(r2, r2, regs["a_step"], sig=sig)
                              .fmul(r0, r5, vpm), False))
            elif j == 0:
                steps.append((lambda sig: a.fmul(r0, r5, vpm, sig=sig), False))
            else:
                steps.append((lambda sig, reg=acc[g][j - 1]:
                              a.fadd(reg, reg, r0, sig=sig).fmul(r0, r5, vpm), False))
        prev = acc[g][-1]
    nop = (lambda sig: a.nop(sig=sig), False)
    # ldtmu0 pops A(k+1) after the last rotation has read r1 and on an instruction without a
    # small immediate; a one-vector panel has none, so it gets a nop for it.
    if kind.pop and all(small for _, small in steps[last_rotation + 1:]):
        steps.append(nop)
    role_flags = bool(loop) and last_row and carries_role_flags(plan)
    if plan.b_gather and last_row:      # B's rows of the next chunk, before A's pop (r4)
        at = max(i for i, (_, small) in enumerate(steps) if not small) if kind.pop else len(steps)
        if plan.b_gathers > 1 and kind.pop and at - 1 > last_rotation and not steps[at - 1][1]:
            # the multiply-add before A's pop carries the pop of B's second row
            steps[at - 1:at] = pop_steps(a, plan, steps[at - 1][0])
        else:
            steps[at:at] = pop_steps(a, plan, role_flags=role_flags)
            role_at = at + ROLE_FLAGS_STEP
    branch = loop and last_row
    if branch:
        branch_at = max(len(steps) - isa.BRANCH_DELAY_SLOTS, flags_at)
        steps.insert(branch_at, None)
        steps += [nop] * (branch_at + 1 + isa.BRANCH_DELAY_SLOTS - len(steps))
        # the role's flags for the boundary the branch goes to, set in its delay slots
        assert not role_flags or role_at >= branch_at, "the role's flags before the branch"
    # (a k-row of a one-vector panel may have no step without one: with r3 past k-row 1's
    # setup, PanelPlan.base_row, its next k-row's setup takes a small immediate too)
    pop_at = max((i for i, step in enumerate(steps) if step is not None and not step[1]),
                 default=None)
    for i, step in enumerate(steps):
        if step is None:
            a.branch(loop.label, cond=loop.cond)
        else:
            emitted = step[0]("ldtmu0" if kind.pop and i == pop_at else None)
            if handles is not None:
                handles.append(emitted)
