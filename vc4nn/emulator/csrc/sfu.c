/* The special function unit (mirror of sfu.py): float64 function, 13 fraction bits. */
#include <math.h>
#include <string.h>

#include "core.h"

#define DROP (52 - SFU_FRACTION_BITS)

static uint32_t reduce_precision(double d)
{
    uint64_t bits, odd;
    memcpy(&bits, &d, 8);
    odd = (bits >> DROP) & 1;
    bits = (bits + ((UINT64_C(1) << (DROP - 1)) - 1) + odd) & ~((UINT64_C(1) << DROP) - 1);
    memcpy(&d, &bits, 8);
    float f = (float)d;
    uint32_t r;
    memcpy(&r, &f, 4);
    return float_out_bits(r);
}

void sfu_compute(int function, const uint32_t *in, uint32_t *out)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t b = float_in_bits(in[i]);
        float f;
        memcpy(&f, &b, 4);
        double x = f, y;
        switch (function) {
        case SFU_RECIP: y = 1.0 / x; break;
        case SFU_RECIPSQRT: y = 1.0 / sqrt(fabs(x)); break;
        case SFU_EXP: y = exp2(x); break;
        default: y = log2(fabs(x)); break;
        }
        out[i] = reduce_precision(y);
    }
}
