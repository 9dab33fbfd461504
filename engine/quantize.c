/* quantize.c — f32 → every stored type. Used to build fixtures and in
 * tests; the goal is a small reconstruction error with simple, predictable
 * rules (min/max scales, exhaustive grid search for IQ2_XXS), not ggml's
 * importance-weighted choices. */
#include <math.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_impl.h"

static uint8_t round_u8(float v, int hi)
{
    int r = (int)lrintf(v);
    return (uint8_t)(r < 0 ? 0 : r > hi ? hi : r);
}

static void quantize_q8_0(const float *x, block_q8_0 *b)
{
    float amax = 0.0f;
    for (int i = 0; i < QK8_0; i++) amax = fmaxf(amax, fabsf(x[i]));
    uint16_t dh = quant_f32_to_f16(amax / 127.0f);
    float d = quant_f16_to_f32(dh), id = d > 0.0f ? 1.0f / d : 0.0f;
    memcpy(&b->d, &dh, 2);
    for (int i = 0; i < QK8_0; i++) {
        int q = (int)lrintf(x[i] * id);
        b->qs[i] = (int8_t)(q < -127 ? -127 : q > 127 ? 127 : q);
    }
}

/* Asymmetric sub-block quantization shared by Q2_K and Q4_K: each sub-block
 * of `len` values gets x ≈ d·sc·q − dmin·m with q in 0..qmax and sc, m in
 * 0..smax; returns the block's d and dmin (already rounded through f16). */
static void kquant_scales(const float *x, int nsub, int len, int qmax, int smax, uint8_t *sc,
                          uint8_t *mn, uint16_t *dh, uint16_t *dminh)
{
    float scale[16], minv[16], max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < nsub; s++) {
        float lo = x[s * len], hi = lo;
        for (int i = 1; i < len; i++) {
            lo = fminf(lo, x[s * len + i]);
            hi = fmaxf(hi, x[s * len + i]);
        }
        if (lo > 0.0f) lo = 0.0f;
        scale[s] = (hi - lo) / (float)qmax;
        minv[s] = -lo;
        max_scale = fmaxf(max_scale, scale[s]);
        max_min = fmaxf(max_min, minv[s]);
    }
    *dh = quant_f32_to_f16(max_scale / (float)smax);
    *dminh = quant_f32_to_f16(max_min / (float)smax);
    float d = quant_f16_to_f32(*dh), dmin = quant_f16_to_f32(*dminh);
    for (int s = 0; s < nsub; s++) {
        sc[s] = d > 0.0f ? round_u8(scale[s] / d, smax) : 0;
        mn[s] = dmin > 0.0f ? round_u8(minv[s] / dmin, smax) : 0;
    }
}

static void quantize_q2_K(const float *x, block_q2_K *b)
{
    uint8_t sc[16], mn[16];
    uint16_t dh, dminh;
    kquant_scales(x, 16, 16, 3, 15, sc, mn, &dh, &dminh);
    float d = quant_f16_to_f32(dh), dmin = quant_f16_to_f32(dminh);
    memset(b, 0, sizeof *b);
    memcpy(&b->d, &dh, 2);
    memcpy(&b->dmin, &dminh, 2);
    for (int t = 0; t < 16; t++) b->scales[t] = (uint8_t)(sc[t] | mn[t] << 4);
    for (int e = 0; e < QK_K; e++) {
        int t = e / 16, h = e / 128, s = (e % 128) / 32, l = e % 32;
        float dl = d * sc[t], ml = dmin * mn[t];
        uint8_t q = dl > 0.0f ? round_u8((x[e] + ml) / dl, 3) : 0;
        b->qs[32 * h + l] |= (uint8_t)(q << (2 * s));
    }
}

static void quantize_q4_K(const float *x, block_q4_K *b)
{
    uint8_t sc[8], mn[8];
    uint16_t dh, dminh;
    kquant_scales(x, 8, 32, 15, 63, sc, mn, &dh, &dminh);
    float d = quant_f16_to_f32(dh), dmin = quant_f16_to_f32(dminh);
    memset(b, 0, sizeof *b);
    memcpy(&b->d, &dh, 2);
    memcpy(&b->dmin, &dminh, 2);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            b->scales[j] = sc[j];
            b->scales[j + 4] = mn[j];
        } else {
            b->scales[j + 4] = (uint8_t)((sc[j] & 15) | (mn[j] & 15) << 4);
            b->scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            b->scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
    for (int j = 0; j < 8; j++) {
        float dl = d * sc[j], ml = dmin * mn[j];
        for (int l = 0; l < 32; l++) {
            uint8_t q = dl > 0.0f ? round_u8((x[32 * j + l] + ml) / dl, 15) : 0;
            b->qs[32 * (j / 2) + l] |= (uint8_t)((j & 1) ? q << 4 : q);
        }
    }
}

/* Best grid row and sign pattern for 8 values at scale s: minimises the
 * squared error; the sign pattern must have an even number of negatives
 * (the 8th sign is implied by parity), so an odd one flips the cheapest
 * element. Returns the error; *idx, *signs7 receive the encoding. */
