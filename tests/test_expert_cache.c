/* test_expert_cache.c — routed experts read from the model file through a
 * bounded cache (engine/expert_cache.h) instead of the mapping: the logits
 * must be the resident run's to the bit at every position with a budget
 * so small that every layer of every token evicts; the hit and miss counts
 * must add up to the requests the routing made; the process must hold no
 * more than the non-routed weights of the mapping plus the budget; and a
 * file truncated mid-run must end the turn with an error naming the file
 * and the offset, leaving the session usable once the file is whole. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu/cpu_ops.h"
#include "engine/backend.h"
#include "engine/expert_cache.h"
#include "engine/expert_warm.h"
#include "engine/forward.h"
#include "engine/gguf.h"
#include "engine/testkit/mkmodel.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

static ds4_engine *open_with_cache(const char *path, uint64_t budget)
{
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = 2,
                             .quant_sim = DS4_QSIM_NONE, .expert_cache = budget };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "engine on %s (expert cache %llu): %s", path, (unsigned long long)budget, err.msg);
    return e;
}

/* Teacher-forced logits [n][n_vocab] of ids on the engine. */
static float *logits_of(ds4_engine *e, const ds4_tokens *ids, fwd_routing *routing)
{
    ds4_model_info info;
    ds4_engine_info(e, &info);
    float *out = test_alloc(ids->n * (size_t)info.n_vocab * 4);
    fwd_teacher_force(e, ids, out, routing);
    return out;
}

static void check_bit_identical(const float *a, const float *b, size_t n_pos, int n_vocab)
{
    for (size_t p = 0; p < n_pos; p++)
        CHECK_MSG(!memcmp(a + p * (size_t)n_vocab, b + p * (size_t)n_vocab, (size_t)n_vocab * 4),
                  "the logits at position %zu differ from the resident run's", p);
}

/* Distinct experts the routing asked of each layer, summed over positions:
 * what the cache must have counted as hits + misses. */
static uint64_t requests_of_layer(const fwd_routing *r, int layer)
{
    uint64_t n = 0;
    for (int p = 0; p < r->n_pos; p++) {
        const int32_t *x = r->experts + ((size_t)p * (size_t)r->n_layer + (size_t)layer) * (size_t)r->k;
        for (int i = 0; i < r->k; i++) n += i == 0 || x[i] != x[i - 1]; /* sorted */
    }
    return n;
}

static uint64_t expert_bytes_of_layer(const ds4_model *m, int l)
{
    const ds4_layer *L = &m->layers[l];
    return L->ffn_gate_exps.nbytes + L->ffn_up_exps.nbytes + L->ffn_down_exps.nbytes;
}

/* Runs ids resident and through a cache of `slots` slots; checks the bits
 * and the counts; returns the cache engine (open) for further checks. */
static ds4_engine *compare_runs(const char *path, const ds4_tokens *ids, int slots, bool all_miss)
{
    ds4_engine *ref = open_with_cache(path, 0);
    CHECK(expert_cache_of(ref) == NULL);
    float *want = logits_of(ref, ids, NULL);
    uint64_t slot = expert_cache_slot_bytes(ref->model);
    ds4_engine_close(ref);

    ds4_engine *e = open_with_cache(path, (uint64_t)slots * slot + slot / 2);
    const expert_cache *ec = expert_cache_of(e);
    CHECK(ec != NULL);
    CHECK_EQ_INT(expert_cache_slots(ec), slots);
    fwd_routing r;
    float *got = logits_of(e, ids, &r);
    check_bit_identical(want, got, ids->n, e->n_vocab);

    const ds4_hparams *hp = &e->model->hp;
    uint64_t all = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        expert_cache_counts c = expert_cache_layer(ec, l);
        uint64_t req = requests_of_layer(&r, l);
        CHECK_MSG(c.hits + c.misses == req, "layer %d: %llu hits + %llu misses, the routing made %llu requests", l,
                  (unsigned long long)c.hits, (unsigned long long)c.misses, (unsigned long long)req);
        if (all_miss) CHECK_MSG(c.hits == 0, "layer %d: %llu hits with a cache of one layer's experts", l,
                                (unsigned long long)c.hits);
        /* every miss read one whole expert */
        uint64_t per = expert_bytes_of_layer(e->model, l) / (uint64_t)hp->n_expert;
        CHECK_MSG(c.bytes_read == c.misses * per, "layer %d: %llu bytes read for %llu misses of %llu bytes", l,
                  (unsigned long long)c.bytes_read, (unsigned long long)c.misses, (unsigned long long)per);
        all += req;
    }
    expert_cache_info info;
    expert_cache_info_get(ec, &info);
    CHECK(info.total.hits + info.total.misses == all);
    if (!all_miss) CHECK_MSG(info.total.hits > 0, "no hits with %d slots", slots);
    return e;
}

