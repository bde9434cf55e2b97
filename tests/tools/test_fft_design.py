"""tools/fft_design.py, the GPU_FFT-design calibration workload: transforms against numpy.fft."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools"))

import fft_design  # noqa: E402


def signal(jobs, n, seed=0):
    return fft_design.random_signal(jobs, n, np.random.default_rng(seed))


def relative_rms_error(out, x):
    ref = np.fft.fft(x.astype(np.complex128), axis=1)
    return np.sqrt(np.mean(np.abs(out - ref) ** 2) / np.mean(np.abs(ref) ** 2))


@pytest.mark.parametrize("log2n, jobs", [(8, 1), (8, 3), (9, 1), (10, 2), (11, 1), (12, 1)])
def test_transforms_match_numpy(log2n, jobs):
    """Radix-16, 32 and 64 passes, 2 and 3 passes, batches: GPU_FFT's accuracy (gpu_fft.txt:
    0.27..2.3 ppm rms at 256..4096 points) is the bar, with margin."""
    x = signal(jobs, 1 << log2n)
    out, run, seconds = fft_design.run_fft(x)
    assert out.shape == x.shape
    assert relative_rms_error(out, x) < 5e-6
    assert run.cycles > 0 and seconds > run.cycles / run.clock_hz / jobs


def test_a_single_impulse_gives_a_flat_spectrum():
    """A hand-derived case: an impulse at t0 transforms to exp(-2 pi i k t0 / N)."""
    n, t0 = 256, 37
    x = np.zeros((1, n), np.complex64)
    x[0, t0] = 1
    out, _run, _seconds = fft_design.run_fft(x)
    k = np.arange(n)
    assert np.allclose(out[0], np.exp(-2j * np.pi * k * t0 / n), atol=1e-5)


def test_launch_path_follows_gpu_fft_busy_wait_limit():
    assert fft_design.launch_path(256, 10) == "direct"
    assert fft_design.launch_path(2048, 10) == "direct"       # 20480 points: still direct
    assert fft_design.launch_path(4096, 10) == "mailbox"
    assert fft_design.launch_path(32768, 1) == "mailbox"


def test_unsupported_sizes_are_refused():
    with pytest.raises(SystemExit, match="N=262144"):
        fft_design.run_fft(signal(1, 1 << 18))
    with pytest.raises(SystemExit, match="N=1000"):
        fft_design.run_fft(signal(1, 1000))
