"""vc4nn.sgemm against a float64 numpy reference, in the emulator with its dynamic checks on.

Tolerance: every C element is a sum of K products formed and added in float32 (and fadd is
reported to round toward zero, facts §1, so each operation may be off by a full ulp, 2**-23
relative). The classic bound for a sequential sum of K terms is then
|error| <= (K + 2) * 2**-23 * (|alpha| * (|op(A)| @ |op(B)|) + |beta| * |C|), elementwise;
the last +1 covers the alpha and beta multiplies. That bound fails a wrong kernel (an element
missed or counted twice is off by one product, far above it) and never a right one.
"""

import numpy as np
import pytest

import vc4nn
from vc4nn.errors import Vc4nnError
from vc4nn.linalg import DtypeError, ForeignBufferError, ShapeError

ULP = 2.0 ** -23


def operands(rng, m, n, k, trans_a, trans_b, with_c=True):
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32) if with_c else None
    return a, b, c


def check(result, a, b, c, alpha, beta, trans_a, trans_b):
    op_a = np.asarray(a, np.float64).T if trans_a else np.asarray(a, np.float64)
    op_b = np.asarray(b, np.float64).T if trans_b else np.asarray(b, np.float64)
    expected = alpha * (op_a @ op_b)
    magnitude = abs(alpha) * (np.abs(op_a) @ np.abs(op_b))
    if beta != 0:
        expected += beta * np.asarray(c, np.float64)
        magnitude += abs(beta) * np.abs(np.asarray(c, np.float64))
    k = op_a.shape[1]
    bound = (k + 3) * ULP * magnitude + 1e-30
    assert result.shape == expected.shape and result.dtype == np.float32
    err = np.abs(np.asarray(result, np.float64) - expected)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), (f"C{worst} = {result[worst]}, expected {expected[worst]} "
                                  f"(error {err[worst]:.3g} > bound {bound[worst]:.3g})")


