/* mkmodel.c — DS4-layout GGUF fixtures: the tensor plan for a shape, the
 * metadata of the published files, and streamed random weights. */
#include "engine/testkit/mkmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf_write.h"
#include "engine/quant.h"

/* ---- presets ----------------------------------------------------------------- */

void mk_ratio_schedule(mk_spec *s)
{
    for (int l = 0; l < MK_MAX_LAYERS; l++) s->ratios[l] = l < 2 ? 0 : (l % 2 == 0 ? 4 : 128);
}

void mk_spec_tiny(mk_spec *s)
{
    memset(s, 0, sizeof *s);
    s->n_layer = 6;
    s->n_embd = 256;
    s->n_head = 8;
    s->head_dim = 512;
    s->n_rot = 64;
    s->q_lora = 256;
    s->o_lora = 128;
    s->n_out_group = 4;
    s->n_expert = 16;
    s->n_expert_used = 6;
    s->n_ff_exp = 256;
    s->n_hash_layer = 3;
    s->n_swa = 16;
    s->n_indexer_head = 4;
    s->indexer_head_dim = 128;
    s->indexer_top_k = 8;
    s->n_hc = 4;
    s->hc_sinkhorn_iters = 20;
    mk_ratio_schedule(s);
    mk_set_quant(s, "q2");
    s->seed = 1;
    s->vocab = MK_VOCAB_TINY;
    s->name = "ds4cl-tiny";
}

void mk_spec_flash_width_small(mk_spec *s)
{
    mk_spec_flash_width(s, 3);
    static const int ratios[] = { 0, 4, 128 };
    memcpy(s->ratios, ratios, sizeof ratios);
    s->n_expert = 16;
    s->n_hash_layer = 1;
    s->indexer_top_k = 16;
    s->vocab = MK_VOCAB_TINY;
    s->seed = 2;
}

void mk_spec_flash_width(mk_spec *s, int n_layer)
{
    mk_spec_tiny(s);
    s->n_layer = n_layer;
    s->n_embd = 4096;
    s->n_head = 64;
    s->head_dim = 512;
    s->n_rot = 64;
    s->q_lora = 1024;
    s->o_lora = 1024;
    s->n_out_group = 8;
    s->n_expert = 256;
    s->n_expert_used = 6;
    s->n_ff_exp = 2048;
    s->n_hash_layer = n_layer < 3 ? n_layer : 3;
    s->n_swa = 128;
    s->n_indexer_head = 64;
    s->indexer_head_dim = 128;
    s->indexer_top_k = 512;
    s->vocab = MK_VOCAB_JSON;
    s->name = "ds4cl-flash-width";
}

int mk_set_quant(mk_spec *s, const char *q)
{
    if (!strcmp(q, "q2")) {
        s->gate_type = s->up_type = GGML_TYPE_IQ2_XXS;
        s->down_type = GGML_TYPE_Q2_K;
        return 0;
    }
    if (!strcmp(q, "q4")) {
        s->gate_type = s->up_type = s->down_type = GGML_TYPE_Q4_K;
        return 0;
    }
    return -1;
}

