/* The ADD and MUL operations and their carries, lane by lane (mirror of alu.py). */
#include <math.h>
#include <string.h>

#include "core.h"

static inline float f32(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }
static inline uint32_t bits32(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static inline double f64(uint64_t bits) { double d; memcpy(&d, &bits, 8); return d; }
static inline uint64_t bits64(double d) { uint64_t b; memcpy(&b, &d, 8); return b; }

/* alu._float_fixup_table: by bits 31:22 (sign, exponent, quiet bit). */
static inline uint32_t fixup(uint32_t x, uint32_t nan_mask)
{
    uint32_t top = (x >> 22) & 0x1FF;      /* exponent and quiet bit */
    /* without branches, so that the lane loops vectorise: the mask x keeps */
    uint32_t keep = top < 0x002 ? 0x80000000u       /* denormal: flush to signed zero */
                    : top == 0x1FE ? 0xFF800000u    /* NaN with quiet bit 0 (or Inf): +-Inf */
                    : top == 0x1FF ? nan_mask : 0xFFFFFFFFu;
    return x & keep;
}

uint32_t float_in_bits(uint32_t x) { return fixup(x, 0x7F800000u); }
uint32_t float_out_bits(uint32_t x) { return fixup(x, 0x7F800000u); }

#define F32_TRUNCATE UINT64_C(0xFFFFFFFFE0000000)
#define F32_ULP_IN_F64 (UINT64_C(1) << 29)

/* alu._sum_toward_zero / sum_toward_zero_exact for one lane: the float64 sum truncated to a
 * float32 significand, one float32 step inward when the float64 sum itself was rounded onto a
 * float32 value; tiny results flush. Both Python paths give this for every lane. */
static inline uint32_t sum_toward_zero(double x, double y)
{
    double s = x + y;
    uint64_t sb = bits64(s);
    uint64_t truncated = sb & F32_TRUNCATE;
    double back = s - x;
    double error = (x - (s - back)) + (y - back);
    /* & and |, not && and ||: no branches, so that the lane loops vectorise */
    uint64_t inward = (error != 0) & (truncated == sb) & (((error < 0) & (s > 0))
                                                          | ((error > 0) & (s < 0)));
    truncated -= F32_ULP_IN_F64 * inward;
    return float_out_bits(bits32((float)f64(truncated)));
}

static inline uint32_t fin(uint32_t x) { return float_in_bits(x); }

/* The same as sum_toward_zero(x, y) for float32 x and y (not denormal), mostly in float32
 * arithmetic, which is several times faster: the round-to-nearest sum r and its exact error e
 * (Knuth's TwoSum), and one step toward zero when r was rounded away from zero; for a result
 * that is not a normal float32 above the smallest (zero, tiny, Inf, NaN), the float64 path. */
static inline uint32_t fadd_toward_zero(float x, float y)
{
    float r = x + y, back = r - x;
    float e = (x - (r - back)) + (y - back);
    uint32_t bits = bits32(r), magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x00800000u && magnitude < 0x7F800000u)
        return bits - (uint32_t)((e != 0) & ((e < 0) != (r < 0)));
    return sum_toward_zero(x, y);
}

static uint32_t smaller(float a, float b) { return bits32(a > b ? b : a); }
static uint32_t larger(float a, float b) { return bits32(a > b ? a : b); }

static inline uint32_t sat32(int64_t w)
{
    if (w < INT32_MIN) w = INT32_MIN;
    if (w > INT32_MAX) w = INT32_MAX;
    return (uint32_t)(int32_t)w;
}

