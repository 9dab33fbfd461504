/* quant.c — ggml type table, half-precision conversions, scalar block
 * decoders and dots, the f32-activation entry points (dispatching to the
 * vector kernels when built for them) and ds4's quantized-activation dots. */
#include "engine/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant_impl.h"

/* ---- type table ------------------------------------------------------------- */

static const quant_type_info types[] = {
    [GGML_TYPE_F32] = { "F32", 1, 4, true },
    [GGML_TYPE_F16] = { "F16", 1, 2, true },
    [GGML_TYPE_Q8_0] = { "Q8_0", QK8_0, sizeof(block_q8_0), true },
    [GGML_TYPE_Q2_K] = { "Q2_K", QK_K, sizeof(block_q2_K), true },
    [GGML_TYPE_Q4_K] = { "Q4_K", QK_K, sizeof(block_q4_K), true },
    [GGML_TYPE_Q8_K] = { "Q8_K", QK_K, 292, false },
    [GGML_TYPE_IQ2_XXS] = { "IQ2_XXS", QK_K, sizeof(block_iq2_xxs), true },
    [GGML_TYPE_I32] = { "I32", 1, 4, true },
    [GGML_TYPE_BF16] = { "BF16", 1, 2, true },
};

_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block");
_Static_assert(sizeof(block_q2_K) == 84, "Q2_K block");
_Static_assert(sizeof(block_q4_K) == 144, "Q4_K block");
_Static_assert(sizeof(block_iq2_xxs) == 66, "IQ2_XXS block");
_Static_assert(sizeof(block_q8_K) == 292, "Q8_K block");

const quant_type_info *quant_type(uint32_t type)
{
    if (type >= sizeof types / sizeof types[0] || !types[type].name) return NULL;
    return &types[type];
}

const char *quant_type_name(uint32_t type)
{
    static const char *const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
        "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64",
        "IQ1_M", "BF16",
    };
    return type < sizeof names / sizeof names[0] ? names[type] : "?";
}

uint64_t quant_row_bytes(uint32_t type, uint64_t n)
{
    const quant_type_info *t = quant_type(type);
    return t ? n / t->block_elems * t->block_bytes : 0;
}

/* ---- IQ2_XXS tables (values as in ggml's iq2xxs_grid / ksigns_iq2xs) --------- */

