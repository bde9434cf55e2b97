"""The GPU transpose (vc4nn/kernels/transpose.py) and the SGEMM route that uses it."""

import numpy as np
import pytest

import vc4nn
from vc4nn.device import QpuStats, RunResult
from vc4nn.errors import Vc4nnError
from vc4nn.kernels import sgemm_panel as panel
from vc4nn.kernels import transpose


@pytest.mark.parametrize("rows,k,num_qpus", [
    (1, 1, 1), (16, 16, 1), (17, 33, 5), (49, 256, 12), (5, 100, 12), (100, 3, 3),
])
def test_transpose_matches_numpy(device, rows, k, num_qpus):
    x = np.random.default_rng(rows * 7 + k).standard_normal((rows, k)).astype(np.float32)
    plan = transpose.TransposePlan(rows, k, num_qpus)
    src = device.array(x)
    dst = device.alloc((k, rows), np.float32)
    dst[...] = np.nan                       # nothing of W may stay unwritten
    device.execute(transpose.program_for(plan), plan.qpus,
                   plan.uniform_streams(src.address, dst.address))
    np.testing.assert_array_equal(np.asarray(dst), x.T)


@pytest.mark.parametrize("rows,k,num_qpus,offset", [
    (1, 1, 1, 0), (16, 16, 1, 0), (17, 33, 5, 0), (15, 48, 12, 1), (5, 100, 12, 1), (100, 3, 3, 0),
])
def test_transpose_of_halves_moves_the_bits(device, rows, k, num_qpus, offset):
    """fp16 in, fp16 out: every half lands where numpy's transpose puts it, bit for bit (odd K
    and a source starting at an odd half alternate the halves' positions in their words; the
    patterns include a NaN and denormals, which a float conversion would not keep)."""
    bits = np.random.default_rng(rows * 5 + k).integers(0, 1 << 16, (rows, k), np.uint16)
    x = bits.view(np.float16)
    plan = transpose.TransposePlan(rows, k, num_qpus, "fp16")
    src = device.alloc(rows * k + offset, np.float16)
    src[offset:] = x.reshape(-1)
    dst = device.alloc((k, rows), np.float16)
    dst.view(np.uint16)[...] = 0xFFFF
    device.execute(transpose.program_for(plan), plan.qpus,
                   plan.uniform_streams(src.address + 2 * offset, dst.address))
    np.testing.assert_array_equal(np.asarray(dst).view(np.uint16), bits.T)


def test_transpose_too_wide_is_a_clear_error():
    with pytest.raises(Vc4nnError, match="VDW stride"):
        transpose.program_for(transpose.TransposePlan(16386, 1, 1))


@pytest.mark.parametrize("k,per_set", [(1024, 8), (512, 4), (256, 2), (128, 1), (363, 1),
                                       (64, 1)])
def test_a_rows_per_set(k, per_set):
    """8 rows K floats apart in a direct-mapped 4 KB cache of 64-byte lines (facts §4): row g
    uses set (g*K*4 // 64) % 64, so K = 256 puts rows g and g+4 on one set, K = 128 spreads
    them over sets 0, 8, ..., 56."""
    plan = panel.PanelPlan(96, 192, k, False, 12, True, True)
    assert plan.rows == 8
    assert panel.a_rows_per_set(plan) == per_set
    assert panel.a_rows_per_set(panel.PanelPlan(96, 192, k, True, 12, True, True)) == 1


@pytest.mark.parametrize("k,num_qpus,launches", [(512, 12, 2), (512, 4, 1), (1024, 4, 2),
                                                 (1024, 2, 1)])
def test_aliasing_a_is_transposed_first(device, k, num_qpus, launches):
    """40 rows: 4 per QPU on 12 QPUs, 5 on 4, 7 on 2. K = 512 puts every other row on one TMU
    cache set (2-3 per set): transposed first on 12 QPUs, not on 4. K = 1024 puts all on one
    set: transposed on 4 QPUs, not on 2 (transpose_a_first)."""
    rng = np.random.default_rng(num_qpus)
    a = rng.standard_normal((40, k)).astype(np.float32)
    b = rng.standard_normal((k, 100)).astype(np.float32)
    c = rng.standard_normal((40, 100)).astype(np.float32)
    expected = 0.5 * (a.astype(np.float64) @ b) - 2.0 * c
    out, run = vc4nn.sgemm(a, b, c.copy(), alpha=0.5, beta=-2.0, device=device,
                           num_qpus=num_qpus, return_run=True)
    bound = (k + 8) * 2.0 ** -23 * (0.5 * np.abs(a.astype(np.float64)) @ np.abs(b) + 2 * np.abs(c))
    assert np.all(np.abs(out - expected) <= bound)
    assert run.launches == launches
    assert run.host_interrupts == run.programs == num_qpus * launches


def test_run_results_add_up():
    first = RunResult(num_qpus=2, host_interrupts=2, cycles=100, seconds=1e-6,
                      qpus=[QpuStats(10, 100, {"issue": 40}), QpuStats(5, 90, {"tmu": 50})])
    second = RunResult(num_qpus=3, host_interrupts=3, cycles=30, seconds=2e-7,
                       qpus=[QpuStats(1, 30, {"issue": 4, "dma": 6})] * 3)
    both = first.followed_by(second)
    assert (both.num_qpus, both.host_interrupts, both.cycles) == (3, 5, 130)
    assert both.seconds == pytest.approx(1.2e-6)
    assert [q.instructions for q in both.qpus] == [11, 6, 1]
    assert both.qpus[0].stalls == {"issue": 44, "dma": 6}
    assert both.instructions == 18
    assert (both.programs, both.launches) == (5, 2)
    unknown = RunResult(num_qpus=1, host_interrupts=1, qpus=[QpuStats()])
    assert first.followed_by(unknown).cycles is None
