"""The sliding-window kernel: depthwise convolution and average pooling (plan: window_plan.py,
docs/kernels.md "Depthwise convolution and average pooling").

Registers: vc4nn/kernels/window_registers.py; the multiply-adds (which registers a tap uses,
their order, the pipeline): vc4nn/kernels/window_taps.py.

fp16 storage (docs/kernels.md "fp16 storage"): a pixel's 16-channel block is one 16-bit DMA
row of halves and one VPM row (halves 0..15), read back by 16-bit generic reads that leave lane
i = channel i in bits 15:0 of ra31, which the next-but-one instruction unpacks into r1; so the
lane-to-channel mapping, the accumulators and the weights are those of float32. Results are
packed by the op that computes them into the accumulator they come from (dead once staged) and
leave by 16-bit generic writes and 16-bit DMA stores. fp16 weights reach the lanes through r4's
unpack. Channel pairs (a lane's word holds two channels of a 32-channel tile: 32-bit DMA and
VPM access) unpack both halves of the word read, 16a for the even channels and 16b for the odd.
"""

import functools

from asm import element_number, isa, kernel, null, r0, r1, r3, r4, tmu0_s, uniform, vpm, \
    vr_addr, vr_setup, vr_wait, vw_setup, vw_wait

from . import dma
from . import chain
from .common import each_record, ops_then_branch
from .epilogue import activate
from .halves import HALF_HIGH, HALF_LOW, gathered_half
from .window_registers import BIAS, BIAS_HIGH, BUFFER_LOADS, BUFFER_ROWS, COUNT, COUNT_WRITE, \
    LOAD_BASE, ROW, SIX, STORE, STORE_BASE, VPM_ROW0, VPM_WRITE_ROW0, WEIGHTS
from .window_taps import HALF, MacPipe, accumulator, bias, multiply_chunk, weight


def gather_weights(a, dsts, row_bytes, elem_bytes, pairs=False, depth=4):
    """dsts[t] = the lanes' elements of row t of a (rows x padded channels) array whose block
    address is the next uniform; ``depth`` TMU requests in flight (facts §5.13).

    Halves: the TMU reads whole words, so lanes 2i and 2i + 1 both fetch word i and keep its
    half 16a or 16b (picked by the flags of lane parity), unpacked from r4 to float32.
    ``pairs`` (channel pairs): dsts[t] is a pair of registers, lane i fetches word i and keeps
    both halves."""
    if elem_bytes == 2 and not pairs:
        a.shr(r0, element_number, 1)
        a.shl(r0, r0, 2)
    else:
        a.shl(r0, element_number, 2 if pairs else elem_bytes.bit_length() - 1)
    a.add(r0, r0, uniform)

    def request(t):
        dma.add_constant(a, tmu0_s, r0, t * row_bytes, scratch=r1)

    for t in range(min(depth, len(dsts))):
        request(t)
    if elem_bytes == 2 and not pairs:
        a.and_(null, element_number, 1, sf=True)
    for t, dst in enumerate(dsts):
        a.nop(sig="ldtmu0")
        if pairs:
            for half, register in zip((HALF_LOW, HALF_HIGH), dst):
                a.fmax(register, r4.unpack(half), r4.unpack(half))
        elif elem_bytes == 2:
            gathered_half(a, "fmax", dst)
        else:
            a.mov(dst, r4)
        if t + depth < len(dsts):
            request(t + depth)


def tile_setup(a, plan):
    """Read the tile header (order: window_streams.tile_header) and branch to its variant."""
    a.mov(LOAD_BASE, uniform)
    a.mov(vr_setup, uniform)            # the load pitch (extended setup word)
    a.mov(STORE_BASE, uniform)
    # The last store must be out: the stride below is sticky, and the tile's first stores may
    # be skipped (ramp-up), so its buffers do not take turns with the previous tile's.
    a.read(vw_wait)
    if plan.out_layout == "hwc":        # ("chw": each store sets its own stride)
        a.mov(vw_setup, uniform)
    if plan.op == "depthwise":
        taps = plan.kernel_h * plan.kernel_w
        row_bytes = plan.padded_channels * plan.w_bytes
        if plan.channel_pairs:
            gather_weights(a, list(zip(WEIGHTS[:taps], WEIGHTS[taps:2 * taps])) + [
                (BIAS, BIAS_HIGH)], row_bytes, plan.w_bytes, pairs=True)
        else:
            gather_weights(a, [weight(plan, kh, kw) for kh in range(plan.kernel_h)
                               for kw in range(plan.kernel_w)] + [bias(plan)],
                           row_bytes, plan.w_bytes)
    a.mov(COUNT_WRITE, uniform)
    a.mov(r0, uniform)
    variants = plan.variants
    for i in range(len(variants) - 1):
        a.sub(null, r0, i, sf=True)
        ops_then_branch(a, [], f"variant{i}", cond="all_zs")
    for i in reversed(range(len(variants))):    # the last one is where the tests fall through
        a.label(f"variant{i}")
        run_variant(a, plan, i)
    a.label("tile_end")