const uint64_t quant_iq2xxs_grid[256] = {
    0x0808080808080808ull, 0x080808080808082bull, 0x0808080808081919ull, 0x0808080808082b08ull,
    0x0808080808082b2bull, 0x0808080808190819ull, 0x0808080808191908ull, 0x08080808082b0808ull,
    0x08080808082b082bull, 0x08080808082b2b08ull, 0x08080808082b2b2bull, 0x0808080819080819ull,
    0x0808080819081908ull, 0x0808080819190808ull, 0x0808080819192b08ull, 0x08080808192b0819ull,
    0x08080808192b1908ull, 0x080808082b080808ull, 0x080808082b08082bull, 0x080808082b082b2bull,
    0x080808082b2b082bull, 0x0808081908080819ull, 0x0808081908081908ull, 0x0808081908190808ull,
    0x0808081908191919ull, 0x0808081919080808ull, 0x080808192b081908ull, 0x080808192b192b08ull,
    0x0808082b08080808ull, 0x0808082b0808082bull, 0x0808082b082b082bull, 0x0808082b2b08082bull,
    0x0808190808080819ull, 0x0808190808081908ull, 0x0808190808190808ull, 0x08081908082b0819ull,
    0x08081908082b1908ull, 0x0808190819080808ull, 0x080819081908082bull, 0x0808190819082b08ull,
    0x08081908192b0808ull, 0x080819082b080819ull, 0x080819082b081908ull, 0x080819082b190808ull,
    0x080819082b2b1908ull, 0x0808191908080808ull, 0x080819190808082bull, 0x0808191908082b08ull,
    0x08081919082b0808ull, 0x080819191908192bull, 0x08081919192b2b19ull, 0x080819192b080808ull,
    0x080819192b190819ull, 0x0808192b08082b19ull, 0x0808192b08190808ull, 0x0808192b19080808ull,
    0x0808192b2b081908ull, 0x0808192b2b2b1908ull, 0x08082b0808080808ull, 0x08082b0808081919ull,
    0x08082b0808082b08ull, 0x08082b0808191908ull, 0x08082b08082b2b08ull, 0x08082b0819080819ull,
    0x08082b0819081908ull, 0x08082b0819190808ull, 0x08082b081919082bull, 0x08082b082b082b08ull,
    0x08082b1908081908ull, 0x08082b1919080808ull, 0x08082b2b0808082bull, 0x08082b2b08191908ull,
    0x0819080808080819ull, 0x0819080808081908ull, 0x0819080808190808ull, 0x08190808082b0819ull,
    0x0819080819080808ull, 0x08190808192b0808ull, 0x081908082b081908ull, 0x081908082b190808ull,
    0x081908082b191919ull, 0x0819081908080808ull, 0x0819081908082b08ull, 0x08190819082b0808ull,
    0x0819081919190808ull, 0x0819081919192b2bull, 0x081908192b080808ull, 0x0819082b082b1908ull,
    0x0819082b19081919ull, 0x0819190808080808ull, 0x0819190808082b08ull, 0x08191908082b0808ull,
    0x08191908082b1919ull, 0x0819190819082b19ull, 0x081919082b080808ull, 0x0819191908192b08ull,
    0x08191919192b082bull, 0x0819192b08080808ull, 0x0819192b0819192bull, 0x08192b0808080819ull,
    0x08192b0808081908ull, 0x08192b0808190808ull, 0x08192b0819080808ull, 0x08192b082b080819ull,
    0x08192b1908080808ull, 0x08192b1908081919ull, 0x08192b192b2b0808ull, 0x08192b2b19190819ull,
    0x082b080808080808ull, 0x082b08080808082bull, 0x082b080808082b2bull, 0x082b080819081908ull,
    0x082b0808192b0819ull, 0x082b08082b080808ull, 0x082b08082b08082bull, 0x082b0819082b2b19ull,
    0x082b081919082b08ull, 0x082b082b08080808ull, 0x082b082b0808082bull, 0x082b190808080819ull,
    0x082b190808081908ull, 0x082b190808190808ull, 0x082b190819080808ull, 0x082b19081919192bull,
    0x082b191908080808ull, 0x082b191919080819ull, 0x082b1919192b1908ull, 0x082b192b2b190808ull,
    0x082b2b0808082b08ull, 0x082b2b08082b0808ull, 0x082b2b082b191908ull, 0x082b2b2b19081908ull,
    0x1908080808080819ull, 0x1908080808081908ull, 0x1908080808190808ull, 0x1908080808192b08ull,
    0x19080808082b0819ull, 0x19080808082b1908ull, 0x1908080819080808ull, 0x1908080819082b08ull,
    0x190808081919192bull, 0x19080808192b0808ull, 0x190808082b080819ull, 0x190808082b081908ull,
    0x190808082b190808ull, 0x1908081908080808ull, 0x19080819082b0808ull, 0x19080819192b0819ull,
    0x190808192b080808ull, 0x190808192b081919ull, 0x1908082b08080819ull, 0x1908082b08190808ull,
    0x1908082b19082b08ull, 0x1908082b1919192bull, 0x1908082b192b2b08ull, 0x1908190808080808ull,
    0x1908190808082b08ull, 0x19081908082b0808ull, 0x190819082b080808ull, 0x190819082b192b19ull,
    0x190819190819082bull, 0x19081919082b1908ull, 0x1908192b08080808ull, 0x19082b0808080819ull,
    0x19082b0808081908ull, 0x19082b0808190808ull, 0x19082b0819080808ull, 0x19082b0819081919ull,
    0x19082b1908080808ull, 0x19082b1919192b08ull, 0x19082b19192b0819ull, 0x19082b192b08082bull,
    0x19082b2b19081919ull, 0x19082b2b2b190808ull, 0x1919080808080808ull, 0x1919080808082b08ull,
    0x1919080808190819ull, 0x1919080808192b19ull, 0x19190808082b0808ull, 0x191908082b080808ull,
    0x191908082b082b08ull, 0x1919081908081908ull, 0x191908191908082bull, 0x191908192b2b1908ull,
    0x1919082b2b190819ull, 0x191919082b190808ull, 0x191919082b19082bull, 0x1919191908082b2bull,
    0x1919192b08080819ull, 0x1919192b19191908ull, 0x19192b0808080808ull, 0x19192b0808190819ull,
    0x19192b0808192b19ull, 0x19192b08192b1908ull, 0x19192b1919080808ull, 0x19192b2b08082b08ull,
    0x192b080808081908ull, 0x192b080808190808ull, 0x192b080819080808ull, 0x192b0808192b2b08ull,
    0x192b081908080808ull, 0x192b081919191919ull, 0x192b082b08192b08ull, 0x192b082b192b0808ull,
    0x192b190808080808ull, 0x192b190808081919ull, 0x192b191908190808ull, 0x192b19190819082bull,
    0x192b19192b081908ull, 0x192b2b081908082bull, 0x2b08080808080808ull, 0x2b0808080808082bull,
    0x2b08080808082b2bull, 0x2b08080819080819ull, 0x2b0808082b08082bull, 0x2b08081908081908ull,
    0x2b08081908192b08ull, 0x2b08081919080808ull, 0x2b08082b08190819ull, 0x2b08190808080819ull,
    0x2b08190808081908ull, 0x2b08190808190808ull, 0x2b08190808191919ull, 0x2b08190819080808ull,
    0x2b081908192b0808ull, 0x2b08191908080808ull, 0x2b0819191908192bull, 0x2b0819192b191908ull,
    0x2b08192b08082b19ull, 0x2b08192b19080808ull, 0x2b08192b192b0808ull, 0x2b082b080808082bull,
    0x2b082b1908081908ull, 0x2b082b2b08190819ull, 0x2b19080808081908ull, 0x2b19080808190808ull,
    0x2b190808082b1908ull, 0x2b19080819080808ull, 0x2b1908082b2b0819ull, 0x2b1908190819192bull,
    0x2b1908192b080808ull, 0x2b19082b19081919ull, 0x2b19190808080808ull, 0x2b191908082b082bull,
    0x2b19190819081908ull, 0x2b19191919190819ull, 0x2b192b082b080819ull, 0x2b192b19082b0808ull,
    0x2b2b08080808082bull, 0x2b2b080819190808ull, 0x2b2b08082b081919ull, 0x2b2b081908082b19ull,
    0x2b2b082b08080808ull, 0x2b2b190808192b08ull, 0x2b2b2b0819190808ull, 0x2b2b2b1908081908ull,
};