static uint32_t bytewise(uint32_t a, uint32_t b, int op)
{
    uint32_t r = 0;
    for (int i = 0; i < 32; i += 8) {
        int x = (a >> i) & 0xFF, y = (b >> i) & 0xFF, v;
        switch (op) {
        case 0: v = x + y > 255 ? 255 : x + y; break;          /* v8adds */
        case 1: v = x - y < 0 ? 0 : x - y; break;              /* v8subs */
        case 2: v = (x * y + 127) / 255; break;                /* v8muld */
        case 3: v = x < y ? x : y; break;                      /* v8min */
        default: v = x > y ? x : y; break;                     /* v8max */
        }
        r |= (uint32_t)v << i;
    }
    return r;
}

static inline uint32_t add_lane(int op, int saturating, uint32_t a, uint32_t b)
{
    switch (op) {
    case ADD_OP_FADD: return fadd_toward_zero(f32(fin(a)), f32(fin(b)));
    case ADD_OP_FSUB: return fadd_toward_zero(f32(fin(a)), -f32(fin(b)));
    case ADD_OP_FMIN: return smaller(f32(fin(a)), f32(fin(b)));
    case ADD_OP_FMAX: return larger(f32(fin(a)), f32(fin(b)));
    case ADD_OP_FMINABS: return smaller(f32(fin(a) & 0x7FFFFFFF), f32(fin(b) & 0x7FFFFFFF));
    case ADD_OP_FMAXABS: return larger(f32(fin(a) & 0x7FFFFFFF), f32(fin(b) & 0x7FFFFFFF));
    case ADD_OP_FTOI: {
        float f = f32(fin(a));
        return (f >= -2147483648.0f && f < 2147483648.0f) ? (uint32_t)(int32_t)f : 0;
    }
    case ADD_OP_ITOF:
        return float_out_bits(bits32((float)f64(bits64((double)(int32_t)a) & F32_TRUNCATE)));
    case ADD_OP_ADD:
        return saturating ? sat32((int64_t)(int32_t)a + (int32_t)b) : a + b;
    case ADD_OP_SUB:
        return saturating ? sat32((int64_t)(int32_t)a - (int32_t)b) : a - b;
    case ADD_OP_SHR: return a >> (b & 31);
    case ADD_OP_ASR: return (uint32_t)((int32_t)a >> (b & 31));
    case ADD_OP_ROR: { uint32_t s = b & 31; return (a >> s) | (a << ((32 - s) & 31)); }
    case ADD_OP_SHL: return a << (b & 31);
    case ADD_OP_MIN: return (int32_t)a > (int32_t)b ? b : a;
    case ADD_OP_MAX: return (int32_t)a > (int32_t)b ? a : b;
    case ADD_OP_AND: return a & b;
    case ADD_OP_OR: return a | b;
    case ADD_OP_XOR: return a ^ b;
    case ADD_OP_NOT: return ~a;
    case ADD_OP_CLZ: {
        uint32_t n = 32;
        while (a) { a >>= 1; n--; }
        return n;
    }
    case ADD_OP_V8ADDS: return bytewise(a, b, 0);
    case ADD_OP_V8SUBS: return bytewise(a, b, 1);
    default: return 0;
    }
}

/* One loop per operation, so that the lane function is compiled for a constant op (no switch
 * inside the lane loop) */
#define LANEWISE(lane, OP) \
    case OP: \
        for (int i = 0; i < LANES; i++) \
            out[i] = lane(OP, saturating, a[i], b[i]); \
        break;