def run_case(device, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, num_qpus=12, seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = operands(rng, m, n, k, trans_a, trans_b, with_c=beta != 0)
    original_c = None if c is None else c.copy()
    out, run = vc4nn.sgemm(a, b, c, alpha, beta, trans_a, trans_b, device=device, num_qpus=num_qpus,
                           return_run=True)
    check(out, a, b, original_c, alpha, beta, trans_a, trans_b)
    return run


CASES = ["nn", "tn", "nt", "tt"]


def transposes(case):
    return case[0] == "t", case[1] == "t"


# -- shapes: edges in every direction, on several QPU counts -----------------------------------
@pytest.mark.parametrize("m,n,k,num_qpus", [
    (1, 1, 1, 1),
    (1, 1, 1, 12),          # eleven QPUs get no tile at all
    (7, 13, 5, 2),
    (17, 31, 19, 5),
    (16, 48, 2, 1),         # exactly one full tile (16 x 48)
    (33, 100, 3, 12),       # partial lanes and a narrow edge tile (100 = 2 x 48 + 4)
    (200, 3, 7, 5),         # tall-thin
    (3, 200, 9, 2),         # short-wide
    (5, 7, 41, 3),          # long k
])
@pytest.mark.parametrize("case", CASES)
def test_shapes(device, m, n, k, num_qpus, case):
    run_case(device, m, n, k, *transposes(case), num_qpus=num_qpus, seed=m * 31 + n * 7 + k)


# -- the panel kernel (NN, TN): every path of vc4nn/kernels/sgemm_panel.py ---------------------
# M: rows per QPU R = 8 or fewer, a partial last block, passes with QPUs that only help;
# N: full panels (96), the shifted edge window (N > 96), narrow panels (N < 96, with and
# without a partial vector, one vector), every other panel (also across passes) running k
# backwards; K: one chunk, several, a partial last chunk, and the ends of the A requests
# (gathers of two k asked 2 gathers ahead with 2 or 4 QPUs, single k asked 3 ahead with 1 or 3:
# K = 1, 3, 5 end on a one-k gather asked at the panel start or in a k step; the last k of a
# panel, generated without requests, fall in one chunk or over two (K = 6, 9, 13, 17) or more
# (K = 4 on one QPU)); QPUs 1-12 (the chunk has min(4, QPUs) k-rows, each loaded by one QPU:
# QPUs 1..4, or every QPU, master included, when there are 4 or fewer).
PANEL_SHAPES = [
    (8, 96, 4, 1),          # one block, one full panel, chunks of one k-row
    (96, 192, 9, 12),       # 12 blocks of 8 rows, 2 full panels, partial last chunk
    (50, 300, 13, 12),      # R = 5, 10 QPUs take part, edge window shifted (300 = 3 x 96 + 12)
    (100, 100, 6, 12),      # partial last block, edge vector of 4 columns
    (203, 40, 11, 3),       # several passes; the last has QPUs that only help; narrow N (40)
    (9, 16, 8, 2),          # narrow panel of one full vector
    (13, 5, 5, 4),          # narrow panel of one partial vector
    (24, 97, 17, 7),        # edge window with a 1-column partial vector
    (40, 200, 1, 12),       # one k: a single one-k gather, asked at the panel start
    (40, 200, 3, 12),       # two gathers, the second of one k
    (40, 300, 5, 12),       # the one-k gather asked in a k step; 4 panels, 2 backwards
    (20, 250, 7, 2),        # chunks of 2 k-rows: one gather each, the loop count on its own
    (33, 300, 21, 4),       # chunks of 4 loaded by all 4 QPUs, master included
]


@pytest.mark.parametrize("m,n,k,num_qpus", PANEL_SHAPES)
@pytest.mark.parametrize("case", ["nn", "tn"])
def test_panel_shapes(device, m, n, k, num_qpus, case):
    run_case(device, m, n, k, *transposes(case), num_qpus=num_qpus, seed=m + n + k)


@pytest.mark.parametrize("m,n,k,num_qpus", [(100, 100, 6, 12), (203, 40, 11, 3), (13, 5, 5, 4),
                                            (50, 300, 13, 12), (40, 100, 256, 12)])
@pytest.mark.parametrize("case", ["nn", "tn"])
def test_panel_alpha_beta(device, m, n, k, num_qpus, case):
    """beta gathers C with clamped lanes on partial vectors (shifted and narrow). 40x100x256
    on 10 QPUs (short chunks: 4 rows per QPU) caught a relay taking another's RELAY token."""
    run_case(device, m, n, k, *transposes(case), alpha=-1.5, beta=0.75, num_qpus=num_qpus)


@pytest.mark.parametrize("num_qpus", range(1, 13))
@pytest.mark.parametrize("m", [1, 20, 40, 96, 203])
def test_panel_barrier_tokens_balance(m, num_qpus):
    """Every barrier must consume one arrival per QPU other than the master and hand out one
    "go" per leaf (a QPU that is neither the master nor a relay): counted here from the roles,
    not from the kernel's own split."""
    from vc4nn.kernels import sgemm_panel as panel
    for b_gather in (False, True):
        try:
            plan = panel.PanelPlan(m, 192, 9, False, num_qpus, True, True, b_gather=b_gather)
        except ValueError:          # gathered B needs the chunk's rows to split over the QPUs
            assert b_gather
            continue
        relays = [q for q in range(1, plan.qpus) if plan.loader_slot(q) is not None]
        leaves = plan.qpus - 1 - len(relays)
        (relay_arrived, relay_go), (own_arrived, own_go) = (panel.relay_counts(plan),
                                                            panel.master_counts(plan))
        assert min(relay_arrived, relay_go, own_arrived, own_go) >= 0
        # gathered B: only the leaves release ARRIVED (a relay's DONE is its arrival), or,
        # with one gather of B per chunk, every QPU (the master too)
        arrivals = plan.qpus - 1
        if b_gather and relays:
            arrivals = plan.qpus if plan.b_gathers == 1 else leaves
        assert own_arrived + relay_arrived * len(relays) == arrivals
        assert own_go + relay_go * len(relays) == leaves


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_panel_barrier_under_jitter(device_name, seed):
    """The scheduler's jitter reorders the QPUs; the race checks then catch a barrier that lets
    a QPU read a chunk whose DMA load has not been waited for (a relay that released its
    leaves' "go" late did exactly that on this shape: 10 QPUs, 4 relays, 5 leaves)."""
    if device_name != "emulator":
        pytest.skip("the scheduler's jitter exists in the emulator only")
    with vc4nn.open_device("emulator", seed=seed) as jittered:
        run_case(jittered, 40, 200, 64, alpha=0.5, beta=0.25, num_qpus=12, seed=seed)


def test_panel_scale_only(device):
    run_case(device, 37, 130, 10, alpha=0.5, num_qpus=5)


def test_panel_tn_large_m_stride(device):
    """TN with M*4 beyond the small immediates: A's k step lives in a register."""
    run_case(device, 40, 100, 7, trans_a=True, alpha=2.0, beta=-1.0, num_qpus=6)


@pytest.mark.parametrize("alpha,beta", [(2.5, 0.0), (1.0, 1.0), (-0.75, 0.5), (0.0, -2.0)])
@pytest.mark.parametrize("case", CASES)
def test_alpha_beta(device, alpha, beta, case):
    run_case(device, 21, 70, 6, *transposes(case), alpha=alpha, beta=beta, num_qpus=4)


def test_beta_zero_never_reads_c(device):
    """BLAS semantics: with beta == 0, NaNs already in C do not reach the result."""
    rng = np.random.default_rng(1)
    a, b, _ = operands(rng, 9, 20, 4, False, False, with_c=False)
    c = np.full((9, 20), np.nan, dtype=np.float32)
    out = vc4nn.sgemm(a, b, c, device=device, num_qpus=2)
    assert out is c
    check(out, a, b, None, 1.0, 0.0, False, False)


def test_device_buffers_stay_on_device(device):
    rng = np.random.default_rng(2)
    a, b, c = operands(rng, 18, 40, 11, False, True)
    da, db, dc = device.array(a), device.array(b), device.array(c)
    out = vc4nn.sgemm(da, db, dc, alpha=0.5, beta=2.0, trans_b=True, num_qpus=3)
    assert out is dc
    check(np.asarray(dc), a, b, c, 0.5, 2.0, False, True)
    fresh = vc4nn.sgemm(da, db, trans_b=True, num_qpus=3)
    assert device.owns(fresh)
    check(np.asarray(fresh), a, b, None, 1.0, 0.0, False, True)


def test_numpy_in_numpy_out(device):
    rng = np.random.default_rng(3)
    a, b, _ = operands(rng, 6, 5, 4, True, False, with_c=False)
    out = vc4nn.sgemm(a, b, trans_a=True, device=device, num_qpus=1)
    assert type(out) is np.ndarray
    check(out, a, b, None, 1.0, 0.0, True, False)


def test_cycle_model_reports_every_qpu(device_name, device):
    if device_name != "emulator":
        pytest.skip("cycle-model figures exist in the emulator only")
    run = run_case(device, 32, 96, 8, num_qpus=4)
    assert run.num_qpus == 4 and len(run.qpus) == 4
    assert run.cycles and all(q.instructions > 0 for q in run.qpus)


# -- errors -----------------------------------------------------------------------------------
def test_inner_dimensions_must_agree(device):
    with pytest.raises(ShapeError, match="inner dimensions"):
        vc4nn.sgemm(np.zeros((3, 4), np.float32), np.zeros((5, 6), np.float32), device=device)
    with pytest.raises(ShapeError, match="inner dimensions"):
        vc4nn.sgemm(np.zeros((3, 4), np.float32), np.zeros((4, 6), np.float32), trans_a=True,
                    device=device)


def test_c_shape_must_match(device):
    with pytest.raises(ShapeError, match="C is 3x5"):
        vc4nn.sgemm(np.zeros((3, 4), np.float32), np.zeros((4, 6), np.float32),
                    np.zeros((3, 5), np.float32), device=device)


@pytest.mark.parametrize("bad", [np.zeros((0, 4), np.float32), np.zeros(4, np.float32),
                                 np.zeros((8, 4), np.float32)[::2]])
def test_bad_matrices(device, bad):
    with pytest.raises(ShapeError):
        vc4nn.sgemm(bad, np.zeros((4, 2), np.float32), device=device)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
def test_only_float32(device, dtype):
    with pytest.raises(DtypeError, match="float32"):
        vc4nn.sgemm(np.zeros((2, 2), dtype), np.zeros((2, 2), np.float32), device=device)
    with pytest.raises(DtypeError, match="float32"):
        vc4nn.sgemm(np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32),
                    np.zeros((2, 2), dtype), beta=1.0, device=device)


