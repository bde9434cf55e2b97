"""A streaming kernel for the float16 tests: rows of 16 words from memory, through a per-row
body, to rows of 16 words in memory, on one QPU.

The kernel loops over chunks of ``chunk`` rows. A chunk is DMA-loaded into VPM rows 0.. (unless
the body fetches its own input, ``load=False``), a generic read of ``chunk`` vectors and a
generic write from VPM row ``chunk`` on are set up, ``body(a, i)`` runs for each row i of the
chunk (it reads its row with ``a.mov(reg, vpm)`` and writes its output rows to ``vpm``), and the
``chunk * out_per_row`` output rows are DMA-stored. Registers the body must leave alone:
IN_ADDRESS, OUT_ADDRESS, CHUNKS_LEFT, IN_STEP, OUT_STEP.
"""

import numpy as np

from asm import kernel, ra27, ra28, ra29, rb28, rb29, uniform
from vc4nn.emulator import EmulatorDevice

ROW_BYTES = 64
IN_ADDRESS, OUT_ADDRESS, CHUNKS_LEFT = ra27, ra28, ra29
IN_STEP, OUT_STEP = rb28, rb29


@kernel
def stream(a, body, chunk, out_per_row, chunks, load=True):
    a.mov(IN_ADDRESS, uniform)
    a.mov(OUT_ADDRESS, uniform)
    a.ldi(CHUNKS_LEFT, chunks)
    a.ldi(IN_STEP, chunk * ROW_BYTES)
    a.ldi(OUT_STEP, chunk * out_per_row * ROW_BYTES)
    a.label("chunk")
    if load:
        a.setup_dma_load(rows=chunk, rowlen=16, y=0)
        a.start_dma_load(IN_ADDRESS)
        a.wait_dma_load()
        a.setup_vpm_read(num=chunk, y=0)
    a.setup_vpm_write(y=chunk)
    for i in range(chunk):
        body(a, i)
    a.setup_dma_store(units=chunk * out_per_row, depth=16, y=chunk)
    a.start_dma_store(OUT_ADDRESS)
    a.wait_dma_store()
    a.add(IN_ADDRESS, IN_ADDRESS, IN_STEP)
    a.add(OUT_ADDRESS, OUT_ADDRESS, OUT_STEP)
    a.sub(CHUNKS_LEFT, CHUNKS_LEFT, 1, sf=True)
    a.branch("chunk", cond="any_zc")
    a.nop()
    a.nop()
    a.nop()
    a.exit()


def run_stream(body, inputs, out_per_row, chunk=8, load=True):
    """Run ``body`` over ``inputs`` (rows of 16 uint32 words, a multiple of ``chunk`` rows);
    returns the output rows as (len(inputs), out_per_row, 16) uint32 and the RunResult."""
    inputs = np.ascontiguousarray(inputs, dtype=np.uint32).reshape(-1, 16)
    rows = len(inputs)
    assert rows % chunk == 0 and chunk * (1 + out_per_row) <= 64
    program = stream.assemble(body=body, chunk=chunk, out_per_row=out_per_row,
                              chunks=rows // chunk, load=load)
    with EmulatorDevice() as gpu:
        source = gpu.array(inputs)
        out = gpu.alloc((rows, out_per_row, 16), np.uint32)
        result = gpu.execute(program, 1, [[source.address, out.address]])
        return np.array(out), result


def halves_as_floats(halves):
    """float32 bits of half bits, by numpy (the IEEE reference)."""
    return np.asarray(halves, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)


def floats_as_halves(bits):
    """Half bits of float32 bits, by numpy (IEEE, round to nearest even)."""
    return np.asarray(bits, dtype=np.uint32).view(np.float32).astype(np.float16).view(np.uint16)