def run_variant(a, plan, index):
    """Prologue (column scales, first load), the row loop, the drain of the last prefetch, then
    the variant's out-of-line blocks (``aside``: the zero fills of its prefetches, the shifts of
    the rows it does not store)."""
    variant = plan.variants[index]
    if plan.op == "avg_pool":
        for j in range(variant.cols):
            a.ldi(WEIGHTS[j], 1.0 / plan.cols_in_window(variant, j))
    chunks = plan.chunks(variant)
    aside = []
    name_buffers(a, plan)
    a.mov(ROW, uniform, sf=True)
    prefetch(a, plan, aside, f"first{index}", 0, chunks[0][1], 0)
    a.label(f"loop{index}")
    tail = loop_body(a, plan, index, aside)
    a.sub(COUNT_WRITE, COUNT, 1, sf=True)
    # The iteration's last steps (the buffers' swap, a rolled loop's shift) need no flags:
    # the last ones run in the delay slots of the loop's branch.
    tail += swap_buffers(a) if plan.flips_buffers(variant) else []
    ops_then_branch(a, tail, f"loop{index}", cond="all_zc")
    a.read(vr_wait)                     # the prefetch past the last row, if any
    ops_then_branch(a, [], "tile_end")
    for block in aside:
        block()


def read_setup(plan, pixels):
    """A generic read of ``pixels`` rows of the first load buffer, relative to the QPU's rows."""
    return dma.vpm_read_setup(pixels, 0, size=plan.in_access_bits,
                              stride=dma.row_stride(plan.in_access_bits))


def name_buffers(a, plan):
    """Point the buffer registers at buffer 0 (the QPU's first VPM row) and buffer 1
    (``in_chunk`` rows on, or with ``half_row_buffers`` words 8..15 of the same rows) for a
    tile's first iteration: the generic read and the DMA load setups of a whole chunk."""
    for buffer in (0, 1):
        y, word = plan.load_buffer_place(buffer)
        a.ldi(r0, read_setup(plan, plan.in_chunk)
              + dma.generic_offset(y, word, plan.in_access_bits))
        a.add(BUFFER_ROWS[buffer], VPM_ROW0, r0)
        a.ldi(r3, dma.load_setup_delta(plan.in_chunk, y, plan.in_access_bits, word))
        a.add(BUFFER_LOADS[buffer], LOAD_BASE, r3)


def swap_buffers(a):
    """The six one-instruction steps that swap the two buffers' registers through r0 and r3
    (free between iterations), in order."""
    return [lambda: a.mov(r0, BUFFER_ROWS[0]), lambda: a.mov(r3, BUFFER_LOADS[0]),
            lambda: a.mov(BUFFER_ROWS[0], BUFFER_ROWS[1]),
            lambda: a.mov(BUFFER_LOADS[0], BUFFER_LOADS[1]),
            lambda: a.mov(BUFFER_ROWS[1], r0), lambda: a.mov(BUFFER_LOADS[1], r3)]


def prefetch(a, plan, aside, name, buffer, pixels, offset, read_pixels=0, read_buffer=0):
    """Set up the generic read of this chunk (``read_pixels`` rows of buffer ``read_buffer``),
    and start the load of the next chunk (``pixels`` at ``offset`` bytes from the row address,
    into buffer ``buffer``) unless the flags say its row address is 0: then the chunk is
    filled with zeros out of line (``aside``), costing the bus nothing. Address 0 is a padding
    row, or a row past the last one the tile needs (it only feeds outputs the tile does not
    store). The branch's delay slots hold the read setup and as much of the load's as fits
    (a load setup is only used once vr_addr is written)."""
    steps = []
    if read_pixels:
        steps += dma.add_constant_steps(a, vr_setup, BUFFER_ROWS[read_buffer],
                                        read_setup(plan, read_pixels)
                                        - read_setup(plan, plan.in_chunk))
    steps += dma.add_constant_steps(a, vr_setup, BUFFER_LOADS[buffer],
                                    dma.load_setup_delta(pixels, 0, plan.in_access_bits)
                                    - dma.load_setup_delta(plan.in_chunk, 0,
                                                           plan.in_access_bits))
    start = dma.add_constant_steps(a, vr_addr, ROW, offset)   # starts the load: after the slots
    steps += start[:-1]
    slots = isa.BRANCH_DELAY_SLOTS
    a.branch(f"zero_{name}", cond="all_zs")
    for step in steps[:slots]:
        step()
    for _ in range(slots - len(steps)):
        a.nop()
    for step in steps[slots:] + start[-1:]:
        step()
    a.label(f"back_{name}")
    aside.append(lambda: zero_fill(a, plan, name, buffer, pixels))