TEST(expert_cache, golden_a_logits_are_bit_identical_when_every_layer_evicts)
{
    golden_set g;
    golden_load(&g, "A-f32-nosim", "prefix_logits.f32", false);
    const char *path = golden_model();
    /* n_expert_used slots: each layer's request evicts the previous layer's experts */
    ds4_engine *probe = open_with_cache(path, 0);
    int k = probe->model->hp.n_expert_used;
    ds4_engine_close(probe);
    ds4_engine_close(compare_runs(path, &g.all, k, true));
    golden_free(&g);
}

/* A fixture whose routed experts are most of the file: 64 experts of
 * 256 × 512 per layer. */
static const char *expert_fixture(double skew, const char *name)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_expert = 64;
    s.n_ff_exp = 512;
    s.experts_last = true;
    s.router_skew = skew;
    const char *path = test_tmp_path(name);
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "fixture: %s", err.msg);
    return path;
}

static const char *big_expert_fixture(void) { return expert_fixture(0, "experts.gguf"); }

TEST(expert_cache, generated_model_is_bit_identical_with_evictions_and_with_hits)
{
    const char *path = big_expert_fixture();
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 24, 311, 7);
    ds4_engine_close(compare_runs(path, &ids, 6, true));
    /* room for a fifth of the experts: hits, and evictions by popularity */
    ds4_engine_close(compare_runs(path, &ids, 6 * 64 / 5, false));
    ds4_tokens_free(&ids);
}

/* A prefill chunk asks for more experts than the cache holds: they go
 * through it in groups, with the same bits. */
TEST(expert_cache, a_prefill_chunk_larger_than_the_cache_keeps_the_bits)
{
    const char *path = big_expert_fixture();
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 80, 311, 11);
    ds4_engine *ref = open_with_cache(path, 0);
    int n_vocab = ref->n_vocab;
    uint64_t slot = expert_cache_slot_bytes(ref->model);
    float *want = test_alloc((size_t)n_vocab * 4), *got = test_alloc((size_t)n_vocab * 4);
    fwd_logits_after(ref, 128, 64, ids.ids, ids.n, want);
    ds4_engine_close(ref);
    ds4_engine *e = open_with_cache(path, 7 * slot);
    fwd_logits_after(e, 128, 64, ids.ids, ids.n, got);
    expert_cache_info info;
    expert_cache_info_get(expert_cache_of(e), &info);
    CHECK_EQ_INT(info.slots, 7);
    /* 64 tokens × 6 of 64 experts: nearly all of a layer's in one call */
    CHECK(info.total.misses > 6 * 40);
    check_bit_identical(want, got, 1, n_vocab);
    ds4_engine_close(e);
    ds4_tokens_free(&ids);
}

static double hit_rate_of(const char *path, int slots, const ds4_tokens *ids)
{
    ds4_engine *e = compare_runs(path, ids, slots, false);
    expert_cache_info info;
    expert_cache_info_get(expert_cache_of(e), &info);
    ds4_engine_close(e);
    return (double)info.total.hits / (double)(info.total.hits + info.total.misses);
}

/* With routing skewed toward a few experts (mkmodel --router-skew), a
 * quarter of the experts in the cache catches much more than with the
 * near-uniform routing of random weights: the popular ones stay. */
TEST(expert_cache, skewed_routing_hits_more_and_keeps_the_bits)
{
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 32, 311, 21);
    double flat = hit_rate_of(expert_fixture(0, "flat.gguf"), 6 * 64 / 4, &ids);
    double skew = hit_rate_of(expert_fixture(1.2, "skew.gguf"), 6 * 64 / 4, &ids);
    fprintf(stderr, "hit rate with a quarter of the experts: %.2f uniform, %.2f skewed\n", flat, skew);
    CHECK_MSG(skew > flat + 0.15, "skewed %.2f, uniform %.2f", skew, flat);
    ds4_tokens_free(&ids);
}