int mk_validate(const mk_spec *s, ds4_error *err)
{
    if (s->n_layer < 1 || s->n_layer > MK_MAX_LAYERS)
        return ds4_error_set(err, "layers must be 1..%d, not %d", MK_MAX_LAYERS, s->n_layer);
    struct { const char *what; int v, lo; } pos[] = {
        { "embd", s->n_embd, 256 },          { "heads", s->n_head, 1 },
        { "head-dim", s->head_dim, 2 },       { "rope-dim", s->n_rot, 2 },
        { "q-lora", s->q_lora, 32 },          { "o-lora", s->o_lora, 1 },
        { "out-groups", s->n_out_group, 1 },  { "experts", s->n_expert, 1 },
        { "experts-used", s->n_expert_used, 1 }, { "expert-ff", s->n_ff_exp, 256 },
        { "hash-layers", s->n_hash_layer, 0 }, { "swa", s->n_swa, 1 },
        { "indexer-heads", s->n_indexer_head, 1 }, { "indexer-dim", s->indexer_head_dim, 2 },
        { "indexer-top-k", s->indexer_top_k, 1 }, { "hc", s->n_hc, 1 },
        { "sinkhorn-iters", s->hc_sinkhorn_iters, 1 },
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < pos[i].lo || pos[i].v > (1 << 24))
            return ds4_error_set(err, "--%s %d is out of range (at least %d)", pos[i].what, pos[i].v, pos[i].lo);
    if (s->n_embd % 256) return ds4_error_set(err, "--embd %d must be a multiple of 256 (expert blocks)", s->n_embd);
    if (s->n_ff_exp % 256) return ds4_error_set(err, "--expert-ff %d must be a multiple of 256", s->n_ff_exp);
    if (s->q_lora % 32) return ds4_error_set(err, "--q-lora %d must be a multiple of 32 (Q8_0 rows)", s->q_lora);
    if (s->n_head % s->n_out_group)
        return ds4_error_set(err, "--heads %d must be a multiple of --out-groups %d", s->n_head, s->n_out_group);
    if ((s->n_head / s->n_out_group) * s->head_dim % 32 || (s->n_out_group * s->o_lora) % 32)
        return ds4_error_set(err, "grouped output widths must be multiples of 32 (Q8_0 rows)");
    if (s->n_rot % 2 || s->n_rot > s->head_dim) return ds4_error_set(err, "--rope-dim must be even and ≤ --head-dim");
    if (s->n_expert_used > s->n_expert) return ds4_error_set(err, "--experts-used exceeds --experts");
    if (s->n_hash_layer > s->n_layer) return ds4_error_set(err, "--hash-layers exceeds --layers");
    for (int l = 0; l < s->n_layer; l++) {
        if (s->ratios[l] < 0 || s->ratios[l] > (1 << 20))
            return ds4_error_set(err, "compress ratio %d of layer %d is out of range", s->ratios[l], l);
        if (s->ratios[l] == 4 && s->n_rot > s->indexer_head_dim)
            return ds4_error_set(err, "--rope-dim exceeds --indexer-dim on a ratio-4 layer");
    }
    const uint32_t et[3] = { s->gate_type, s->up_type, s->down_type };
    for (int i = 0; i < 3; i++)
        if (!quant_type(et[i]) || !quant_type(et[i])->storable || quant_type(et[i])->block_elems > 256)
            return ds4_error_set(err, "unsupported expert type %u", et[i]);
    if (s->vocab == MK_VOCAB_JSON && !s->vocab_path) return ds4_error_set(err, "no tokenizer.json given");
    return 0;
}

/* ---- random numbers ------------------------------------------------------------ */

