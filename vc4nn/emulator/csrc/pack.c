/* Unpack on regfile-A / r4 reads and pack on writes (mirror of pack.py). */
#include <math.h>
#include <string.h>

#include "core.h"

static inline float f32(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }

/* numpy's float16 -> float32 (exact; NaN payloads kept) */
static uint32_t half_to_float(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    if (exp == 0x1F)
        return sign | 0x7F800000u | (man << 13);
    if (exp == 0) {
        if (man == 0)
            return sign;
        /* a half denormal becomes a normal float */
        int e = -1;
        do { e++; man <<= 1; } while (!(man & 0x400));
        return sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3FF) << 13);
    }
    return sign | ((exp + 112) << 23) | (man << 13);
}

/* numpy's float32 -> float16: round to nearest even, overflow to Inf, NaN kept NaN */
static uint32_t float_to_half(uint32_t f)
{
    uint32_t sign = (f >> 16) & 0x8000u, exp = f & 0x7F800000u, man = f & 0x007FFFFFu;
    if (exp == 0x7F800000u) {
        if (man) {
            uint32_t r = 0x7C00u + (man >> 13);
            if (r == 0x7C00u)
                r++;
            return sign | r;
        }
        return sign | 0x7C00u;
    }
    if (exp >= 0x47800000u)
        return sign | 0x7C00u;
    if (exp <= 0x38000000u) {
        if (exp < 0x33000000u)
            return sign;
        uint32_t e = exp >> 23;
        man = (man | 0x00800000u) >> (113 - e);
        /* ties to even; the shift may have dropped up to 11 bits, kept in f's low bits */
        if ((man & 0x3FFFu) != 0x1000u || (f & 0x7FFu))
            man += 0x1000u;
        return sign | (man >> 13);
    }
    uint32_t h_exp = (exp - 0x38000000u) >> 13;
    if ((man & 0x3FFFu) != 0x1000u)
        man += 0x1000u;
    uint32_t h = h_exp + (man >> 13);   /* a carry rounds into the exponent (maybe Inf) */
    return sign | h;
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
    if (as_float) {
        float f = f32(v);
        if (saturate && !isnan(f)) {
            if (f < -65504.0f) f = -65504.0f;
            if (f > 65504.0f) f = 65504.0f;
            memcpy(&v, &f, 4);
        }
        return float_to_half(v);
    }
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