static ds4_engine *open_warm(const char *path, uint64_t budget, const char *stats)
{
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = 2,
                             .quant_sim = DS4_QSIM_NONE, .expert_cache = budget, .expert_stats = stats };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    return e;
}

static uint64_t hits_of(ds4_engine *e, const ds4_tokens *ids, float *out)
{
    fwd_teacher_force(e, ids, out, NULL);
    expert_cache_info info;
    expert_cache_info_get(expert_cache_of(e), &info);
    return info.total.hits;
}

/* A start after a run preloads the experts that run used most: the same
 * tokens then hit more from the first one on, with the same bits; a file
 * of another model is ignored. */
TEST(expert_cache, a_warm_start_preloads_the_popular_experts)
{
    const char *path = expert_fixture(1.2, "skew.gguf");
    const char *stats = test_tmp_path("pop/skew.pop");
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 16, 311, 4);
    ds4_engine *e = open_warm(path, 0, NULL);
    uint64_t budget = 96 * expert_cache_slot_bytes(e->model);
    size_t n = ids.n * (size_t)e->n_vocab;
    float *want = test_alloc(n * 4), *cold = test_alloc(n * 4), *warm = test_alloc(n * 4);
    fwd_teacher_force(e, &ids, want, NULL);
    ds4_engine_close(e);

    e = open_warm(path, budget, stats);
    uint64_t h_cold = hits_of(e, &ids, cold);
    ds4_engine_close(e); /* keeps the popularity */
    size_t len = 0;
    CHECK_MSG(test_read_file(stats, &len) != NULL && len > 28, "no popularity file at %s", stats);

    e = open_warm(path, budget, stats);
    expert_cache_info info;
    expert_cache_info_get(expert_cache_of(e), &info);
    CHECK_MSG(info.total.bytes_read > 0, "nothing preloaded");
    uint64_t h_warm = hits_of(e, &ids, warm);
    ds4_engine_close(e);
    fprintf(stderr, "hits: %llu cold, %llu warm\n", (unsigned long long)h_cold, (unsigned long long)h_warm);
    CHECK_MSG(h_warm > h_cold, "a warm start hit %llu times, a cold one %llu", (unsigned long long)h_warm,
              (unsigned long long)h_cold);
    check_bit_identical(want, cold, ids.n, (int)(n / ids.n));
    check_bit_identical(want, warm, ids.n, (int)(n / ids.n));

    /* another model's file: no preload, no error */
    e = open_warm(golden_model(), budget, stats);
    expert_cache_info_get(expert_cache_of(e), &info);
    CHECK_MSG(info.total.bytes_read == 0, "%llu bytes preloaded from another model's popularity",
              (unsigned long long)info.total.bytes_read);
    ds4_engine_close(e);
    ds4_tokens_free(&ids);
}

/* The hybrid placement's host experts (OpenCL, PoCL here) use the same CPU
 * code: through the cache, the same bits as through the mapping. */
TEST(expert_cache, hybrid_host_experts_through_the_cache_keep_the_bits)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    golden_set g;
    golden_load(&g, "A-f32-nosim", "prefix_logits.f32", false);
    ds4_tokens ids = { 0 };
    ds4_tokens_append(&ids, g.all.ids, 12);
    float *out[2];
    uint64_t hits_misses = 0;
    for (int with = 0; with < 2; with++) {
        ds4_engine *probe = open_with_cache(golden_model(), 0);
        uint64_t budget = with ? 6 * expert_cache_slot_bytes(probe->model) : 0;
        ds4_engine_close(probe);
        ds4_engine_options o = { .model_path = golden_model(), .backend = DS4_BACKEND_OPENCL, .threads = 2,
                                 .quant_sim = DS4_QSIM_NONE, .host_expert_layers = 6, .expert_cache = budget };
        ds4_error err = { "" };
        ds4_engine *e = ds4_engine_open(&o, &err);
        CHECK_MSG(e != NULL, "%s", err.msg);
        out[with] = logits_of(e, &ids, NULL);
        /* the cache is the host backend's (the CPU ops context the placement added) */
        const fwd_engine *f = e->impl;
        CHECK_EQ_INT(fwd_n_backends(f), 2);
        const expert_cache *ec = cpu_ops_expert_cache(fwd_backend_ctx(f, 1));
        CHECK(with ? ec != NULL : ec == NULL);
        if (ec) {
            expert_cache_info info;
            expert_cache_info_get(ec, &info);
            hits_misses = info.total.hits + info.total.misses;
        }
        ds4_engine_close(e);
    }
    CHECK_MSG(hits_misses >= ids.n * 6, "%llu requests through the cache", (unsigned long long)hits_misses);
    check_bit_identical(out[0], out[1], ids.n, g.n_vocab);
    ds4_tokens_free(&ids);
    golden_free(&g);
}

