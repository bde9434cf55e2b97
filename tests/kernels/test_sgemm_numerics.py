"""What SGEMM does with denormals, infinities and NaN (docs/sgemm.md "Numerics").

Expected values are derived by hand from the QPU's float rules (facts §1): denormal operands
and results flush to zero keeping the sign; fadd rounds toward zero; a (quiet) NaN operand acts
as +Inf; a zero operand of fmul gives 0 even against Inf; +Inf + -Inf is +Inf. numpy (IEEE)
would give a NaN or a denormal in each case, so none of these can pass by accident. Both
kernels run: the panel kernel (NN) and the general one (NT, trans_b). With ``--device=pi`` the
same tests check the rules on the hardware.
"""

import numpy as np
import pytest

import vc4nn

INF, NAN = np.inf, np.nan
DENORMAL = np.float32(1e-40)           # below 2^-126
TINY = 2.0 ** -70                      # normal; its square (2^-140) is not
HALF_ULP_PLUS = 1.5 * 2.0 ** -24       # 0.75 ulp of 1.0: 1 + this rounds to 1 toward zero


def qpu_sgemm(device, a, b, trans_b, **kwargs):
    a = np.array(a, np.float32)
    b = np.array(b, np.float32)
    if trans_b:
        b = np.ascontiguousarray(b.T)
    return vc4nn.sgemm(a, b, trans_b=trans_b, device=device, num_qpus=1, **kwargs)


CASES = [
    # name, A, B, the C the rules give (IEEE in the comment)
    ("denormal operand reads as zero", [[DENORMAL, 0.0]], [[1.0, 1.0], [1.0, 1.0]],
     [[0.0, 0.0]]),                                                        # IEEE: 1e-40
    ("denormal product flushes to zero", [[TINY]], [[TINY]], [[0.0]]),    # IEEE: 2^-140
    ("inf times zero is zero", [[INF, 1.0]], [[0.0], [3.0]], [[3.0]]),    # IEEE: NaN
    ("inf plus minus inf is plus inf", [[INF, -INF]], [[1.0], [1.0]], [[INF]]),   # IEEE: NaN
    ("nan acts as plus inf", [[NAN, 1.0]], [[2.0, -2.0, 0.0], [1.0, 1.0, 1.0]],
     [[INF, -INF, 1.0]]),                                                  # IEEE: NaN NaN NaN
    ("negative nan acts as plus inf too", [[-NAN]], [[1.0]], [[INF]]),     # IEEE: NaN
    ("nan in B", [[1.0, 1.0]], [[NAN], [1.0]], [[INF]]),                   # IEEE: NaN
    ("fadd rounds toward zero", [[1.0, HALF_ULP_PLUS]], [[1.0], [1.0]], [[1.0]]),  # IEEE: 1+2^-23
    ("overflow gives inf", [[3e38, 3e38], [-3e38, -3e38]], [[1.0], [1.0]], [[INF], [-INF]]),
]


@pytest.mark.parametrize("trans_b", [False, True], ids=["panel", "general"])
@pytest.mark.parametrize("name, a, b, expected", CASES, ids=[c[0] for c in CASES])
def test_special_values_follow_the_qpu_rules(device, name, a, b, expected, trans_b):
    c = qpu_sgemm(device, a, b, trans_b)
    assert np.array_equal(c, np.array(expected, np.float32)), (name, c)
    assert not np.isnan(c).any()


def test_a_denormal_result_of_alpha_flushes_to_zero(device):
    c = qpu_sgemm(device, [[1.0]], [[1.0]], False, alpha=2.0 ** -130)
    assert c.view(np.uint32)[0, 0] == 0                       # IEEE: 2^-130, a denormal


def test_beta_times_a_denormal_c_adds_nothing(device):
    c0 = np.array([[DENORMAL * 1e5]], np.float32)             # ~1e-35, normal
    c = vc4nn.sgemm(np.array([[0.0]], np.float32), np.array([[0.0]], np.float32),
                    C=np.array([[DENORMAL]], np.float32), beta=1.0, device=device, num_qpus=1)
    assert c[0, 0] == 0.0
    c = vc4nn.sgemm(np.array([[0.0]], np.float32), np.array([[0.0]], np.float32), C=c0.copy(),
                    beta=1.0, device=device, num_qpus=1)
    assert c[0, 0] == c0[0, 0]                                # a normal C passes unchanged