static float iq2_best8(const float *x, float s, uint8_t *idx, uint8_t *signs7)
{
    float ax[8];
    int neg = 0;
    uint8_t sbits = 0;
    for (int j = 0; j < 8; j++) {
        ax[j] = fabsf(x[j]);
        if (x[j] < 0.0f) {
            neg++;
            sbits |= (uint8_t)(1u << j);
        }
    }
    float best = INFINITY;
    int best_i = 0, best_flip = -1;
    for (int i = 0; i < 256; i++) {
        uint64_t g = quant_iq2xxs_grid[i];
        float err = 0.0f, cheapest = INFINITY;
        int flip = -1;
        for (int j = 0; j < 8; j++) {
            float v = s * (float)(uint8_t)(g >> (8 * j));
            float e = ax[j] - v;
            err += e * e;
            /* flipping j's sign turns (|x|-v)² into (|x|+v)²: costs 4|x|v */
            if ((neg & 1) && 4.0f * ax[j] * v < cheapest) {
                cheapest = 4.0f * ax[j] * v;
                flip = j;
            }
        }
        if (neg & 1) err += cheapest;
        if (err < best) {
            best = err;
            best_i = i;
            best_flip = flip;
        }
    }
    if (best_flip >= 0) sbits ^= (uint8_t)(1u << best_flip);
    *idx = (uint8_t)best_i;
    *signs7 = sbits & 127; /* bit 7 follows from parity */
    return best;
}

static float iq2_group_error(const float *x, float s)
{
    float err = 0.0f;
    for (int k = 0; k < 4; k++) {
        uint8_t idx, sg;
        err += iq2_best8(x + 8 * k, s, &idx, &sg);
    }
    return err;
}

static void quantize_iq2_xxs(const float *x, block_iq2_xxs *b)
{
    /* Per group of 32: the scale (relative to its max) with the least error. */
    static const float tries[] = { 0.55f, 0.7f, 0.85f, 1.0f };
    float gscale[8], max_gscale = 0.0f;
    for (int g = 0; g < 8; g++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * g + i]));
        float best = INFINITY, base = amax / 43.0f;
        gscale[g] = 0.0f;
        for (size_t t = 0; t < sizeof tries / sizeof tries[0] && base > 0.0f; t++) {
            float e = iq2_group_error(x + 32 * g, base * tries[t]);
            if (e < best) {
                best = e;
                gscale[g] = base * tries[t];
            }
        }
        max_gscale = fmaxf(max_gscale, gscale[g]);
    }
    /* Group scale = d·(2·ls+1)/8 with ls in 0..15: d covers the largest. */
    uint16_t dh = quant_f32_to_f16(max_gscale * 8.0f / 31.0f);
    float d = quant_f16_to_f32(dh);
    memset(b, 0, sizeof *b);
    memcpy(&b->d, &dh, 2);
    uint8_t *qs = (uint8_t *)b->qs;
    for (int g = 0; g < 8; g++) {
        int ls = d > 0.0f ? (int)lrintf((gscale[g] * 8.0f / d - 1.0f) * 0.5f) : 0;
        ls = ls < 0 ? 0 : ls > 15 ? 15 : ls;
        float s = d * (0.5f + (float)ls) * 0.25f;
        uint32_t w = (uint32_t)ls << 28;
        for (int k = 0; k < 4; k++) {
            uint8_t idx, sg;
            iq2_best8(x + 32 * g + 8 * k, s, &idx, &sg);
            qs[8 * g + k] = idx;
            w |= (uint32_t)sg << (7 * k);
        }
        memcpy(qs + 8 * g + 4, &w, 4);
    }
}

size_t quant_quantize_row(uint32_t type, const float *x, int64_t n, void *out)
{
    uint8_t *o = out;
    switch (type) {
    case GGML_TYPE_F32: memcpy(out, x, (size_t)n * 4); break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_f16(x[i]);
            memcpy(o + 2 * i, &h, 2);
        }
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_bf16(x[i]);
            memcpy(o + 2 * i, &h, 2);
        }
        break;
    case GGML_TYPE_I32:
        for (int64_t i = 0; i < n; i++) {
            int32_t v = (int32_t)lrintf(x[i]);
            memcpy(o + 4 * i, &v, 4);
        }
        break;
    case GGML_TYPE_Q8_0:
        for (int64_t b = 0; b < n / QK8_0; b++) quantize_q8_0(x + b * QK8_0, (block_q8_0 *)o + b);
        break;
    case GGML_TYPE_Q2_K:
        for (int64_t b = 0; b < n / QK_K; b++) quantize_q2_K(x + b * QK_K, (block_q2_K *)o + b);
        break;
    case GGML_TYPE_Q4_K:
        for (int64_t b = 0; b < n / QK_K; b++) quantize_q4_K(x + b * QK_K, (block_q4_K *)o + b);
        break;
    case GGML_TYPE_IQ2_XXS:
        for (int64_t b = 0; b < n / QK_K; b++) quantize_iq2_xxs(x + b * QK_K, (block_iq2_xxs *)o + b);
        break;
    default: return 0;
    }
    return (size_t)quant_row_bytes(type, (uint64_t)n);
}