def test_not_an_array(device):
    with pytest.raises(DtypeError):
        vc4nn.sgemm([[1.0]], np.zeros((1, 1), np.float32), device=device)


def test_buffer_of_another_device(device):
    with vc4nn.open_device("emulator") as other:
        foreign = other.array(np.ones((2, 2), np.float32))
        with pytest.raises(ForeignBufferError, match="another|not of the device"):
            vc4nn.sgemm(np.ones((2, 2), np.float32), foreign, device=device)


@pytest.mark.parametrize("kwargs", [dict(num_qpus=0), dict(num_qpus=13), dict(alpha=np.inf),
                                    dict(beta=1.0)])
def test_bad_arguments(device, kwargs):
    with pytest.raises(Vc4nnError):
        vc4nn.sgemm(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), device=device, **kwargs)


# -- the shapes the issue names ---------------------------------------------------------------
def test_representative_big(device):
    """A mid-size NN product with full and edge tiles on 12 QPUs (fast enough for every run)."""
    run_case(device, 40, 200, 64, alpha=0.5, beta=0.25, num_qpus=12)


@pytest.mark.slow
@pytest.mark.parametrize("m,n,k,case", [
    (96, 3072, 363, "nn"),      # AlexNet conv1 as a GEMM: the shape every public QPU SGEMM reports
    (12544, 64, 32, "nn"),      # MobileNet v1 pointwise, first layer (112x112 pixels, 32 -> 64)
    (49, 1024, 1024, "nn"),     # MobileNet v1 pointwise, last layer (7x7 pixels, 1024 -> 1024)
    (49, 1024, 1024, "nt"),
    (96, 3072, 363, "tn"),
])
def test_named_shapes(device, m, n, k, case):
    run_case(device, m, n, k, *transposes(case), alpha=1.5, beta=-0.5, num_qpus=12)