typedef struct {
    uint64_t s[4];
} rng;

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed, const char *stream)
{
    uint64_t x = seed;
    for (const char *p = stream; *p; p++) x = (x ^ (uint8_t)*p) * 1099511628211ull;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rnext(rng *r) /* xoshiro256** */
{
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static inline float runif(rng *r) { return (float)(rnext(r) >> 40) * (1.0f / 16777216.0f); }

/* Approximately N(0,1): Irwin–Hall sum of four 16-bit uniforms, rescaled. */
static inline float rgauss(rng *r)
{
    uint64_t v = rnext(r);
    float s = (float)((v & 0xffff) + ((v >> 16) & 0xffff) + ((v >> 32) & 0xffff) + (v >> 48));
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* ---- the tensor plan ------------------------------------------------------------ */

typedef enum {
    G_DENSE,   /* N(0, (c/√in)²) per element; hot rows scaled up */
    G_NORMAL,  /* N(a, b²) */
    G_UNIFORM, /* U(a, b) */
    G_TID2EID, /* distinct expert ids per token */
    G_ROUTER_BIAS, /* U(a, b) − skew·ln(1 + rank) for a random ranking of the experts */
} gen_kind;

typedef struct {
    char name[GGUF_MAX_NAME];
    uint32_t type, n_dims;
    uint64_t ne[3];
    gen_kind gen;
    float a, b;
    bool hot_rows; /* a few rows ×8: gate/up outputs that reach the SwiGLU clamp */
} plan_t;

typedef struct {
    plan_t *t;
    size_t n, cap;
} plan;

static plan_t *add(plan *p, uint32_t type, gen_kind g, float a, float b, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                   uint64_t ne2, const char *fmt, int layer)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        plan_t *t = realloc(p->t, cap * sizeof *t);
        if (!t) return NULL;
        p->t = t;
        p->cap = cap;
    }
    plan_t *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->type = type;
    t->gen = g;
    t->a = a;
    t->b = b;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    return t;
}

#define F32 GGML_TYPE_F32
#define F16 GGML_TYPE_F16
#define Q8 GGML_TYPE_Q8_0
#define M(type, c, ne0, ne1, fmt) add(p, type, G_DENSE, c, 0, 2, ne0, ne1, 1, fmt, l)
#define V(type, g, a, b, ne0, fmt) add(p, type, g, a, b, 1, ne0, 1, 1, fmt, l)

/* Tensor order and roles follow the published files (golden A's order);
 * the scale constants mirror golden A's weight statistics. */
static int build_plan(const mk_spec *s, int64_t n_vocab, plan *pl)
{
    plan *p = pl;
    int l = 0;
    const uint64_t D = (uint64_t)s->n_embd, hd = (uint64_t)s->head_dim, hc_dim = (uint64_t)s->n_hc * D;
    const uint64_t mix = (uint64_t)(2 * s->n_hc + s->n_hc * s->n_hc), E = (uint64_t)s->n_expert;
    const uint64_t F = (uint64_t)s->n_ff_exp, G = (uint64_t)s->n_out_group;
    const uint64_t group_dim = (uint64_t)(s->n_head / s->n_out_group) * hd;
    bool ok = add(p, F16, G_NORMAL, 0, 1, 2, D, (uint64_t)n_vocab, 1, "token_embd.weight", 0) != NULL;
    for (l = 0; ok && l < s->n_layer; l++) {
        int R = s->ratios[l];
        ok = M(F16, 1.0f, hc_dim, mix, "blk.%d.hc_attn_fn.weight") &&
             V(F32, G_UNIFORM, 0.3f, 0.8f, 3, "blk.%d.hc_attn_scale.weight") &&
             V(F32, G_NORMAL, 0.3f, 0.9f, mix, "blk.%d.hc_attn_base.weight") &&
             V(F32, G_UNIFORM, 0.7f, 1.3f, D, "blk.%d.attn_norm.weight") &&
             M(Q8, 1.0f, D, (uint64_t)s->q_lora, "blk.%d.attn_q_a.weight") &&
             V(F32, G_UNIFORM, 0.7f, 1.3f, (uint64_t)s->q_lora, "blk.%d.attn_q_a_norm.weight") &&
             M(Q8, 1.0f, (uint64_t)s->q_lora, (uint64_t)s->n_head * hd, "blk.%d.attn_q_b.weight") &&
             M(Q8, 1.0f, D, hd, "blk.%d.attn_kv.weight") &&
             V(F32, G_UNIFORM, 0.9f, 2.1f, hd, "blk.%d.attn_kv_a_norm.weight") &&
             V(F32, G_NORMAL, 0.0f, 1.2f, (uint64_t)s->n_head, "blk.%d.attn_sinks.weight") &&
             M(Q8, 1.0f, group_dim, G * (uint64_t)s->o_lora, "blk.%d.attn_output_a.weight") &&
             M(Q8, 1.5f, G * (uint64_t)s->o_lora, D, "blk.%d.attn_output_b.weight");
        if (ok && R) {
            uint64_t W = (uint64_t)(R == 4 ? 2 : 1) * hd;
            ok = add(p, F16, G_NORMAL, 0, 0.5f, 2, W, (uint64_t)R, 1, "blk.%d.attn_compressor_ape.weight", l) &&
                 M(F16, 1.0f, D, W, "blk.%d.attn_compressor_kv.weight") &&
                 M(F16, 2.0f, D, W, "blk.%d.attn_compressor_gate.weight") &&
                 V(F32, G_UNIFORM, 0.65f, 1.35f, hd, "blk.%d.attn_compressor_norm.weight");
        }
        if (ok && R == 4) {
            uint64_t id = (uint64_t)s->indexer_head_dim, ih = (uint64_t)s->n_indexer_head;
            ok = M(F16, 1.0f, (uint64_t)s->q_lora, ih * id, "blk.%d.indexer.attn_q_b.weight") &&
                 M(F16, 1.0f, D, ih, "blk.%d.indexer.proj.weight") &&
                 add(p, F16, G_NORMAL, 0, 0.5f, 2, 2 * id, 4, 1, "blk.%d.indexer_compressor_ape.weight", l) &&
                 M(F16, 1.0f, D, 2 * id, "blk.%d.indexer_compressor_kv.weight") &&
                 M(F16, 2.0f, D, 2 * id, "blk.%d.indexer_compressor_gate.weight") &&
                 V(F32, G_UNIFORM, 0.65f, 1.35f, id, "blk.%d.indexer_compressor_norm.weight");
        }
        bool hash = l < s->n_hash_layer;
        ok = ok && M(F16, 1.0f, hc_dim, mix, "blk.%d.hc_ffn_fn.weight") &&
             V(F32, G_UNIFORM, 0.3f, 0.8f, 3, "blk.%d.hc_ffn_scale.weight") &&
             V(F32, G_NORMAL, 0.3f, 0.9f, mix, "blk.%d.hc_ffn_base.weight") &&
             V(F32, G_UNIFORM, 0.7f, 1.3f, D, "blk.%d.ffn_norm.weight") &&
             M(F16, 2.0f, D, E, "blk.%d.ffn_gate_inp.weight");
        if (ok && !hash)
            ok = V(F32, s->router_skew > 0 ? G_ROUTER_BIAS : G_UNIFORM, -0.35f, 0.65f, E, "blk.%d.exp_probs_b.bias") != NULL;
        plan_t *t;
        ok = ok && (t = add(p, s->gate_type, G_DENSE, 1.0f, 0, 3, D, F, E, "blk.%d.ffn_gate_exps.weight", l)) &&
             (t->hot_rows = true) && (t = add(p, s->up_type, G_DENSE, 1.0f, 0, 3, D, F, E, "blk.%d.ffn_up_exps.weight", l)) &&
             (t->hot_rows = true) && add(p, s->down_type, G_DENSE, 1.07f, 0, 3, F, D, E, "blk.%d.ffn_down_exps.weight", l) &&
             (t = M(Q8, 1.0f, D, F, "blk.%d.ffn_gate_shexp.weight")) && (t->hot_rows = true) &&
             (t = M(Q8, 1.0f, D, F, "blk.%d.ffn_up_shexp.weight")) && (t->hot_rows = true) &&
             M(Q8, 1.0f, F, D, "blk.%d.ffn_down_shexp.weight");
        if (ok && hash)
            ok = add(p, GGML_TYPE_I32, G_TID2EID, 0, 0, 2, (uint64_t)s->n_expert_used, (uint64_t)n_vocab, 1,
                     "blk.%d.ffn_gate_tid2eid.weight", l) != NULL;
    }
    l = 0;
    ok = ok && V(F32, G_UNIFORM, -1.0f, 0.27f, (uint64_t)s->n_hc, "output_hc_base.weight") &&
         M(F16, 1.0f, hc_dim, (uint64_t)s->n_hc, "output_hc_fn.weight") &&
         V(F32, G_UNIFORM, 0.5f, 0.5f, 1, "output_hc_scale.weight") &&
         V(F32, G_UNIFORM, 0.7f, 1.3f, D, "output_norm.weight") &&
         M(Q8, 2.5f, D, (uint64_t)n_vocab, "output.weight");
    if (ok && s->experts_last) {
        /* stable: the routed experts after everything else, in their order */
        plan_t *tmp = malloc(p->n * sizeof *tmp);
        if (!tmp) return -1;
        size_t n = 0;
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < p->n; i++)
                if ((strstr(p->t[i].name, "_exps.") != NULL) == (pass == 1)) tmp[n++] = p->t[i];
        memcpy(p->t, tmp, p->n * sizeof *tmp);
        free(tmp);
    }
    return ok ? 0 : -1;
}