const uint8_t quant_ksigns_iq2xs[128] = {
      0, 129, 130,   3, 132,   5,   6, 135, 136,   9,  10, 139,  12, 141, 142,  15,
    144,  17,  18, 147,  20, 149, 150,  23,  24, 153, 154,  27, 156,  29,  30, 159,
    160,  33,  34, 163,  36, 165, 166,  39,  40, 169, 170,  43, 172,  45,  46, 175,
     48, 177, 178,  51, 180,  53,  54, 183, 184,  57,  58, 187,  60, 189, 190,  63,
    192,  65,  66, 195,  68, 197, 198,  71,  72, 201, 202,  75, 204,  77,  78, 207,
     80, 209, 210,  83, 212,  85,  86, 215, 216,  89,  90, 219,  92, 221, 222,  95,
     96, 225, 226,  99, 228, 101, 102, 231, 232, 105, 106, 235, 108, 237, 238, 111,
    240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255,
};

/* ---- half precision ----------------------------------------------------------- */

static inline float f32_from_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline uint32_t bits_from_f32(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

float quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return f32_from_bits(sign);
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400u));
        return f32_from_bits(sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13));
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t quant_f32_to_f16(float f)
{
    uint32_t x = bits_from_f32(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x1ffu); /* quiet NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* ≥ 65520 rounds to infinity */
    if (ax < 0x38800000u) {                       /* below 2^-14: subnormal or zero */
        if (ax <= 0x33000000u) return sign;       /* ≤ 2^-25 rounds (to even) to zero */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e, q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    uint32_t h = ((ax >> 23) - 112) << 10 | ((ax >> 13) & 0x3ffu);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return sign | (uint16_t)h;
}

float quant_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t quant_f32_to_bf16(float f)
{
    uint32_t x = bits_from_f32(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---- scalar block decoders --------------------------------------------------- */

static void dequant_q8_0(const block_q8_0 *b, float *y)
{
    float d = quant_f16_to_f32(quant_rd16(&b->d));
    for (int i = 0; i < QK8_0; i++) y[i] = d * b->qs[i];
}

static void dequant_q2_K(const block_q2_K *b, float *y)
{
    float d = quant_f16_to_f32(quant_rd16(&b->d)), dmin = quant_f16_to_f32(quant_rd16(&b->dmin));
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, r = e % 128, s = r / 32, l = r % 32;
        int q = (b->qs[32 * h + l] >> (2 * s)) & 3;
        uint8_t sc = b->scales[e / 16];
        float dl = d * (sc & 15), ml = dmin * (sc >> 4);
        y[e] = dl * q - ml;
    }
}

static void dequant_q4_K(const block_q4_K *b, float *y)
{
    float d = quant_f16_to_f32(quant_rd16(&b->d)), dmin = quant_f16_to_f32(quant_rd16(&b->dmin));
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        quant_q4k_scale_min(b->scales, j, &sc, &m);
        float dl = d * sc, ml = dmin * m;
        int c = j / 2;
        for (int l = 0; l < 32; l++) {
            uint8_t q = b->qs[32 * c + l];
            q = (j & 1) ? q >> 4 : q & 15;
            y[32 * j + l] = dl * q - ml;
        }
    }
}

static void dequant_iq2_xxs(const block_iq2_xxs *b, float *y)
{
    float d = quant_f16_to_f32(quant_rd16(&b->d));
    const uint8_t *qs = (const uint8_t *)b->qs;
    for (int g = 0; g < 8; g++) {
        const uint8_t *idx = qs + 8 * g;
        uint32_t w = quant_rd32(idx + 4);
        float db = d * (0.5f + (float)(w >> 28)) * 0.25f;
        for (int k = 0; k < 4; k++) {
            uint64_t grid = quant_iq2xxs_grid[idx[k]];
            uint8_t signs = quant_ksigns_iq2xs[(w >> (7 * k)) & 127];
            for (int j = 0; j < 8; j++) {
                float v = db * (float)(uint8_t)(grid >> (8 * j));
                y[32 * g + 8 * k + j] = (signs >> j) & 1 ? -v : v;
            }
        }
    }
}

void quant_dequant_row_scalar(uint32_t type, const void *row, float *y, int64_t n)
{
    const uint8_t *p = row;
    switch (type) {
    case GGML_TYPE_F32: memcpy(y, row, (size_t)n * 4); break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) y[i] = quant_f16_to_f32(quant_rd16(p + 2 * i));
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) y[i] = quant_bf16_to_f32(quant_rd16(p + 2 * i));
        break;
    case GGML_TYPE_I32:
        for (int64_t i = 0; i < n; i++) y[i] = (float)(int32_t)quant_rd32(p + 4 * i);
        break;
    case GGML_TYPE_Q8_0:
        for (int64_t b = 0; b < n / QK8_0; b++) dequant_q8_0((const block_q8_0 *)p + b, y + b * QK8_0);
        break;
    case GGML_TYPE_Q2_K:
        for (int64_t b = 0; b < n / QK_K; b++) dequant_q2_K((const block_q2_K *)p + b, y + b * QK_K);
        break;
    case GGML_TYPE_Q4_K:
        for (int64_t b = 0; b < n / QK_K; b++) dequant_q4_K((const block_q4_K *)p + b, y + b * QK_K);
        break;
    case GGML_TYPE_IQ2_XXS:
        for (int64_t b = 0; b < n / QK_K; b++)
            dequant_iq2_xxs((const block_iq2_xxs *)p + b, y + b * QK_K);
        break;
    default: memset(y, 0, (size_t)n * sizeof *y); break;
    }
}

