"""The pointwise panel kernel's code per panel against the QPUs' instruction cache (4 KB per
slice, docs/cycle-model.md): the store as one loop over the rows (panel_store.store, a
conveyor of moves), the chunk after the chunk loop running the loop's body
(panel_kloop.shared_chunk, "plain" and "quiet"), each against a float64 reference; and the
loops' sizes, found from the decoded branches, not from the kernel's own layout."""

import numpy as np
import pytest

from asm import isa
from asm.encoding import branch_target, decode
from vc4nn.kernels import pointwise as kernel
from vc4nn.kernels import sgemm_panel
from vc4nn.kernels.panel_kloop import shared_chunk
from vc4nn.nn import pointwise

from .reference import assert_close, assert_close_fp16, dense
from .test_fp16_pointwise import normal_halves

ICACHE_BYTES = 4096

# h, w, cin, cout, layout, activation, bias, residual, tiling, storage ("fp16": x, y and the
# residual; "fp16 weights": all four), the shared chunk expected. Chunks of 3 k-rows, A asked
# 2 gathers ahead (gathered weights): at K = 128 the chunk before the short last one asks for
# gathers within A ("plain"); at K = 256 and K = 34 its last k would ask past A's end
# ("quiet"), the latter with parked rows, whose store slots the shared chunk's run of the body
# takes too; a residual and an edge panel (partial vectors) through the store loop, with the
# weights DMA'd (an edge panel is not gathered) and so 3 gathers ahead: "quiet" at K = 128;
# fp16 x, which copies its gathers with flags of its own, shares only "plain": at K = 256 it
# asks one gather ahead for that (panel_kloop.gathers_ahead).
CASES = [
    (6, 6, 128, 128, "chw", "relu6", True, False, {"panel_vectors": 8}, "fp32", "plain"),
    (5, 7, 256, 128, "chw", "relu", True, False, {"panel_vectors": 8, "pair_gathers": False},
     "fp32", "quiet"),
    (14, 14, 34, 64, "chw", "relu6", True, False, {"panel_vectors": 4}, "fp32", "quiet"),
    (3, 5, 128, 160, "hwc", None, False, True, {"panel_vectors": 8, "transpose_input": True},
     "fp32", "quiet"),
    (4, 5, 128, 128, "chw", "relu6", True, True, {"panel_vectors": 8}, "fp16 weights", "plain"),
    (4, 5, 256, 128, "chw", "relu6", True, True, {"panel_vectors": 8}, "fp16", "plain"),
]


@pytest.mark.parametrize("h, w, cin, cout, layout, activation, bias, residual, tiling, "
                         "storage, shared", CASES, ids=str)