/* ---- weight generation ------------------------------------------------------------ */

/* Hot rows: a deterministic 1/128 of the rows, scaled ×8: with unit-RMS
 * inputs their outputs have σ ≈ 8, so about a fifth of them pass the
 * SwiGLU clamp of 10 while the tensor RMS grows only ~20%. */
static float row_scale(const plan_t *t, uint64_t row)
{
    if (!t->hot_rows) return 1.0f;
    uint64_t h = row * 0x9e3779b97f4a7c15ull;
    return (h >> 57) == 0 ? 8.0f : 1.0f;
}

/* Random quant blocks with the RMS of N(0, std²), without building f32:
 * random codes, scales chosen so d·E[code²]^½ matches (see the formulas). */
static void random_blocks(rng *r, uint32_t type, uint8_t *out, uint64_t nblocks, float std)
{
    for (uint64_t b = 0; b < nblocks; b++) {
        if (type == GGML_TYPE_IQ2_XXS) {
            block_iq2_xxs *blk = (block_iq2_xxs *)out + b;
            uint64_t words[8];
            for (int i = 0; i < 8; i++) words[i] = rnext(r);
            memcpy(blk->qs, words, sizeof blk->qs);
            /* rms of grid magnitudes 23.1 × rms of (2·ls+1)/8 over ls 0..15 2.31 */
            uint16_t d = quant_f32_to_f16(std / 53.4f);
            memcpy(&blk->d, &d, 2);
        } else if (type == GGML_TYPE_Q2_K) {
            block_q2_K *blk = (block_q2_K *)out + b;
            uint64_t words[8];
            for (int i = 0; i < 8; i++) words[i] = rnext(r);
            memcpy(blk->qs, words, sizeof blk->qs);
            uint64_t v = rnext(r);
            for (int t = 0; t < 16; t++) {
                uint8_t sc = (uint8_t)(1 + ((v >> (4 * t)) & 15) % 15);
                blk->scales[t] = (uint8_t)(sc | sc << 4); /* min = scale: zero-mean codes */
            }
            /* x = d·sc·(q − 1.5): rms = d·(E[sc²]·1.25)^½ = 10.17·d */
            uint16_t d = quant_f32_to_f16(std / 10.17f), dm = quant_f32_to_f16(1.5f * quant_f16_to_f32(d));
            memcpy(&blk->d, &d, 2);
            memcpy(&blk->dmin, &dm, 2);
        } else if (type == GGML_TYPE_Q4_K) {
            block_q4_K *blk = (block_q4_K *)out + b;
            uint64_t words[16];
            for (int i = 0; i < 16; i++) words[i] = rnext(r);
            memcpy(blk->qs, words, sizeof blk->qs);
            uint8_t sc[8];
            uint64_t v = rnext(r);
            for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(1 + ((v >> (6 * j)) & 63) % 63);
            for (int j = 0; j < 4; j++) {
                blk->scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
                blk->scales[j + 4] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
                blk->scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (sc[j + 4] & 15) << 4);
            }
            /* x = d·sc·(q − 7.5): rms = d·(E[sc²]·21.25)^½ = 169.7·d */
            uint16_t d = quant_f32_to_f16(std / 169.7f), dm = quant_f32_to_f16(7.5f * quant_f16_to_f32(d));
            memcpy(&blk->d, &d, 2);
            memcpy(&blk->dmin, &dm, 2);
        }
    }
}