float quant_dot_scalar(uint32_t type, const void *row, const float *x, int64_t n)
{
    float buf[QK_K], sum = 0.0f;
    const uint8_t *p = row;
    const quant_type_info *t = quant_type(type);
    if (!t || type == GGML_TYPE_Q8_K) return 0.0f;
    /* Dequantize a block (or 256 plain elements) at a time, then sum in order. */
    int64_t step = t->block_elems == 1 ? QK_K : t->block_elems;
    for (int64_t i = 0; i < n; i += step) {
        int64_t m = n - i < step ? n - i : step;
        quant_dequant_row_scalar(type, p + i / t->block_elems * t->block_bytes, buf, m);
        for (int64_t j = 0; j < m; j++) sum += buf[j] * x[i + j];
    }
    return sum;
}

/* ---- quantized activations (doc/model.md §12.3) ---------------------- */

static int8_t clamp_i8(float v)
{
    float r = nearbyintf(v); /* default rounding: to nearest, ties to even */
    if (r > 127.0f) r = 127.0f;
    if (r < -128.0f) r = -128.0f;
    return (int8_t)r;
}

void quant_act_q8_0(const float *x, int64_t n, block_q8_0a *out)
{
    for (int64_t b = 0; b * QK8_0 < n; b++) {
        float v[QK8_0] = { 0 }, amax = 0.0f;
        int64_t m = n - b * QK8_0 < QK8_0 ? n - b * QK8_0 : QK8_0;
        for (int64_t i = 0; i < m; i++) {
            v[i] = x[b * QK8_0 + i];
            if (fabsf(v[i]) > amax) amax = fabsf(v[i]);
        }
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = d;
        for (int i = 0; i < QK8_0; i++) out[b].qs[i] = clamp_i8(v[i] * id);
    }
}