def zero_fill(a, plan, name, buffer, pixels):
    """The zero fill of one prefetch: generic writes of zero vectors into its buffer (the
    buffer's read setup, made a write setup of the input's element size), then back (the last
    writes in the branch's delay slots)."""
    a.label(f"zero_{name}")
    write = dma.vpm_write_setup(0, size=plan.in_access_bits,
                                stride=dma.row_stride(plan.in_access_bits))
    dma.add_constant(a, vw_setup, BUFFER_ROWS[buffer], write - read_setup(plan, plan.in_chunk))
    ops_then_branch(a, [lambda: a.mov(vpm, 0)] * pixels, f"back_{name}")


def loop_body(a, plan, index, aside):
    """One iteration of variant ``index``'s row loop; returns the steps (one instruction each)
    left for its end."""
    variant = plan.variants[index]
    chunks = plan.chunks(variant)
    rows = plan.body_rows(variant)
    steps = [(r, k) for r in range(rows) for k in range(len(chunks))]
    pipe = MacPipe(a, halves=plan.in_storage == "fp16")
    stores = shifts = 0
    tail = []
    flags_of_row = False                # the flags are the previous step's test of ROW
    cols_bytes = plan.channels * plan.in_bytes
    for step, (r, k) in enumerate(steps):
        first_col, pixels = chunks[k]
        next_col, next_pixels = chunks[steps[(step + 1) % len(steps)][1]]
        pipe.flush()
        a.read(vr_wait)
        if k == len(chunks) - 1:        # the next chunk starts the next row
            a.mov(ROW, uniform, sf=True)
        elif not flags_of_row:          # (the flags of ROW hold until a store sets others)
            a.mov(null, ROW, sf=True)
        flags_of_row = True
        prefetch(a, plan, aside, f"{index}_{step}", (step + 1) % 2, next_pixels,
                 (next_col - variant.lo) * cols_bytes, pixels, step % 2)
        multiply_chunk(pipe, plan, variant, r, range(first_col, first_col + pixels), shifts)
        if k == len(chunks) - 1:
            out_row = plan.finished(r)
            if out_row is not None:
                pipe.flush()            # (the store reads no accumulator for 3 instructions)
                acc_set = plan.acc_set(out_row, shifts)
                paired = pairs_first_shift(plan, variant, acc_set)
                stores = store_row(a, plan, variant, acc_set, stores, paired, aside)
                flags_of_row = False
                if plan.rolled:
                    moves = shift_sets(a, plan, variant, first=1 if paired else 0)
                    if step < len(steps) - 1:
                        for move in moves:
                            move()
                    else:
                        tail = moves        # the iteration's last steps
                    shifts += 1
    pipe.flush()
    return tail


def shift_sets(a, plan, variant, first=0):
    """Rolled loops: after set 0's row is stored, every set moves down one (set i + 1 into
    set i, from set ``first`` on; one-instruction steps); the top set's next tap starts from
    the bias."""
    return [lambda dst=accumulator(plan, variant, odd, s, j),
            src=accumulator(plan, variant, odd, s + 1, j): a.mov(dst, src)
            for odd in range(plan.lane_channels)
            for s in range(first, plan.acc_sets - 1) for j in range(variant.cols)]


def pairs_first_shift(plan, variant, acc_set):
    """{set 0 register: set 1 register} when a rolled loop's first shift (set 1 into set 0) can
    ride in the stored row's relu6 (the fmin writing the VPM reads r0 and rb24, so the MUL ALU
    can move within regfile A in the same instruction), else None."""
    if not (plan.rolled and plan.acc_sets > 1 and plan.op == "depthwise"
            and plan.activation == "relu6" and plan.out_bits == 32):
        return None
    assert acc_set == 0
    return {accumulator(plan, variant, 0, 0, j): accumulator(plan, variant, 0, 1, j)
            for j in range(variant.cols)}