static bool is_block_random(uint32_t type)
{
    return type == GGML_TYPE_IQ2_XXS || type == GGML_TYPE_Q2_K || type == GGML_TYPE_Q4_K;
}

typedef struct {
    gguf_writer *w;
    mk_progress_fn progress;
    void *ud;
    uint64_t done, total;
    double last;
} sink;

static int emit(sink *k, const void *data, size_t n, ds4_error *err)
{
    if (gguf_writer_write(k->w, data, n, err)) return -1;
    k->done += n;
    if (k->progress && k->total) {
        double f = (double)k->done / (double)k->total;
        if (f - k->last >= 0.01 || k->done == k->total) {
            k->progress(k->ud, f);
            k->last = f;
        }
    }
    return 0;
}

/* A random ranking of the n experts (perm[rank] = expert). */
static void shuffle(rng *r, int32_t *perm, int n)
{
    for (int e = 0; e < n; e++) perm[e] = e;
    for (int j = 0; j + 1 < n; j++) {
        int pick = j + (int)(rnext(r) % (uint64_t)(n - j));
        int32_t tmp = perm[j];
        perm[j] = perm[pick];
        perm[pick] = tmp;
    }
}

/* k distinct experts drawn with weights (1 + rank)^−skew over a random
 * ranking (cdf: n cumulative weights, filled once per tensor). */