void quant_act_q8_K(const float *x, int64_t n, block_q8_K *out)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *v = x + b * QK_K;
        block_q8_K *o = &out[b];
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < QK_K; i++)
            if (fabsf(v[i]) > amax) {
                amax = fabsf(v[i]);
                max = v[i];
            }
        if (amax == 0.0f) {
            memset(o, 0, sizeof *o);
            continue;
        }
        float iscale = -127.0f / max;
        for (int i = 0; i < QK_K; i++) o->qs[i] = clamp_i8(iscale * v[i]);
        for (int t = 0; t < QK_K / 16; t++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += o->qs[16 * t + i];
            o->bsums[t] = (int16_t)s;
        }
        o->d = 1.0f / iscale;
    }
}

int quant_act_type(uint32_t weight_type)
{
    switch (weight_type) {
    case GGML_TYPE_Q8_0: return GGML_TYPE_Q8_0;
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_IQ2_XXS: return GGML_TYPE_Q8_K;
    default: return -1;
    }
}

size_t quant_act_bytes(uint32_t weight_type, int64_t n)
{
    switch (quant_act_type(weight_type)) {
    case GGML_TYPE_Q8_0: return (size_t)((n + QK8_0 - 1) / QK8_0) * sizeof(block_q8_0a);
    case GGML_TYPE_Q8_K: return (size_t)(n / QK_K) * sizeof(block_q8_K);
    default: return 0;
    }
}

void quant_act(uint32_t weight_type, const float *x, int64_t n, void *act)
{
    switch (quant_act_type(weight_type)) {
    case GGML_TYPE_Q8_0: quant_act_q8_0(x, n, act); break;
    case GGML_TYPE_Q8_K: quant_act_q8_K(x, n, act); break;
    default: break;
    }
}

