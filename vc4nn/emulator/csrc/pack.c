/* Unpack on regfile-A / r4 reads and pack on writes (mirror of pack.py). */
#include <math.h>
#include <string.h>

#include "core.h"

static inline float f32(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }

/* Float16 (pack.py): the QPU has no denormals. Unpack: normal -> the same value, +-0 and
 * denormal -> signed zero, Inf -> Inf, NaN -> NaN with sign, quiet bit and payload moved up. */
#define REBIAS ((127u - 15u) << 23)

static uint32_t half_to_float(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, exponent = h & 0x7C00u, fraction = h & 0x3FFu;
    if (exponent == 0)
        return sign;
    if (exponent == 0x7C00u)
        return sign | 0x7F800000u | (fraction << 13);
    return sign | (((h & 0x7FFFu) << 13) + REBIAS);
}

/* Pack: |x| < 2**-14 -> signed zero (decided before rounding); else round to nearest even to
 * 10 fraction bits; 2**16 or more, Inf and NaN -> Inf of the sign. */
static uint32_t float_to_half(uint32_t v)
{
    uint32_t magnitude = v & 0x7FFFFFFFu;
    uint32_t nearest_even = (magnitude + 0xFFFu + ((magnitude >> 13) & 1u)) >> 13;
    uint32_t half = nearest_even - (REBIAS >> 13);
    if (half > 0x7C00u)
        half = 0x7C00u;
    if ((magnitude >> 23) < 127u - 14u)
        half = 0;
    return ((v >> 16) & 0x8000u) | half;
}

static uint32_t byte_to_float(uint32_t byte)
{
    float f = (float)byte / 255.0f;
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

void unpack_vec(int code, int as_float, const uint32_t *in, uint32_t *out)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t v = in[i], r;
        switch (code) {
        case UNPACK_16A: case UNPACK_16B: {
            uint32_t h = (v >> (code == UNPACK_16A ? 0 : 16)) & 0xFFFF;
            r = as_float ? half_to_float(h) : (uint32_t)(int32_t)(int16_t)h;
            break;
        }
        case UNPACK_8D_REP: r = (v >> 24) * 0x01010101u; break;
        case UNPACK_8A: case UNPACK_8B: case UNPACK_8C: case UNPACK_8D: {
            uint32_t byte = (v >> (8 * (code - UNPACK_8A))) & 0xFF;
            r = as_float ? byte_to_float(byte) : byte;
            break;
        }
        default: r = v;
        }
        out[i] = r;
    }
}

static inline uint32_t into(uint32_t field, uint32_t old, int shift, uint32_t mask)
{
    return (old & ~(mask << shift)) | (field << shift);
}

static uint32_t half_of(int as_float, int saturate, uint32_t v)
{
    if (as_float)           /* saturation is for int results only (pack.py) */
        return float_to_half(v);
    if (saturate) {
        int32_t s = (int32_t)v;
        s = s < -32768 ? -32768 : s > 32767 ? 32767 : s;
        return (uint32_t)s & 0xFFFF;
    }
    return v & 0xFFFF;
}

static uint32_t byte_of(int saturate, uint32_t v)
{
    if (saturate) {
        int32_t s = (int32_t)v;
        return (uint32_t)(s < 0 ? 0 : s > 255 ? 255 : s);
    }
    return v & 0xFF;
}

/* MUL colour pack: rint(clip(v, 0, 1) * 255) in float32; NaN gives 0 as numpy's cast does
 * on the hosts we test (the value is undefined in C). */
static uint32_t colour_byte(uint32_t v)
{
    float f = f32(v);
    if (isnan(f))
        return 0;
    f = f < 0.0f ? 0.0f : f > 1.0f ? 1.0f : f;
    f = f * 255.0f;
    return (uint32_t)rintf(f);
}

static uint32_t pack_a_lane(int as_float, int code, uint32_t v, uint32_t old)
{
    int saturate = code >= PACK_A_32S;
    int base = saturate ? code - (PACK_A_32S - PACK_A_NOP) : code;
    switch (base) {
    case PACK_A_16A: return into(half_of(as_float, saturate, v), old, 0, 0xFFFF);
    case PACK_A_16B: return into(half_of(as_float, saturate, v), old, 16, 0xFFFF);
    case PACK_A_8888: return byte_of(saturate, v) * 0x01010101u;
    case PACK_A_8A: case PACK_A_8B: case PACK_A_8C: case PACK_A_8D:
        return into(byte_of(saturate, v), old, 8 * (base - PACK_A_8A), 0xFF);
    default: return v;
    }
}

static uint32_t pack_mul_lane(int code, uint32_t v, uint32_t old)
{
    uint32_t byte = colour_byte(v);
    if (code == PACK_MUL_8888C)
        return byte * 0x01010101u;
    return into(byte, old, 8 * (code - PACK_MUL_8AC), 0xFF);
}

void pack_vec(int packer, int code, const uint32_t *value, const uint32_t *old, uint32_t *out)
{
    for (int i = 0; i < LANES; i++) {
        if (packer == PACKER_MUL)
            out[i] = pack_mul_lane(code, value[i], old[i]);
        else
            out[i] = pack_a_lane(packer == PACKER_A_FLOAT, code, value[i], old[i]);
    }
}