static void zipf_pick(rng *r, const int32_t *rank_of, const double *cdf, int n, int k, float *out)
{
    for (int j = 0; j < k; j++) {
        for (;;) {
            double u = runif(r) * cdf[n - 1];
            int lo = 0, hi = n - 1;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (cdf[mid] < u) lo = mid + 1;
                else hi = mid;
            }
            float e = (float)rank_of[lo];
            bool dup = false;
            for (int i = 0; i < j; i++) dup |= out[i] == e;
            if (!dup) {
                out[j] = e;
                break;
            }
        }
    }
}

static int gen_tensor(const mk_spec *s, const plan_t *t, sink *k, ds4_error *err)
{
    rng r;
    rng_seed(&r, s->seed, t->name);
    uint64_t in = t->ne[0], rows = t->ne[1] * t->ne[2];
    uint64_t rb = quant_row_bytes(t->type, in);
    uint64_t chunk_rows = (4u << 20) / (rb ? rb : 1);
    if (chunk_rows < 1) chunk_rows = 1;
    if (chunk_rows > rows) chunk_rows = rows;
    uint8_t *buf = malloc((size_t)(chunk_rows * rb));
    float *row = malloc((size_t)in * sizeof *row);
    int32_t *perm = t->gen == G_TID2EID ? malloc((size_t)s->n_expert * sizeof *perm) : NULL;
    if (!buf || !row || (t->gen == G_TID2EID && !perm)) {
        free(buf);
        free(row);
        free(perm);
        return ds4_error_set(err, "out of memory");
    }
    int rc = 0;
    float std = t->gen == G_DENSE ? t->a / sqrtf((float)in) : 0.0f;
    /* a skewed router: one random ranking of the experts per tensor */
    int32_t ranking[4096];
    double cdf[4096];
    bool skew = s->router_skew > 0 && (t->gen == G_ROUTER_BIAS || t->gen == G_TID2EID) && s->n_expert <= 4096;
    if (skew) {
        shuffle(&r, ranking, s->n_expert);
        for (int i = 0; i < s->n_expert; i++) cdf[i] = (i ? cdf[i - 1] : 0) + pow(1.0 + i, -s->router_skew);
    }
    for (uint64_t r0 = 0; r0 < rows && !rc; r0 += chunk_rows) {
        uint64_t nr = rows - r0 < chunk_rows ? rows - r0 : chunk_rows;
        for (uint64_t i = 0; i < nr; i++) {
            uint8_t *dst = buf + i * rb;
            uint64_t row_i = r0 + i;
            if (is_block_random(t->type) && t->gen == G_DENSE) {
                random_blocks(&r, t->type, dst, rb / quant_type(t->type)->block_bytes, std * row_scale(t, row_i));
                continue;
            }
            if (t->gen == G_TID2EID && skew) {
                zipf_pick(&r, ranking, cdf, s->n_expert, (int)in, row);
            } else if (t->gen == G_TID2EID) {
                for (int e = 0; e < s->n_expert; e++) perm[e] = e;
                for (uint64_t j = 0; j < in; j++) {
                    uint64_t pick = j + rnext(&r) % ((uint64_t)s->n_expert - j);
                    int32_t tmp = perm[j];
                    perm[j] = perm[pick];
                    perm[pick] = tmp;
                    row[j] = (float)perm[j];
                }
            } else {
                float rs = row_scale(t, row_i);
                for (uint64_t j = 0; j < in; j++) {
                    switch (t->gen) {
                    case G_DENSE: row[j] = rgauss(&r) * std * rs; break;
                    case G_NORMAL: row[j] = t->a + t->b * rgauss(&r); break;
                    case G_UNIFORM: row[j] = t->a + (t->b - t->a) * runif(&r); break;
                    case G_ROUTER_BIAS: row[j] = t->a + (t->b - t->a) * runif(&r); break;
                    default: break;
                    }
                }
                /* the bias falls with the rank as a Zipf weight's logarithm does */
                for (int i = 0; skew && t->gen == G_ROUTER_BIAS && i < s->n_expert; i++)
                    row[ranking[i]] -= (float)(s->router_skew * 0.5 * log(1.0 + i));
            }
            quant_quantize_row(t->type, row, (int64_t)in, dst);
        }
        rc = emit(k, buf, (size_t)(nr * rb), err);
    }
    free(buf);
    free(row);
    free(perm);
    return rc;
}

