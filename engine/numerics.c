/* numerics.c — fp8/fp4 rounding, Hadamard rotation and RoPE frequencies. */
#include "engine/numerics.h"

#include <math.h>
#include <string.h>

float fp8_e4m3_round(float v)
{
    float a = fabsf(v);
    if (a == 0.0f || a != a) return v;
    float q;
    if (a < 0x1p-6f) {
        /* subnormals: step 2^-9, code = mantissa, so rint's even integer is the even code */
        q = rintf(a * 0x1p9f) * 0x1p-9f;
    } else {
        int e;
        frexpf(a, &e);                     /* a = f·2^e, f in [0.5, 1) */
        float step = ldexpf(1.0f, e - 4);  /* 3 mantissa bits below the leading one */
        q = rintf(a / step) * step;
        if (q > 448.0f) q = 448.0f;
    }
    return v < 0 ? -q : q;
}

float fp4_e2m1_round(float v)
{
    float a = fabsf(v), q;
    /* midpoints between {0, .5, 1, 1.5, 2, 3, 4, 6}; ties go to the even index */
    if (a <= 0.25f) q = 0.0f;
    else if (a < 0.75f) q = 0.5f;
    else if (a <= 1.25f) q = 1.0f;
    else if (a < 1.75f) q = 1.5f;
    else if (a <= 2.5f) q = 2.0f;
    else if (a < 3.5f) q = 3.0f;
    else if (a <= 5.0f) q = 4.0f;
    else q = 6.0f;
    return v < 0 ? -q : q;
}

/* 2^ceil(log2(amax/fmax)) */
static float pow2_scale(float amax, float fmax)
{
    return exp2f(ceilf(log2f(amax / fmax)));
}

void sim_fp8_blocks(float *x, int n)
{
    for (int b = 0; b < n; b += 64) {
        int m = n - b < 64 ? n - b : 64;
        float amax = 0.0f;
        for (int i = 0; i < m; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        if (amax < 1e-4f) amax = 1e-4f;
        float s = pow2_scale(amax, 448.0f);
        for (int i = 0; i < m; i++) {
            float v = x[b + i] / s;
            v = v > 448.0f ? 448.0f : v < -448.0f ? -448.0f : v;
            x[b + i] = fp8_e4m3_round(v) * s;
        }
    }
}

void sim_fp4_blocks(float *x, int n)
{
    for (int b = 0; b < n; b += 32) {
        int m = n - b < 32 ? n - b : 32;
        float amax = 0.0f;
        for (int i = 0; i < m; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        if (amax < 7.052966104933725e-38f) amax = 7.052966104933725e-38f;
        float s = pow2_scale(amax, 6.0f);
        for (int i = 0; i < m; i++) {
            float v = x[b + i] / s;
            v = v > 6.0f ? 6.0f : v < -6.0f ? -6.0f : v;
            x[b + i] = fp4_e2m1_round(v) * s;
        }
    }
}

void sim_hadamard(float *x, int n)
{
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += h << 1)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    float s = (float)(1.0 / sqrt((double)n));
    for (int i = 0; i < n; i++) x[i] *= s;
}

void rope_params(const ds4_hparams *hp, int compressed, ds4_rope *out)
{
    memset(out, 0, sizeof *out);
    out->n_rot = hp->n_rot;
    float base = compressed ? hp->compress_rope_base : hp->rope_base;
    out->theta_scale = powf(base, -2.0f / (float)hp->n_rot);
    out->freq_scale = compressed && hp->yarn_factor > 0.0f ? 1.0f / hp->yarn_factor : 1.0f;
    out->ext_factor = compressed && hp->yarn_factor > 1.0f ? 1.0f : 0.0f;
    out->attn_factor = 1.0f;
    if (out->ext_factor != 0.0f) {
        /* the YaRN magnitude factor is cancelled: DS4 interpolates without it */
        out->attn_factor /= 1.0f + 0.1f * logf(1.0f / out->freq_scale);
        float denom = 2.0f * logf(base), orig = (float)hp->yarn_orig_ctx, two_pi = 2.0f * (float)M_PI;
        float lo = floorf((float)hp->n_rot * logf(orig / (hp->yarn_beta_fast * two_pi)) / denom);
        float hi = ceilf((float)hp->n_rot * logf(orig / (hp->yarn_beta_slow * two_pi)) / denom);
        out->corr_lo = fmaxf(0.0f, lo);
        out->corr_hi = fminf((float)(hp->n_rot - 1), hi);
    }
}

void rope_cos_sin(const ds4_rope *r, int64_t pos, int inverse, float *cs, float *sn)
{
    float te = (float)pos;
    for (int k = 0; k < r->n_rot / 2; k++) {
        float ti = r->freq_scale * te, th = ti, m = r->attn_factor;
        if (r->ext_factor != 0.0f) {
            float y = ((float)k - r->corr_lo) / fmaxf(0.001f, r->corr_hi - r->corr_lo);
            float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * r->ext_factor;
            th = ti * (1.0f - mix) + te * mix;
            m *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
        }
        cs[k] = cosf(th) * m;
        sn[k] = (inverse ? -1.0f : 1.0f) * sinf(th) * m;
        te *= r->theta_scale;
    }
}