def test_vdw_stride_limits_width(device):
    """The VDW stride is 16 bits (facts §5.14, our reading): the general kernel (NT, TT) cannot
    store a C row longer than 16385 floats, and it says so instead of writing garbage."""
    with pytest.raises(Vc4nnError, match="VDW stride"):
        vc4nn.sgemm(np.ones((1, 1), np.float32), np.ones((16386, 1), np.float32), trans_b=True,
                    device=device)


def test_panel_kernel_has_no_width_limit(device):
    """The panel kernel (NN, TN) stores one 16-column row per DMA, so no VDW stride limits N."""
    run_case(device, 1, 16390, 1, num_qpus=2)


def test_panel_chunk_loop_fits_the_instruction_cache():
    """The chunk loop stays inside a slice's 4 KB instruction cache (facts §4: 4 KB, 4-way,
    64-byte lines, shared by a slice; the cycle model charges every miss, docs/cycle-model.md
    "Instruction cache"): a loop past it would miss on every chunk. The loop body (from the
    chunk label to its branch's last delay slot) plus the master's and a relay's barrier code,
    which every chunk also runs, must fit in it; found here from the decoded branch targets,
    not from the kernel's own layout."""
    from asm import isa
    from asm.encoding import branch_target, decode
    from vc4nn.kernels import sgemm_panel as panel
    plan = panel.PanelPlan(96, 3072, 363, False, 12, True, True)
    program = panel.program_for(plan)
    labels = program.labels
    start = next(address for name, address in labels.items() if name.endswith("/chunk"))
    words = [int(w) for w in program.words]
    back = [8 * i for i, w in enumerate(words)
            if decode(w).sig == isa.SIG_BRANCH and branch_target(decode(w), 8 * i) == start]
    assert back, "no branch back to the chunk loop"
    loop_bytes = back[-1] + 8 * (1 + isa.BRANCH_DELAY_SLOTS) - start
    after = sorted(address for address in labels.values())
    def code_bytes(name):
        begin = labels[name]
        end = min((a for a in after if a > begin), default=8 * len(words))
        return end - begin
    hot = loop_bytes + code_bytes("master0") + code_bytes("relay0")
    assert 1500 < loop_bytes and hot <= 4096, (loop_bytes, hot)