/* ---- metadata ------------------------------------------------------------------------ */

static void write_metadata(gguf_writer *w, const mk_spec *s, const mk_vocab *v)
{
    char label[64];
    snprintf(label, sizeof label, "%dx%dL", s->n_expert, s->n_layer);
    gguf_writer_str(w, "general.architecture", "deepseek4");
    gguf_writer_str(w, "general.name", s->name ? s->name : "ds4cl-fixture");
    gguf_writer_u32(w, "general.alignment", 32);
    gguf_writer_u32(w, "general.quantization_version", 2);
    gguf_writer_str(w, "general.size_label", label);
    gguf_writer_u32(w, "deepseek4.block_count", (uint32_t)s->n_layer);
    gguf_writer_u32(w, "deepseek4.context_length", 1048576);
    gguf_writer_u32(w, "deepseek4.embedding_length", (uint32_t)s->n_embd);
    gguf_writer_u32(w, "deepseek4.vocab_size", (uint32_t)v->n);
    gguf_writer_u32(w, "deepseek4.attention.head_count", (uint32_t)s->n_head);
    gguf_writer_u32(w, "deepseek4.attention.head_count_kv", 1);
    gguf_writer_u32(w, "deepseek4.attention.key_length", (uint32_t)s->head_dim);
    gguf_writer_u32(w, "deepseek4.attention.value_length", (uint32_t)s->head_dim);
    gguf_writer_u32(w, "deepseek4.rope.dimension_count", (uint32_t)s->n_rot);
    gguf_writer_u32(w, "deepseek4.attention.q_lora_rank", (uint32_t)s->q_lora);
    gguf_writer_u32(w, "deepseek4.attention.output_lora_rank", (uint32_t)s->o_lora);
    gguf_writer_u32(w, "deepseek4.attention.output_group_count", (uint32_t)s->n_out_group);
    gguf_writer_u32(w, "deepseek4.expert_count", (uint32_t)s->n_expert);
    gguf_writer_u32(w, "deepseek4.expert_used_count", (uint32_t)s->n_expert_used);
    gguf_writer_u32(w, "deepseek4.expert_feed_forward_length", (uint32_t)s->n_ff_exp);
    gguf_writer_u32(w, "deepseek4.expert_shared_count", 1);
    gguf_writer_u32(w, "deepseek4.hash_layer_count", (uint32_t)s->n_hash_layer);
    gguf_writer_u32(w, "deepseek4.expert_group_count", 0);
    gguf_writer_u32(w, "deepseek4.expert_group_used_count", 0);
    gguf_writer_f32(w, "deepseek4.expert_weights_scale", 1.5f);
    gguf_writer_bool(w, "deepseek4.expert_weights_norm", true);
    gguf_writer_u32(w, "deepseek4.expert_gating_func", 4);
    gguf_writer_u32(w, "deepseek4.attention.sliding_window", (uint32_t)s->n_swa);
    gguf_writer_u32(w, "deepseek4.attention.indexer.head_count", (uint32_t)s->n_indexer_head);
    gguf_writer_u32(w, "deepseek4.attention.indexer.key_length", (uint32_t)s->indexer_head_dim);
    gguf_writer_u32(w, "deepseek4.attention.indexer.top_k", (uint32_t)s->indexer_top_k);
    int32_t ratios[MK_MAX_LAYERS + 1];
    float clamp[MK_MAX_LAYERS];
    for (int l = 0; l < s->n_layer; l++) {
        ratios[l] = s->ratios[l];
        clamp[l] = 10.0f;
    }
    ratios[s->n_layer] = 0; /* the MTP slot, as in the published files */
    gguf_writer_array(w, "deepseek4.attention.compress_ratios", GGUF_TYPE_INT32, ratios, (uint64_t)s->n_layer + 1);
    gguf_writer_f32(w, "deepseek4.attention.compress_rope_freq_base", 160000.0f);
    gguf_writer_f32(w, "deepseek4.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_writer_u32(w, "deepseek4.hyper_connection.count", (uint32_t)s->n_hc);
    gguf_writer_u32(w, "deepseek4.hyper_connection.sinkhorn_iterations", (uint32_t)s->hc_sinkhorn_iters);
    gguf_writer_f32(w, "deepseek4.hyper_connection.epsilon", 1e-6f);
    gguf_writer_array(w, "deepseek4.swiglu_clamp_exp", GGUF_TYPE_FLOAT32, clamp, (uint64_t)s->n_layer);
    gguf_writer_f32(w, "deepseek4.rope.freq_base", 10000.0f);
    gguf_writer_str(w, "deepseek4.rope.scaling.type", "yarn");
    gguf_writer_f32(w, "deepseek4.rope.scaling.factor", 16.0f);
    gguf_writer_u32(w, "deepseek4.rope.scaling.original_context_length", 65536);
    gguf_writer_f32(w, "deepseek4.rope.scaling.yarn_beta_fast", 32.0f);
    gguf_writer_f32(w, "deepseek4.rope.scaling.yarn_beta_slow", 1.0f);
    gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_str(w, "tokenizer.ggml.pre", "joyai-llm");
    gguf_writer_str_array(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->lens, v->n);
    gguf_writer_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, v->n);
    gguf_writer_str_array(w, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL, v->n_merges);
    gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    gguf_writer_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->eos);
    gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_writer_bool(w, "tokenizer.ggml.add_eos_token", false);
}

