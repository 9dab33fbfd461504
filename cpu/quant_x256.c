/* quant_x256.c — 256-bit (AVX2, FMA, F16C) decoders of the quantized
 * formats into f32 rows, each value bit for bit the scalar decoder's.
 *
 * Builds without AVX-512 multiply their weights by decoding pieces of rows
 * into an L1 buffer; with the scalar decoders that step cost more than the
 * rest of the product (an IQ2_XXS row decoded at under 0.1 GB/s: a branch
 * per sign bit). Built for the x86-64 baseline with a target attribute, so
 * that a test can compare it with the scalar decoders on any CPU that has
 * these instructions, whatever the build's -march. */
#include "cpu/quant_f32_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define X256 __attribute__((target("avx2,fma,f16c")))

/* Eight bytes as eight floats. */
static inline X256 __m256 u8x8(uint64_t v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)v))); }

static X256 void q8_0_rows(const block_q8_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(quant_rd16(&b[i].d)));
        for (int k = 0; k < QK8_0; k += 8) {
            __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b[i].qs + k))));
            _mm256_storeu_ps(y + k, _mm256_mul_ps(d, q));
        }
    }
}

/* Element 128h + 32s + l is bits 2s of byte 32h + l; sub-block e/16 has
 * scale byte e/16. y = d·(sc & 15)·q − dmin·(sc >> 4), rounded as the
 * scalar decoder rounds it (the first product is exact). */
static X256 void q2_K_rows(const block_q2_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d)), dmin = _cvtsh_ss(quant_rd16(&b[i].dmin));
        float dl[16], ml[16];
        for (int k = 0; k < 16; k += 8) {
            __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b[i].scales + k)));
            __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(sc, _mm256_set1_epi32(15)));
            __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(sc, 4));
            _mm256_storeu_ps(dl + k, _mm256_mul_ps(_mm256_set1_ps(d), lo));
            _mm256_storeu_ps(ml + k, _mm256_mul_ps(_mm256_set1_ps(dmin), hi));
        }
        for (int h = 0; h < 2; h++) {
            __m256i qs = _mm256_loadu_si256((const __m256i *)(const void *)(b[i].qs + 32 * h));
            for (int s = 0; s < 4; s++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * s), _mm256_set1_epi8(3));
                uint64_t part[4];
                _mm256_storeu_si256((__m256i *)(void *)part, q);
                int e0 = 128 * h + 32 * s;
                for (int c = 0; c < 4; c++) {
                    int sub = (e0 + 8 * c) / 16;
                    __m256 v = _mm256_mul_ps(_mm256_set1_ps(dl[sub]), u8x8(part[c]));
                    _mm256_storeu_ps(y + e0 + 8 * c, _mm256_sub_ps(v, _mm256_set1_ps(ml[sub])));
                }
            }
        }
    }
}

static X256 void q4_K_rows(const block_q4_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d)), dmin = _cvtsh_ss(quant_rd16(&b[i].dmin));
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_q4k_scale_min(b[i].scales, j, &sc, &m);
            __m256 dl = _mm256_set1_ps(d * sc), ml = _mm256_set1_ps(dmin * m);
            __m256i qs = _mm256_loadu_si256((const __m256i *)(const void *)(b[i].qs + 32 * (j / 2)));
            __m256i q = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(qs, 4) : qs, _mm256_set1_epi8(15));
            uint64_t part[4];
            _mm256_storeu_si256((__m256i *)(void *)part, q);
            for (int c = 0; c < 4; c++)
                _mm256_storeu_ps(y + 32 * j + 8 * c, _mm256_sub_ps(_mm256_mul_ps(dl, u8x8(part[c])), ml));
        }
    }
}

/* Group g: four grid rows of eight magnitudes, each row's eight signs one
 * ksigns byte; a set sign flips the float's sign bit (−v, −0 included). */
static X256 void iq2_xxs_rows(const block_iq2_xxs *b, float *y, int64_t nb)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < nb; i++) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d));
        const uint8_t *qs = (const uint8_t *)b[i].qs;
        for (int g = 0; g < 8; g++, y += 32) {
            uint32_t w = quant_rd32(qs + 8 * g + 4);
            __m256 db = _mm256_set1_ps(d * (0.5f + (float)(w >> 28)) * 0.25f);
            for (int k = 0; k < 4; k++) {
                __m256 v = _mm256_mul_ps(db, u8x8(quant_iq2xxs_grid[qs[8 * g + k]]));
                __m256i s = _mm256_set1_epi32(quant_ksigns_iq2xs[(w >> (7 * k)) & 127]);
                __m256i neg = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(s, bit), bit), sign);
                _mm256_storeu_ps(y + 8 * k, _mm256_xor_ps(v, _mm256_castsi256_ps(neg)));
            }
        }
    }
}

bool quant_x256_dequant_row(uint32_t type, const void *row, float *y, int64_t n)
{
    switch (type) {
    case GGML_TYPE_Q8_0: q8_0_rows(row, y, n / QK8_0); return true;
    case GGML_TYPE_Q2_K: q2_K_rows(row, y, n / QK_K); return true;
    case GGML_TYPE_Q4_K: q4_K_rows(row, y, n / QK_K); return true;
    case GGML_TYPE_IQ2_XXS: iq2_xxs_rows(row, y, n / QK_K); return true;
    default: return false;
    }
}

#else
bool quant_x256_dequant_row(uint32_t type, const void *row, float *y, int64_t n)
{
    (void)type, (void)row, (void)y, (void)n;
    return false;
}
#endif
