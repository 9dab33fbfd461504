/* qk.c — the SIMD level of the integer 2-bit kernels (CPUID, DS4CL_SIMD)
 * and the row/token walk that feeds them tiles. */
#include "cpu/qk.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/qk_impl.h"

static const char *const level_names[QK_N_LEVELS] = { "scalar", "avx2", "avx2vnni", "avx512", "avx512vbmi" };

const char *qk_level_name(qk_level l)
{
    return (unsigned)l < QK_N_LEVELS ? level_names[l] : "?";
}

int qk_level_parse(const char *name)
{
    for (int l = 0; l < QK_N_LEVELS; l++)
        if (name && !strcmp(name, level_names[l])) return l;
    return -1;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

/* The features straight from CPUID, with XGETBV for the OS's saving of the
 * ymm (and zmm) state: compilers' __builtin_cpu_supports do not all know
 * f16c or avxvnni. */
typedef struct {
    bool avx2, avx2vnni, avx512, avx512vbmi;
} qk_cpu;

static qk_cpu qk_cpu_detect(void)
{
    qk_cpu c = { 0 };
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
    bool fma = cx >> 12 & 1, osxsave = cx >> 27 & 1, avx = cx >> 28 & 1, f16c = cx >> 29 & 1;
    if (!osxsave || !avx) return c;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    bool ymm = (xlo & 0x6) == 0x6, zmm = (xlo & 0xe6) == 0xe6;
    if (__get_cpuid_max(0, NULL) < 7) return c;
    __cpuid_count(7, 0, a, b, cx, d);
    c.avx2 = ymm && fma && f16c && (b >> 5 & 1);
    bool f = b >> 16 & 1, dq = b >> 17 & 1, bw = b >> 30 & 1, vl = b >> 31 & 1;
    bool vnni512 = cx >> 11 & 1, vbmi = cx >> 1 & 1;
    c.avx512 = c.avx2 && zmm && f && dq && bw && vl && vnni512;
    c.avx512vbmi = c.avx512 && vbmi;
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    c.avx2vnni = c.avx2 && (a1 >> 4 & 1);
    return c;
}
#endif

bool qk_level_supported(qk_level l)
{
    if (l == QK_SCALAR) return true;
#if defined(__x86_64__) && defined(__GNUC__)
    qk_cpu c = qk_cpu_detect();
    switch (l) {
    case QK_AVX2: return c.avx2;
    case QK_AVX2VNNI: return c.avx2vnni;
    case QK_AVX512: return c.avx512;
    case QK_AVX512VBMI: return c.avx512vbmi;
    default: return false;
    }
#else
    return false;
#endif
}

static qk_level active_level;
static char level_error[160];
static pthread_once_t level_once = PTHREAD_ONCE_INIT;

static void level_init(void)
{
    active_level = QK_SCALAR;
    for (int l = QK_N_LEVELS - 1; l > QK_SCALAR; l--)
        if (qk_level_supported((qk_level)l)) {
            active_level = (qk_level)l;
            break;
        }
    const char *env = getenv("DS4CL_SIMD");
    if (!env || !*env) return;
    int want = qk_level_parse(env);
    if (want < 0)
        snprintf(level_error, sizeof level_error, "DS4CL_SIMD=%s is not a level (avx512vbmi, avx512, avx2vnni, avx2, scalar)",
                 env);
    else if (!qk_level_supported((qk_level)want))
        snprintf(level_error, sizeof level_error, "DS4CL_SIMD=%s: this CPU does not have that level", env);
    else
        active_level = (qk_level)want;
}

qk_level qk_level_active(void)
{
    pthread_once(&level_once, level_init);
    return active_level;
}

const char *qk_level_error(void)
{
    pthread_once(&level_once, level_init);
    return level_error;
}

static _Alignas(64) uint16_t grid_codes[256];
static _Alignas(64) uint8_t grid_code_bytes[512];
static pthread_once_t codes_once = PTHREAD_ONCE_INIT;

static void codes_init(void)
{
    for (int i = 0; i < 256; i++) {
        uint16_t c = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t m = (uint8_t)(quant_iq2xxs_grid[i] >> (8 * j));
            c |= (uint16_t)((m == 8 ? 0 : m == 25 ? 1 : 2) << (2 * j));
        }
        grid_codes[i] = c;
        grid_code_bytes[i] = (uint8_t)c;
        grid_code_bytes[256 + i] = (uint8_t)(c >> 8);
    }
}

const uint16_t *qk_grid_codes(void)
{
    pthread_once(&codes_once, codes_init);
    return grid_codes;
}

const uint8_t *qk_grid_code_bytes(void)
{
    pthread_once(&codes_once, codes_init);
    return grid_code_bytes;
}

bool qk_supports(uint32_t type, int64_t n)
{
    return (type == GGML_TYPE_IQ2_XXS || type == GGML_TYPE_Q2_K) && n > 0 && n % QK_K == 0;
}