/* ---- writing ----------------------------------------------------------------------- */

static int write_model(const mk_spec *s, const char *path, void **buf, size_t *len, mk_progress_fn progress,
                       void *ud, ds4_error *err)
{
    if (mk_validate(s, err)) return -1;
    mk_vocab v;
    if ((s->vocab == MK_VOCAB_TINY ? mk_vocab_tiny(&v, err) : mk_vocab_from_json(&v, s->vocab_path, err)) != 0)
        return -1;
    plan p = { 0 };
    gguf_writer *w = gguf_writer_new(32);
    int rc = -1;
    if (!w || build_plan(s, (int64_t)v.n, &p)) {
        ds4_error_set(err, "out of memory");
        goto done;
    }
    write_metadata(w, s, &v);
    for (size_t i = 0; i < p.n; i++) {
        plan_t *t = &p.t[i];
        if (s->omit_tensor && !strcmp(s->omit_tensor, t->name)) continue;
        if (s->retype_tensor && !strcmp(s->retype_tensor, t->name)) t->type = s->retype_to;
        if (gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne, err)) goto done;
    }
    if ((path ? gguf_writer_open(w, path, err) : gguf_writer_open_memory(w, err)) != 0) goto done;
    sink k = { w, progress, ud, 0, 0, 0 };
    for (size_t i = 0; i < p.n; i++)
        if (!(s->omit_tensor && !strcmp(s->omit_tensor, p.t[i].name)))
            k.total += quant_row_bytes(p.t[i].type, p.t[i].ne[0]) * p.t[i].ne[1] * p.t[i].ne[2];
    for (size_t i = 0; i < p.n; i++) {
        if (s->omit_tensor && !strcmp(s->omit_tensor, p.t[i].name)) continue;
        if (gen_tensor(s, &p.t[i], &k, err)) goto done;
    }
    rc = gguf_writer_close(w, buf, len, err);
done:
    gguf_writer_free(w);
    free(p.t);
    mk_vocab_free(&v);
    return rc;
}

int mk_write_file(const mk_spec *s, const char *path, mk_progress_fn progress, void *ud, ds4_error *err)
{
    return write_model(s, path, NULL, NULL, progress, ud, err);
}

int mk_write_memory(const mk_spec *s, void **buf, size_t *len, ds4_error *err)
{
    return write_model(s, NULL, buf, len, NULL, NULL, err);
}