def store_row(a, plan, variant, acc_set, stores, paired=None, aside=None):
    """Finish one output row (scale or bias+activation), stage it and store it in chunks.
    Returns the count of stores emitted so far (it picks the staging buffer). ``paired``: moves
    (dst: src) that ride in the staging; a row not stored makes them out of line (``aside``)."""
    size = plan.out_access_bits
    horizontal = plan.out_layout == "hwc"
    if plan.op == "avg_pool":
        a.mov(r1, uniform)              # 1 / valid rows of this output row's windows
    a.mov(STORE, uniform, sf=True)      # 0: an output row the tile does not own
    unstored = f"unstored{len(a)}"      # (unique: the instruction's index)
    with a.scope("store"):
        if paired:
            a.branch(unstored, cond="all_zs")
            aside.append(lambda: moves_aside(a, unstored, paired))
        else:
            a.branch("skip", cond="all_zs")
        for index, (first, pixels) in enumerate(plan.store_chunks(variant)):
            y = plan.load_rows(plan.in_chunk) + plan.stage_rows(plan.out_chunk) * (stores %
                                                                      plan.store_buffers)
            # The first chunk's wait and write setup fill the branch's delay slots: on a
            # skipped row they only wait for the last store and set a setup nothing uses.
            start = len(a)
            if plan.store_buffers == 1:
                a.read(vw_wait)         # the one staging buffer: its last store must be out
            dma.write_rows(a, VPM_WRITE_ROW0, y, plan.stage_bits)
            for _ in range(isa.BRANCH_DELAY_SLOTS - (len(a) - start) if index == 0 else 0):
                a.nop()
            stage_pixels(a, plan, staged_words(plan, variant, acc_set, first, pixels), paired)
            if plan.store_buffers == 2:
                a.read(vw_wait)
            if not horizontal:
                a.ldi(vw_setup, plan.store_stride(pixels))
            dma.start_store(a, STORE_BASE, pixels, y, size, STORE,
                            first * plan.out_pixel_bytes(), horizontal)
            stores += 1
        a.label("skip")
    if paired:
        a.label(f"{unstored}_back")
    return stores


def moves_aside(a, name, moves):
    """The moves ({dst: src}) of a row not stored, out of line, then back."""
    a.label(name)
    ops_then_branch(a, [lambda dst=dst, src=src: a.mov(dst, src) for dst, src in moves.items()],
                    f"{name}_back")


def staged_words(plan, variant, acc_set, first, pixels):
    """The VPM words (lists of (accumulator, column)) that stage columns ``first``.. of set
    ``acc_set``: a pixel each; fp16 "chw": a pixel pair (16a, 16b); channel pairs: a pixel's
    even and odd channels (16a, 16b)."""
    cols = range(first, first + pixels)
    if plan.channel_pairs:
        return [[(accumulator(plan, variant, odd, acc_set, j), j) for odd in (0, 1)]
                for j in cols]
    values = [(accumulator(plan, variant, 0, acc_set, j), j) for j in cols]
    step = plan.pixels_per_stage_row
    return [values[i:i + step] for i in range(0, len(values), step)]


def stage_pixels(a, plan, words, paired=None):
    """Finish the outputs of ``words`` (``staged_words``) into the staging rows that generic
    writes were set up for. fp16: each result is packed by the op that computes it into its
    own accumulator, or the word's first (dead once staged), and the word written once it is
    complete and readable. ``paired``: {acc: register} moves (a v8min, the MUL ALU's mov) that
    ride in the relu6's fmin."""
    packed = None           # fp16: the word not yet written
    for word in words:
        for index, (acc, col) in enumerate(word):
            dst, pack = vpm, None
            if plan.out_bits == 16:
                dst, pack = word[0][0], HALF_HIGH if index else HALF
            if plan.op == "avg_pool":
                a.fmul(r0, acc, r1)
                a.fmul(dst, r0, WEIGHTS[col], pack=pack)
            elif plan.channel_pairs and index:      # the odd channels: their bias first
                a.fadd(r0, acc, BIAS_HIGH)
                activate(a, dst, r0, plan.activation, SIX, pack=pack)
            elif paired:                    # relu6 with a shift move on the MUL ALU
                a.fmax(r0, acc, 0)
                a.fmin(dst, r0, SIX).v8min(acc, paired[acc], paired[acc])
            else:
                activate(a, dst, acc, plan.activation, SIX, pack=pack)
            if packed is not None:
                a.mov(vpm, packed)
                packed = None
        if plan.out_bits == 16:
            packed = word[0][0]
    if packed is not None:
        a.nop()             # the last pack is not readable yet
        a.mov(vpm, packed)


@kernel
def window_kernel(a, plan):
    """Every QPU runs the tiles its uniform stream lists (first uniform: its VPM rows)."""
    a.mov(VPM_ROW0, uniform)
    a.mov(VPM_WRITE_ROW0, uniform)
    if plan.activation == "relu6":
        a.ldi(SIX, 6.0)
    each_record(a, lambda: tile_setup(a, plan))
    a.read(vw_wait)
    chain.end(a)


@functools.lru_cache(maxsize=64)
def program_for(plan):
    """The assembled program of a (checked) plan; one per distinct plan."""
    return window_kernel.assemble(plan)