void alu_add(int op, int saturating, const uint32_t *a, const uint32_t *b, uint32_t *out)
{
    switch (op) {
    LANEWISE(add_lane, ADD_OP_FADD) LANEWISE(add_lane, ADD_OP_FSUB)
    LANEWISE(add_lane, ADD_OP_FMIN) LANEWISE(add_lane, ADD_OP_FMAX)
    LANEWISE(add_lane, ADD_OP_FMINABS) LANEWISE(add_lane, ADD_OP_FMAXABS)
    LANEWISE(add_lane, ADD_OP_FTOI) LANEWISE(add_lane, ADD_OP_ITOF)
    LANEWISE(add_lane, ADD_OP_ADD) LANEWISE(add_lane, ADD_OP_SUB)
    LANEWISE(add_lane, ADD_OP_SHR) LANEWISE(add_lane, ADD_OP_ASR)
    LANEWISE(add_lane, ADD_OP_ROR) LANEWISE(add_lane, ADD_OP_SHL)
    LANEWISE(add_lane, ADD_OP_MIN) LANEWISE(add_lane, ADD_OP_MAX)
    LANEWISE(add_lane, ADD_OP_AND) LANEWISE(add_lane, ADD_OP_OR)
    LANEWISE(add_lane, ADD_OP_XOR) LANEWISE(add_lane, ADD_OP_NOT)
    LANEWISE(add_lane, ADD_OP_CLZ) LANEWISE(add_lane, ADD_OP_V8ADDS)
    LANEWISE(add_lane, ADD_OP_V8SUBS)
    default: memset(out, 0, sizeof(vec));
    }
}

static inline uint32_t mul_lane(int op, int saturating, uint32_t x, uint32_t y)
{
    switch (op) {
    case MUL_OP_FMUL:
        /* alu.fmul_exact (the fast path agrees): NaN products (0 x Inf) give 0 */
        return fixup(bits32(f32(fin(x)) * f32(fin(y))), 0);
    case MUL_OP_MUL24:
        return saturating ? sat32((int64_t)((uint64_t)(x & 0xFFFFFF) * (y & 0xFFFFFF)))
                          : (x & 0xFFFFFF) * (y & 0xFFFFFF);
    case MUL_OP_V8MULD: return bytewise(x, y, 2);
    case MUL_OP_V8MIN: return bytewise(x, y, 3);
    case MUL_OP_V8MAX: return bytewise(x, y, 4);
    case MUL_OP_V8ADDS: return bytewise(x, y, 0);
    case MUL_OP_V8SUBS: return bytewise(x, y, 1);
    default: return 0;
    }
}

void alu_mul(int op, int saturating, const uint32_t *a, const uint32_t *b, uint32_t *out)
{
    switch (op) {
    LANEWISE(mul_lane, MUL_OP_FMUL) LANEWISE(mul_lane, MUL_OP_MUL24)
    LANEWISE(mul_lane, MUL_OP_V8MULD) LANEWISE(mul_lane, MUL_OP_V8MIN)
    LANEWISE(mul_lane, MUL_OP_V8MAX) LANEWISE(mul_lane, MUL_OP_V8ADDS)
    LANEWISE(mul_lane, MUL_OP_V8SUBS)
    default: memset(out, 0, sizeof(vec));
    }
}

/* alu.CARRY, by the CARRY_* codes of the generated header (0: clear). */
void alu_carry(int carry, const uint32_t *a, const uint32_t *b, const uint32_t *r, uint8_t *out)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t x = a[i], y = b[i], s = y & 31;
        int c;
        switch (carry) {
        case CARRY_FADD: case CARRY_FSUB: c = f32(r[i]) > 0; break;
        case CARRY_FMIN: case CARRY_FMAX: c = f32(fin(x)) > f32(fin(y)); break;
        case CARRY_FMINABS: case CARRY_FMAXABS:
            c = f32(fin(x) & 0x7FFFFFFF) > f32(fin(y) & 0x7FFFFFFF); break;
        case CARRY_ITOF: c = (int32_t)x > 0; break;
        case CARRY_ADD: c = (uint32_t)(x + y) < x; break;
        case CARRY_SUB: c = x < y; break;
        case CARRY_SHR: case CARRY_ASR: c = (int)((((uint64_t)x << 1) >> s) & 1); break;
        case CARRY_SHL: c = (int)((((uint64_t)x << s) >> 32) & 1); break;
        case CARRY_MIN: case CARRY_MAX: c = (int32_t)x > (int32_t)y; break;
        default: c = 0;
        }
        out[i] = (uint8_t)c;
    }
}