static const qk_kernels *kernels_of(qk_level level)
{
    return level == QK_AVX512VBMI ? &qk_kernels_avx512vbmi
           : level == QK_AVX512   ? &qk_kernels_avx512
           : level == QK_AVX2VNNI ? &qk_kernels_avx2vnni
           : level == QK_AVX2     ? &qk_kernels_avx2
                                  : NULL;
}

/* Prefill walks the rows in stretches of about STRETCH_BYTES and, for
 * each stretch, the tokens QK_TOKS at a time: a tile's four activations
 * (4 × n/256 blocks of 292 bytes, 19 KB at n = 4096) and the stretch's
 * rows stay in L1 while the stretch is multiplied. Row by row instead,
 * more than a few tokens' activations would be read from L2 for every
 * row group, which halves the speed. */
enum { STRETCH_BYTES = 16 << 10 };

static void tile_rows(qk_kernel fn, const uint8_t *w, size_t row_bytes, int64_t nb, int64_t r, int64_t r1,
                      bool fetch_next, int t0, int nt, const block_q8_K *const *act, float *const *y)
{
    int nr = r1 - r < QK_ROWS ? (int)(r1 - r) : QK_ROWS;
    const uint8_t *rows[QK_ROWS];
    /* a short group repeats its last row; the extra results are dropped */
    for (int i = 0; i < QK_ROWS; i++) rows[i] = w + (size_t)(r + (i < nr ? i : nr - 1)) * row_bytes;
    int64_t rn = r + QK_ROWS;
    const uint8_t *next = fetch_next && rn + QK_ROWS <= r1 ? w + (size_t)rn * row_bytes : NULL;
    float out[QK_ROWS][QK_TOKS];
    fn(rows, next, act + t0, nt, nb, out);
    for (int i = 0; i < nr; i++)
        for (int t = 0; t < nt; t++) y[t0 + t][r + i] = out[i][t];
}

/* From this many tokens on, a row group is decoded once into a panel and
 * multiplied from there (below it, the tiles' decoding per token group
 * costs less than the panel's transposition). */
enum { PANEL_MIN_TOKENS = 8 };

/* The panel walk; false (nothing written) when its buffer cannot be had. */
static bool panel_rows(qk_panel_fn pf, const uint8_t *w, size_t row_bytes, int64_t nb, int64_t r0, int64_t r1,
                       int T, const block_q8_K *const *act, float *const *y)
{
    qk_panel *panel = aligned_alloc(_Alignof(qk_panel), sizeof(qk_panel) * (size_t)nb);
    if (!panel) return false;
    for (int64_t r = r0; r < r1; r += QK_PANEL_ROWS) {
        int nr = r1 - r < QK_PANEL_ROWS ? (int)(r1 - r) : QK_PANEL_ROWS;
        pf(w, row_bytes, nb, r, nr, panel, T, act, y);
    }
    free(panel);
    return true;
}

void qk_rows(qk_level level, uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n, int64_t r0, int64_t r1,
             int T, const block_q8_K *const *act, float *const *y)
{
    qk_rows_with(kernels_of(level), type, w, row_bytes, n, r0, r1, T, act, y);
}

void qk_rows_with(const qk_kernels *k, uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n, int64_t r0,
                  int64_t r1, int T, const block_q8_K *const *act, float *const *y)
{
    qk_kernel fn = !k ? NULL : type == GGML_TYPE_IQ2_XXS ? k->iq2_xxs : type == GGML_TYPE_Q2_K ? k->q2_K : NULL;
    if (!fn) {
        for (int t = 0; t < T; t++)
            for (int64_t r = r0; r < r1; r++) y[t][r] = quant_dot_act(type, w + (size_t)r * row_bytes, act[t], n);
        return;
    }
    int64_t nb = n / QK_K;
    qk_panel_fn pf = type == GGML_TYPE_IQ2_XXS ? k->iq2_panel : k->q2k_panel;
    if (pf && T >= PANEL_MIN_TOKENS && panel_rows(pf, w, row_bytes, nb, r0, r1, T, act, y)) return;
    if (T <= QK_TOKS) {
        for (int64_t r = r0; r < r1; r += QK_ROWS) tile_rows(fn, w, row_bytes, nb, r, r1, true, 0, T, act, y);
        return;
    }
    int64_t stretch = (int64_t)(STRETCH_BYTES / row_bytes) & ~(int64_t)(QK_ROWS - 1);
    if (stretch < QK_ROWS) stretch = QK_ROWS;
    for (int64_t s0 = r0; s0 < r1; s0 += stretch) {
        int64_t s1 = r1 - s0 < stretch ? r1 : s0 + stretch;
        for (int t0 = 0; t0 < T; t0 += QK_TOKS) {
            int nt = T - t0 < QK_TOKS ? T - t0 : QK_TOKS;
            /* the next rows are fetched during the first token pass only */
            for (int64_t r = s0; r < s1; r += QK_ROWS) tile_rows(fn, w, row_bytes, nb, r, s1, t0 == 0, t0, nt, act, y);
        }
    }
}
