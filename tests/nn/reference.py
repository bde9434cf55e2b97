"""Independent float64 references of the layers (from their definitions, not the kernels'
decompositions) and the error bound every layer test uses.

Tolerance: a result element is a sum of n float32 products plus a bias and a residual, each
operation rounding by up to one ulp (fadd may round toward zero, facts §1): |error| <=
(n + 3) * 2**-23 * (sum of the magnitudes of every term), elementwise. An element missed or
counted twice is off by a whole term, far above that bound. Activations only shrink errors.
"""

import numpy as np

ULP = 2.0 ** -23


def activate(x, activation):
    if activation == "relu":
        return np.maximum(x, 0.0)
    if activation == "relu6":
        return np.clip(x, 0.0, 6.0)
    assert activation is None
    return x


def assert_close(result, expected, magnitude, terms):
    result = np.asarray(result)
    assert result.shape == expected.shape, (result.shape, expected.shape)
    assert result.dtype == np.float32
    bound = (terms + 3) * ULP * magnitude + 1e-30
    err = np.abs(result.astype(np.float64) - expected)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), (f"y{worst} = {result[worst]}, expected {expected[worst]} "
                                  f"(error {err[worst]:.3g} > bound {bound[worst]:.3g})")


# fp16 storage: a result stored as a half differs from the exact value by the float32 bound
# plus the half's rounding. The pack rounds to nearest even in the emulator, unverified on
# hardware: allow a whole half ulp (2**-10 relative) so that truncation would pass too, and
# 2**-14 absolute (magnitudes below the smallest normal half flush to 0; docs/kernels.md).
HALF_ULP = 2.0 ** -10
HALF_SMALLEST_NORMAL = 2.0 ** -14


def assert_close_fp16(result, expected, magnitude, terms):
    """assert_close for a float16 result (inputs already rounded to halves by the caller: the
    reference applies to the same values the kernel read)."""
    result = np.asarray(result)
    assert result.shape == expected.shape, (result.shape, expected.shape)
    assert result.dtype == np.float16
    bound = ((terms + 3) * ULP * magnitude + HALF_ULP * np.abs(expected)
             + HALF_SMALLEST_NORMAL)
    err = np.abs(result.astype(np.float64) - expected)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), (f"y{worst} = {result[worst]}, expected {expected[worst]} "
                                  f"(error {err[worst]:.3g} > bound {bound[worst]:.3g})")


def dense(x, w, bias, residual, activation):
    """(expected, magnitude) of act(sum_c x[..., c] w[c, :] + bias + residual)."""
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    total = np.einsum("...c,cd->...d", x64, w64)
    magnitude = np.einsum("...c,cd->...d", np.abs(x64), np.abs(w64))
    for extra in (bias, residual):
        if extra is not None:
            total = total + np.asarray(extra, np.float64)
            magnitude = magnitude + np.abs(np.asarray(extra, np.float64))
    return activate(total, activation), magnitude