def test_shared_chunk_and_store_loop(device, h, w, cin, cout, layout, activation, bias,
                                     residual, tiling, storage, shared):
    halves = storage.startswith("fp16")
    dtype = np.float16 if halves else np.float32
    w_storage = "fp16" if storage == "fp16 weights" else "fp32"
    rng = np.random.default_rng(h * w * cin + cout)
    x = rng.standard_normal((h, w, cin)).astype(dtype)
    wt = normal_halves(rng, (cin, cout)) if w_storage == "fp16" else \
        rng.standard_normal((cin, cout)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    r = rng.standard_normal((h, w, cout)).astype(dtype) if residual else None
    x_storage = "fp16" if halves else "fp32"
    plan = kernel.PointwisePlan(h, w, cin, cout, 12, bias, residual, activation, x_storage,
                                x_storage, x_storage, w_storage, input_layout=layout, **tiling)
    assert shared_chunk(plan.panel) == shared
    if (h, w, cin) == (14, 14, 34):
        assert plan.parks
    xin = np.ascontiguousarray(x.transpose(2, 0, 1)) if layout == "chw" else x
    y = pointwise(xin, wt, b, activation, r, device=device, num_qpus=12, tiling=tiling,
                  x_layout=layout, dtype=dtype)
    check = assert_close_fp16 if halves else assert_close
    check(y, *dense(x, wt, b, r, activation), cin)


def loop_bytes(program, suffix):
    """[(label, bytes of the loop, bytes it runs)] of every loop whose label ends with
    ``suffix``: from the label to its backward branch's last delay slot, and with the code
    outside it that its branches reach (the master's and relays' barrier code, to the next
    label)."""
    words = [decode(int(w)) for w in program.words]
    starts = sorted(set(program.labels.values()) | {8 * len(words)})
    out = []
    for name, start in program.labels.items():
        backs = [8 * i for i, ins in enumerate(words)
                 if ins.sig == isa.SIG_BRANCH and branch_target(ins, 8 * i) == start]
        if not name.endswith(suffix) or not backs:
            continue
        end = max(backs) + 8 * (1 + isa.BRANCH_DELAY_SLOTS)
        called = {branch_target(ins, 8 * i)
                  for i, ins in enumerate(words[start // 8:end // 8], start // 8)
                  if ins.sig == isa.SIG_BRANCH}
        outside = [t for t in called if not start <= t < end]
        out.append((name, end - start,
                    end - start + sum(min(a for a in starts if a > t) - t for t in outside)))
    return out


def test_paired_chunk_loops_fit_the_instruction_cache():
    """The first slice runs the master and the relays: every chunk loop with the barrier code
    its boundaries branch to must fit in its cache, the paired loops' two-chunk bodies too (6
    pixels of 8 vectors per QPU: 2.9 KB of loop)."""
    for shape in [(56, 56, 128, 128), (7, 7, 512, 1024), (14, 14, 512, 512),
                  (112, 112, 32, 64)]:         # (4-vector panels with parked rows' stores)
        plan = kernel.PointwisePlan(*shape, 12, True, False, "relu6", input_layout="chw",
                                    pair_gathers=True)
        loops = loop_bytes(sgemm_panel.program_for(plan.panel), "/chunk")
        assert loops
        for name, size, hot in loops:
            assert 1000 < size and hot <= ICACHE_BYTES, (shape, name, size, hot)


def test_panels_fit_the_instruction_cache():
    """A whole panel (its bias start, chunk loop, shared and last chunks, store loop and the
    barrier code) of the default plans of v1's pw1, pw2, pw5, pw6 and pw12 fits a slice's
    cache, so a pass fetches no line again; unrolled stores and last chunks made it 1,000-2,500
    instructions (pw3, pw4, pw7-pw11: 4,096-4,104 bytes with the barrier code; pw13, paired:
    4.6 KB)."""
    for shape in [(112, 112, 32, 64), (56, 56, 64, 128), (28, 28, 256, 256),
                  (14, 14, 256, 512), (7, 7, 512, 1024)]:
        plan = kernel.PointwisePlan(*shape, 12, True, False, "relu6", input_layout="chw")
        program = sgemm_panel.program_for(plan.panel)
        loops = [loop for suffix in ("pass", "/panel") for loop in loop_bytes(program, suffix)]
        for name, size, hot in loops:
            assert hot <= ICACHE_BYTES, (shape, name, size, hot)


def test_parked_rows_store_slots_and_conveyor():
    """pw1's default (7 rows, 5 of them parked: 20 vectors, 2 store slots per chunk): the
    chunk loop of a pass that stores parked rows is 21 instructions longer than the first
    pass's, which stores none: 2 slots of 4 (the VDW setup written once per pass, not per
    slot) and the conveyor's 18 moves in 13 instructions (the park registers alternate the
    register files: 5 moves pair; its 6 regfile-A registers against 14 regfile-B ones leave
    the rest alone). A move per instruction and a VDW setup per slot made it 28."""
    plan = kernel.PointwisePlan(112, 112, 32, 64, 12, True, False, "relu6",
                                input_layout="chw").panel
    assert (plan.rows, plan.park_rows) == (7, 5)
    sizes = {name.split("/")[0].rstrip("0123456789"): size
             for name, size, _ in loop_bytes(sgemm_panel.program_for(plan), "/chunk")}
    assert (sizes["passes"] - sizes["first_pass"]) // 8 == 2 * 4 + 13


def test_fp16_chunk_loop_instructions():
    """fp16 14x14x512->512 (v1's pw7-pw11, the default plan): the chunk loop is 3 k-rows of 54
    instructions (6 pixels' broadcasts and their 8 multiply-adds), the copies of A's halves
    (3 in the chunk's first k-row, 2 in the others, which keep its flags:
    panel_kloop.reuses_flags), B's pop, write setup and two writes, the loop's branch and a
    leaf's boundary (its branch to the master's and relays' code, whose role flags the loop's
    branch set in its delay slots, 3 delay slots of the next buffer, B's request and ARRIVED,
    then GO: panel_barrier.gathered_boundary); the master's and relays' code 9 more (their
    branch, its 3 delay slots of ARRIVED, a relay's DONE and branch back with RELAY and 2 GO
    in its slots). It was 3 x 54 + 9 + 4 + 1 + 10 = 186, the master's and relays' code 19."""
    plan = kernel.PointwisePlan(14, 14, 512, 512, 12, True, False, "relu6", "fp16", "fp16",
                                "fp32", "fp16", input_layout="chw").panel
    assert (plan.rows, plan.panel_vectors, plan.chunk_rows, plan.gather_k) == (6, 8, 3, 1)
    loops = {name.split("/")[0].rstrip("0123456789"): (size // 8, hot // 8)
             for name, size, hot in loop_bytes(sgemm_panel.program_for(plan), "/chunk")}
    assert loops["passes"] == (3 * 54 + (3 + 2 + 2) + 4 + 1 + 5, 3 * 54 + 7 + 4 + 1 + 5 + 9)