/* Flash's widths (4096 wide, experts of 2048), a few layers and experts. */
TEST(expert_cache, flash_width_logits_are_bit_identical_when_every_layer_evicts)
{
    mk_spec s;
    mk_spec_flash_width_small(&s);
    const char *path = test_tmp_path("flash.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "fixture: %s", err.msg);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 6, 311, 9);
    ds4_engine_close(compare_runs(path, &ids, 6, true));
    ds4_tokens_free(&ids);
}

/* Resident bytes of the process's mapping of path (/proc/self/smaps). */
static uint64_t mapping_rss(const char *path)
{
    char real[4096];
    CHECK(realpath(path, real) != NULL);
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[8192];
    bool in = false, found = false;
    uint64_t rss = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        unsigned long long kb;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's header line */
            char *name = strchr(line, '/');
            if (name) name[strcspn(name, "\n")] = 0;
            in = name && !strcmp(name, real);
            found |= in;
        } else if (in && sscanf(line, "Rss: %llu kB", &kb) == 1) {
            rss += kb * 1024;
        }
    }
    fclose(f);
    CHECK_MSG(found, "no mapping of %s in /proc/self/smaps", real);
    return rss;
}

/* Bytes of [off, end) of path that are in the page cache. */
static uint64_t page_cached(const char *path, uint64_t off, uint64_t end)
{
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    void *map = mmap(NULL, (size_t)end, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(map != MAP_FAILED);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), first = (off + page - 1) / page, n = end / page;
    unsigned char *vec = test_alloc((size_t)n + 1);
    CHECK(mincore(map, (size_t)end, vec) == 0);
    uint64_t bytes = 0;
    for (uint64_t i = first; i < n; i++) bytes += (vec[i] & 1) ? page : 0;
    munmap(map, (size_t)end);
    return bytes;
}

static void check_within_budget(const char *path, bool buffered)
{
    if (buffered) setenv("DS4CL_EXPERT_CACHE_BUFFERED", "1", 1);
    /* nothing of the file in the page cache to begin with */
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);

    ds4_engine *e = open_with_cache(path, 0);
    uint64_t slot = expert_cache_slot_bytes(e->model), experts = expert_cache_expert_bytes(e->model);
    ds4_engine_close(e);
    uint64_t budget = 12 * slot, size = (uint64_t)st.st_size, rest = size - experts;
    CHECK_MSG(experts > 4 * budget, "the fixture's experts (%llu bytes) must dwarf the budget (%llu)",
              (unsigned long long)experts, (unsigned long long)budget);

    e = open_with_cache(path, budget);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 16, 311, 3);
    logits_of(e, &ids, NULL);
    uint64_t rss = mapping_rss(path);
    expert_cache_info info;
    expert_cache_info_get(expert_cache_of(e), &info);
    /* the fixture keeps its experts at the end: [rest, size) */
    uint64_t cached = page_cached(path, rest, size);
    fprintf(stderr, "%s reads: file %llu bytes, experts %llu, mapping resident %llu, experts in the page cache %llu, "
            "cache %d slots of %llu (%llu locked)\n", info.direct_io ? "direct" : "buffered",
            (unsigned long long)size, (unsigned long long)experts, (unsigned long long)rss,
            (unsigned long long)cached, info.slots, (unsigned long long)info.slot_bytes,
            (unsigned long long)info.locked_bytes);
    CHECK(!buffered || !info.direct_io);
    CHECK(info.total.misses > (uint64_t)info.slots); /* it did evict */
    CHECK((uint64_t)info.slots * info.slot_bytes <= budget);
    /* the pages the non-routed tensors share with expert ranges at their ends */
    uint64_t slack = 16 * 4096;
    CHECK_MSG(rss <= rest + slack, "the mapping holds %llu bytes; the non-routed part is %llu",
              (unsigned long long)rss, (unsigned long long)rest);
    /* and no second copy of what the cache read sits in the page cache */
    CHECK_MSG(cached <= slack, "%llu bytes of routed experts stay in the page cache", (unsigned long long)cached);
    ds4_engine_close(e);
    ds4_tokens_free(&ids);
    unsetenv("DS4CL_EXPERT_CACHE_BUFFERED");
}