static float dot_q8_0_act(const block_q8_0 *w, const block_q8_0a *a, int64_t nb)
{
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int isum = 0;
        for (int i = 0; i < QK8_0; i++) isum += w[b].qs[i] * a[b].qs[i];
        sum += (float)isum * (quant_f16_to_f32(quant_rd16(&w[b].d)) * a[b].d);
    }
    return sum;
}

static float dot_q2_K_act(const block_q2_K *w, const block_q8_K *a, int64_t nb)
{
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const block_q2_K *x = &w[b];
        const block_q8_K *y = &a[b];
        int isum = 0, summs = 0;
        for (int t = 0; t < 16; t++) {
            int e0 = 16 * t, h = e0 / 128, s = (e0 % 128) / 32, l0 = e0 % 32, part = 0;
            for (int l = l0; l < l0 + 16; l++)
                part += ((x->qs[32 * h + l] >> (2 * s)) & 3) * y->qs[128 * h + 32 * s + l];
            isum += (x->scales[t] & 15) * part;
            summs += (x->scales[t] >> 4) * y->bsums[t];
        }
        float dall = y->d * quant_f16_to_f32(quant_rd16(&x->d));
        float dmin = y->d * quant_f16_to_f32(quant_rd16(&x->dmin));
        sum += dall * (float)isum - dmin * (float)summs;
    }
    return sum;
}

static float dot_q4_K_act(const block_q4_K *w, const block_q8_K *a, int64_t nb)
{
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const block_q4_K *x = &w[b];
        const block_q8_K *y = &a[b];
        int isum = 0, summs = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_q4k_scale_min(x->scales, j, &sc, &m);
            int part = 0;
            for (int l = 0; l < 32; l++) {
                uint8_t q = x->qs[32 * (j / 2) + l];
                q = (j & 1) ? q >> 4 : q & 15;
                part += q * y->qs[32 * j + l];
            }
            isum += sc * part;
            summs += m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
        }
        sum += y->d * (quant_f16_to_f32(quant_rd16(&x->d)) * (float)isum -
                       quant_f16_to_f32(quant_rd16(&x->dmin)) * (float)summs);
    }
    return sum;
}

static float dot_iq2_xxs_act(const block_iq2_xxs *w, const block_q8_K *a, int64_t nb)
{
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *qs = (const uint8_t *)w[b].qs;
        const int8_t *q8 = a[b].qs;
        int bsum = 0;
        for (int g = 0; g < 8; g++) {
            uint32_t sw = quant_rd32(qs + 8 * g + 4);
            int gsum = 0;
            for (int k = 0; k < 4; k++) {
                uint64_t grid = quant_iq2xxs_grid[qs[8 * g + k]];
                uint8_t signs = quant_ksigns_iq2xs[(sw >> (7 * k)) & 127];
                for (int j = 0; j < 8; j++) {
                    int v = (uint8_t)(grid >> (8 * j)) * q8[32 * g + 8 * k + j];
                    gsum += (signs >> j) & 1 ? -v : v;
                }
            }
            bsum += (int)(2 * (sw >> 28) + 1) * gsum;
        }
        sum += quant_f16_to_f32(quant_rd16(&w[b].d)) * a[b].d * (float)bsum;
    }
    return 0.125f * sum;
}

float quant_dot_act(uint32_t type, const void *row, const void *act, int64_t n)
{
    switch (type) {
    case GGML_TYPE_Q8_0: return dot_q8_0_act(row, act, n / QK8_0);
    case GGML_TYPE_Q2_K: return dot_q2_K_act(row, act, n / QK_K);
    case GGML_TYPE_Q4_K: return dot_q4_K_act(row, act, n / QK_K);
    case GGML_TYPE_IQ2_XXS: return dot_iq2_xxs_act(row, act, n / QK_K);
    default: return 0.0f;
    }
}

void quant_matvec_act(uint32_t type, const void *w, size_t row_bytes, const void *act, int64_t n,
                      float *y, int64_t r0, int64_t r1)
{
    const uint8_t *base = w;
    for (int64_t r = r0; r < r1; r++) y[r] = quant_dot_act(type, base + (size_t)r * row_bytes, act, n);
}