TEST(expert_cache, the_process_holds_the_non_routed_weights_and_the_budget_only)
{
    const char *path = big_expert_fixture();
    check_within_budget(path, false);
    check_within_budget(path, true);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *d = test_read_file(from, &n);
    CHECK(d != NULL);
    test_write_file(to, d, n);
}

TEST(expert_cache, a_truncated_file_ends_the_turn_naming_file_and_offset_and_the_session_survives)
{
    const char *orig = big_expert_fixture();
    const char *path = test_tmp_path("cut.gguf");
    copy_file(orig, path);
    ds4_engine *e = open_with_cache(path, 0);
    int k = e->model->hp.n_expert_used;
    uint64_t slot = expert_cache_slot_bytes(e->model);
    /* the file's last tensor must be routed experts, so that the cut takes
     * nothing the mapping reads (that would be SIGBUS, not an error) */
    const gguf_file *gf = e->gguf;
    const gguf_tensor *last = NULL;
    for (size_t i = 0; i < gguf_n_tensors(gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(gf, i);
        if (!last || t->offset > last->offset) last = t;
    }
    CHECK_MSG(strstr(last->name, "_exps") != NULL, "the fixture's last tensor is %s", last->name);
    uint64_t cut = gguf_data_offset(gf) + last->offset + last->row_bytes;
    ds4_engine_close(e);

    e = open_with_cache(path, (uint64_t)k * slot);
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, 64, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 12, 311, 5);
    CHECK_MSG(ds4_session_sync(s, ids.ids, 4, NULL, &err) == DS4_OK, "%s", err.msg);

    CHECK(truncate(path, (off_t)cut) == 0);
    /* each token reads every layer's experts again (k slots), the last
     * layer's among them; some token soon wants the cut expert */
    ds4_status st = DS4_OK;
    size_t p = 4;
    for (; p < ids.n && st == DS4_OK; p++) st = ds4_session_eval(s, ids.ids[p], NULL, &err);
    CHECK_MSG(st == DS4_ERROR, "no error after the file was cut at %llu", (unsigned long long)cut);
    fprintf(stderr, "error: %s\n", err.msg);
    CHECK_MSG(strstr(err.msg, path) != NULL, "the error does not name the file: %s", err.msg);
    const char *at = strstr(err.msg, "offset ");
    unsigned long long off = 0;
    CHECK_MSG(at && sscanf(at, "offset %llu", &off) == 1, "the error does not name the offset: %s", err.msg);
    struct stat whole;
    CHECK(stat(orig, &whole) == 0);
    CHECK_MSG(off >= cut && off < (unsigned long long)whole.st_size,
              "offset %llu is not past the cut (%llu): %s", off, (unsigned long long)cut, err.msg);

    /* the file whole again: the same session goes on and computes the
     * resident run's logits */
    copy_file(orig, path);
    CHECK_MSG(ds4_session_sync(s, ids.ids, ids.n, NULL, &err) == DS4_OK, "after the file is whole: %s", err.msg);
    ds4_model_info info;
    ds4_engine_info(e, &info);
    float *got = test_alloc((size_t)info.n_vocab * 4);
    memcpy(got, ds4_session_logits(s), (size_t)info.n_vocab * 4);
    ds4_session_close(s);
    ds4_engine_close(e);

    ds4_engine *ref = open_with_cache(orig, 0);
    float *want = logits_of(ref, &ids, NULL);
    ds4_engine_close(ref);
    check_bit_identical(want + (ids.n - 1) * (size_t)info.n_vocab, got, 1, info.n_vocab);
    ds4_tokens_free(&ids);
}
