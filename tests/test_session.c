/* test_session.c — sessions on the CPU backend: snapshots restore the
 * exact state, rewinds inside the kept margin are cheap and exact, far
 * rewinds recompute, cancelled syncs leave a valid resumable prefix, and
 * the memory estimate covers what a session allocates. */
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "cpu/cpu_ops.h"
#include "engine/forward.h"
#include "engine/testkit/mkmodel.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

enum { V = 311 };

static ds4_session *open_session(ds4_engine *e, int n_ctx)
{
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, n_ctx, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    return s;
}

static void sync_ok(ds4_session *s, const ds4_tokens *t, size_t n)
{
    ds4_error err = { "" };
    CHECK_MSG(ds4_session_sync(s, t->ids, n, NULL, &err) == DS4_OK, "sync: %s", err.msg);
}

static void *snapshot_ok(ds4_session *s, size_t *len)
{
    ds4_error err = { "" };
    void *buf = NULL;
    CHECK_MSG(ds4_session_snapshot(s, &buf, len, &err) == 0, "snapshot: %s", err.msg);
    return buf;
}

static void snapshot_round_trip(ds4_quant_sim qs, size_t n)
{
    ds4_engine *e = fwd_test_engine(qs, 1);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, n + 3, V, 5);
    ds4_session *a = open_session(e, 300);
    sync_ok(a, &ids, n);
    const char *path = test_tmp_path("snap.kv");
    ds4_error err = { "" };
    CHECK_MSG(ds4_session_save(a, path, &err) == 0, "%s", err.msg);
    /* the original goes on */
    sync_ok(a, &ids, n + 3);
    ds4_session *b = open_session(e, 300);
    CHECK_MSG(ds4_session_load(b, path, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(ds4_session_n_tokens(b), n);
    CHECK(ds4_session_logits(b) != NULL);
    sync_ok(b, &ids, n + 3);
    CHECK_EQ_INT(ds4_session_last_prefilled(b), 3);
    CHECK(memcmp(ds4_session_logits(a), ds4_session_logits(b), V * 4) == 0);
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

/* 150 tokens: every kind of state is populated (ratio-4 and ratio-128
 * rows, frontiers mid-window, a raw window that has wrapped). */
TEST(session_snapshot, restore_gives_identical_next_logits) { snapshot_round_trip(DS4_QSIM_FULL, 150); }
TEST(session_snapshot, restore_without_simulations) { snapshot_round_trip(DS4_QSIM_NONE, 131); }
TEST(session_snapshot, restore_short_session) { snapshot_round_trip(DS4_QSIM_FULL, 2); }

/* A session that never held a token (its token array was never
 * allocated) snapshots to the header alone and restores as empty, also
 * over a session that holds tokens. */
TEST(session_snapshot, empty_session_round_trip)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    ds4_session *a = open_session(e, 50);
    size_t len;
    void *buf = snapshot_ok(a, &len);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 3, V, 4);
    ds4_session *b = open_session(e, 50);
    sync_ok(b, &ids, 3);
    ds4_error err = { "" };
    CHECK_MSG(ds4_session_restore(b, buf, len, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(ds4_session_n_tokens(b), 0);
    CHECK(ds4_session_logits(b) == NULL);
    free(buf);
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

TEST(session_snapshot, f16_snapshot_loads_into_an_f32_session)
{
    ds4_engine *full = fwd_test_engine(DS4_QSIM_FULL, 1), *none = fwd_test_engine(DS4_QSIM_NONE, 1);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 60, V, 9);
    ds4_session *a = open_session(full, 100), *b = open_session(none, 100);
    sync_ok(a, &ids, 60);
    size_t len;
    void *buf = snapshot_ok(a, &len);
    ds4_error err = { "" };
    CHECK_MSG(ds4_session_restore(b, buf, len, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(ds4_session_n_tokens(b), 60);
    CHECK_EQ_INT(ds4_session_eval(b, 17, NULL, &err), DS4_OK);
    /* a truncated payload is refused and the session stays as it was */
    CHECK(ds4_session_restore(b, buf, len - 7, &err) != 0);
    CHECK_EQ_INT(ds4_session_n_tokens(b), 61);
    free(buf);
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_tokens_free(&ids);
    ds4_engine_close(full);
    ds4_engine_close(none);
}

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

/* Refuses the restore with a message containing want and leaves the
 * session exactly as it was. */
static void refused(ds4_session *s, const void *buf, size_t len, const char *want, const float *logits_before)
{
    size_t n = ds4_session_n_tokens(s);
    ds4_error err = { "" };
    CHECK_MSG(ds4_session_restore(s, buf, len, &err) != 0, "accepted a snapshot that should say '%s'", want);
    CHECK_CONTAINS(err.msg, want);
    CHECK_EQ_INT(ds4_session_n_tokens(s), n);
    CHECK(memcmp(ds4_session_logits(s), logits_before, V * 4) == 0);
}

/* A snapshot of another model (same shape, other weights), one too long
 * for the context, of another format version, or damaged anywhere is
 * refused with a message saying which, and the session goes on as before. */
TEST(session_snapshot, refuses_other_models_versions_and_damage)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 41, V, 19);
    ds4_session *a = open_session(e, 100);
    sync_ok(a, &ids, 40);
    size_t len;
    void *snap = snapshot_ok(a, &len);
    ds4_error err = { "" };
    unsigned char *bad = test_alloc(len);

    /* the target session holds other tokens; each refusal must keep them */
    ds4_session *b = open_session(e, 100);
    sync_ok(b, &ids, 10);
    float *before = test_alloc(V * 4);
    memcpy(before, ds4_session_logits(b), V * 4);

    memcpy(bad, snap, len);
    bad[0] ^= 1;
    refused(b, bad, len, "bad magic", before);
    memcpy(bad, snap, len);
    bad[20] ^= 1; /* inside the identity, header checksum not updated */
    refused(b, bad, len, "header is damaged", before);
    memcpy(bad, snap, len);
    bad[8] = 2; /* version 2 with a valid header checksum */
    uint32_t crc = crc32_of(bad, 52);
    for (int i = 0; i < 4; i++) bad[52 + i] = (unsigned char)(crc >> (8 * i));
    refused(b, bad, len, "version 2 is not supported", before);
    memcpy(bad, snap, len);
    bad[len - 3] ^= 0x40; /* a byte of the state */
    refused(b, bad, len, "damaged", before);
    refused(b, snap, len - 1, "truncated", before);
    refused(b, snap, 10, "bad magic", before);

    /* 40 tokens into a context of 30 */
    ds4_session *small = open_session(e, 30);
    sync_ok(small, &ids, 10);
    refused(small, snap, len, "more than this session's context of 30", ds4_session_logits(b));

    /* the same shape with other weights is another model */
    mk_spec sp;
    mk_spec_tiny(&sp);
    sp.seed = 12345;
    const char *other = test_tmp_path("other.gguf");
    CHECK_MSG(mk_write_file(&sp, other, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine_options o = { .model_path = other, .backend = DS4_BACKEND_CPU, .threads = 1 };
    ds4_engine *e2 = ds4_engine_open(&o, &err);
    CHECK_MSG(e2 != NULL, "%s", err.msg);
    ds4_session *c = open_session(e2, 100);
    sync_ok(c, &ids, 10);
    float *before_c = test_alloc(V * 4);
    memcpy(before_c, ds4_session_logits(c), V * 4);
    refused(c, snap, len, "belongs to another model", before_c);

    /* and the untouched snapshot still restores exactly */
    CHECK_MSG(ds4_session_restore(b, snap, len, &err) == 0, "%s", err.msg);
    CHECK(memcmp(ds4_session_logits(b), ds4_session_logits(a), V * 4) == 0);
    sync_ok(a, &ids, 41);
    sync_ok(b, &ids, 41);
    CHECK_EQ_INT(ds4_session_last_prefilled(b), 1);
    CHECK(memcmp(ds4_session_logits(b), ds4_session_logits(a), V * 4) == 0);
    free(snap);
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_session_close(small);
    ds4_session_close(c);
    ds4_engine_close(e2);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

/* Rewinding into the kept margin costs nothing and is exact. */
TEST(session_rewind, short_rewind_is_cheap_and_exact)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    ds4_tokens ids = { 0 }, alt = { 0 };
    fwd_random_ids(&ids, 210, V, 21);
    ds4_session *s = open_session(e, 400);
    sync_ok(s, &ids, 210);
    /* same first 197 tokens, then 6 others: crosses a ratio-4 window and the frontier */
    ds4_tokens_append(&alt, ids.ids, 197);
    fwd_random_ids(&alt, 6, V, 99);
    sync_ok(s, &alt, alt.n);
    CHECK_EQ_INT(ds4_session_last_prefilled(s), 6);
    float *fresh = test_alloc(V * 4);
    fwd_logits_after(e, 400, 0, alt.ids, alt.n, fresh);
    CHECK(memcmp(ds4_session_logits(s), fresh, V * 4) == 0);
    /* shrinking to a strict prefix recomputes only its last token */
    sync_ok(s, &alt, 150);
    CHECK_EQ_INT(ds4_session_last_prefilled(s), 1);
    fwd_logits_after(e, 400, 0, alt.ids, 150, fresh);
    CHECK(memcmp(ds4_session_logits(s), fresh, V * 4) == 0);
    ds4_session_close(s);
    ds4_tokens_free(&ids);
    ds4_tokens_free(&alt);
    ds4_engine_close(e);
}

/* Beyond the margin the state cannot be recovered: the session recomputes
 * from the start and still gets the exact result. */
TEST(session_rewind, far_rewind_recomputes_from_the_start)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    fwd_set_chunk(fwd_of(e), 32);
    ds4_tokens ids = { 0 }, alt = { 0 };
    fwd_random_ids(&ids, 400, V, 31);
    ds4_session *s = open_session(e, 800);
    sync_ok(s, &ids, 400);
    ds4_tokens_append(&alt, ids.ids, 100);
    fwd_random_ids(&alt, 5, V, 77);
    sync_ok(s, &alt, alt.n);
    CHECK_EQ_INT(ds4_session_last_prefilled(s), 105);
    float *fresh = test_alloc(V * 4);
    fwd_logits_after(e, 800, 0, alt.ids, alt.n, fresh);
    CHECK(memcmp(ds4_session_logits(s), fresh, V * 4) == 0);
    ds4_session_close(s);
    ds4_tokens_free(&ids);
    ds4_tokens_free(&alt);
    ds4_engine_close(e);
}

/* A far rewind with a snapshot of an earlier prefix goes on from that
 * snapshot, exactly; a base that does not begin the tokens is ignored. */
TEST(session_rewind, far_rewind_goes_on_from_a_base_snapshot)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    fwd_set_chunk(fwd_of(e), 32);
    ds4_tokens ids = { 0 }, alt = { 0 }, other = { 0 };
    fwd_random_ids(&ids, 400, V, 31);
    ds4_session *s = open_session(e, 800);
    sync_ok(s, &ids, 90);
    size_t base_len;
    void *base = snapshot_ok(s, &base_len);
    ds4_error err = { "" };
    sync_ok(s, &ids, 400);
    /* shares 100 tokens, the base holds the first 90 */
    ds4_tokens_append(&alt, ids.ids, 100);
    fwd_random_ids(&alt, 5, V, 77);
    CHECK_EQ_INT(ds4_session_sync_from(s, alt.ids, alt.n, base, base_len, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_last_prefilled(s), 15);
    float *fresh = test_alloc(V * 4);
    fwd_logits_after(e, 800, 0, alt.ids, alt.n, fresh);
    CHECK(memcmp(ds4_session_logits(s), fresh, V * 4) == 0);
    /* a base of other tokens: from the start, still exact */
    sync_ok(s, &ids, 400);
    fwd_random_ids(&other, 120, V, 5);
    CHECK_EQ_INT(ds4_session_sync_from(s, other.ids, other.n, base, base_len, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_last_prefilled(s), 120);
    fwd_logits_after(e, 800, 0, other.ids, other.n, fresh);
    CHECK(memcmp(ds4_session_logits(s), fresh, V * 4) == 0);
    free(base);
    ds4_session_close(s);
    ds4_tokens_free(&ids);
    ds4_tokens_free(&alt);
    ds4_tokens_free(&other);
    ds4_engine_close(e);
}

/* A restored state holds the rows its snapshot holds (the window and the
 * compressor frontier at its end), not the margin a live session keeps:
 * going back from it, even one token, must come out exact, computed again
 * where the rows are not there. Restore points on and off the ratio-4 and
 * ratio-128 boundaries, back by less and more than the window's spare row. */
TEST(session_rewind, a_restored_state_goes_back_exactly)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 300, V, 41);
    float *fresh = test_alloc(V * 4);
    const size_t points[] = { 128, 150 }, backs[] = { 1, 5 };
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        ds4_session *a = open_session(e, 400);
        sync_ok(a, &ids, points[i]);
        size_t len;
        void *snap = snapshot_ok(a, &len);
        for (size_t k = 0; k < sizeof backs / sizeof backs[0]; k++) {
            ds4_session *b = open_session(e, 400);
            ds4_error err = { "" };
            CHECK_MSG(ds4_session_restore(b, snap, len, &err) == 0, "%s", err.msg);
            ds4_tokens alt = { 0 };
            ds4_tokens_append(&alt, ids.ids, points[i] - backs[k]);
            fwd_random_ids(&alt, 3, V, 7 + (uint64_t)k);
            sync_ok(b, &alt, alt.n);
            fwd_logits_after(e, 400, 0, alt.ids, alt.n, fresh);
            CHECK_MSG(memcmp(ds4_session_logits(b), fresh, V * 4) == 0, "restored at %zu, back %zu: other logits",
                      points[i], backs[k]);
            ds4_tokens_free(&alt);
            ds4_session_close(b);
        }
        free(snap);
        ds4_session_close(a);
    }
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

/* An empty session, or one that shares less with the tokens than a base
 * holds (a cached prompt), goes on from the base: it prefills only the
 * tokens after it, exactly. A damaged base is ignored. */
TEST(session_rewind, empty_session_goes_on_from_a_base_snapshot)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    fwd_set_chunk(fwd_of(e), 32);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 150, V, 41);
    ds4_session *s = open_session(e, 400);
    sync_ok(s, &ids, 100);
    size_t base_len;
    void *base = snapshot_ok(s, &base_len);
    ds4_error err = { "" };
    ds4_session_close(s);
    float *plain = test_alloc(V * 4);
    fwd_logits_after(e, 400, 0, ids.ids, ids.n, plain);

    s = open_session(e, 400);
    CHECK_EQ_INT(ds4_session_sync_from(s, ids.ids, ids.n, base, base_len, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_last_prefilled(s), 50);
    CHECK(memcmp(ds4_session_logits(s), plain, V * 4) == 0);
    /* a session holding fewer of the tokens than the base */
    sync_ok(s, &ids, 10);
    CHECK_EQ_INT(ds4_session_sync_from(s, ids.ids, ids.n, base, base_len, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_last_prefilled(s), 50);
    CHECK(memcmp(ds4_session_logits(s), plain, V * 4) == 0);
    ds4_session_close(s);

    /* damaged payload: the whole prompt is read, still exact */
    unsigned char *bad = test_alloc(base_len);
    memcpy(bad, base, base_len);
    bad[base_len - 1] ^= 0x5a;
    s = open_session(e, 400);
    CHECK_EQ_INT(ds4_session_sync_from(s, ids.ids, ids.n, bad, base_len, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_last_prefilled(s), 150);
    CHECK(memcmp(ds4_session_logits(s), plain, V * 4) == 0);
    ds4_session_close(s);
    free(base);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

typedef struct {
    int polls, stop_after, progress_calls, last_done;
} cancel_ctx;

static bool cancel_after(void *ud)
{
    cancel_ctx *c = ud;
    return ++c->polls > c->stop_after;
}

static void on_progress(void *ud, int done, int total, double tps)
{
    (void)total;
    (void)tps;
    cancel_ctx *c = ud;
    c->progress_calls++;
    CHECK(done > c->last_done);
    c->last_done = done;
}

/* Cancelling at chunk boundaries and between the layers of a chunk leaves
 * a prefix whose logits are right, and a later sync resumes it. */
TEST(session_cancel, interrupted_sync_leaves_a_resumable_prefix)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    fwd_set_chunk(fwd_of(e), 16);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 120, V, 41);
    float *fresh = test_alloc(V * 4);
    fwd_logits_after(e, 200, 0, ids.ids, ids.n, fresh);
    /* polls: one per chunk boundary and one per layer after the first */
    for (int stop = 0; stop < 30; stop += 5) {
        ds4_session *s = open_session(e, 200);
        cancel_ctx c = { .stop_after = stop };
        ds4_callbacks cb = { .progress = on_progress, .cancel = cancel_after, .ud = &c };
        ds4_error err = { "" };
        ds4_status st = ds4_session_sync(s, ids.ids, ids.n, &cb, &err);
        CHECK_EQ_INT(st, DS4_INTERRUPTED);
        size_t kept = ds4_session_n_tokens(s);
        CHECK(kept < ids.n && kept % 16 == 0);
        CHECK_EQ_INT(c.last_done, (int)kept);
        if (kept > 0) {
            float *part = test_alloc(V * 4);
            fwd_logits_after(e, 200, 0, ids.ids, kept, part);
            CHECK_MSG(memcmp(ds4_session_logits(s), part, V * 4) == 0, "logits after %zu kept tokens", kept);
        } else {
            CHECK(ds4_session_logits(s) == NULL);
        }
        sync_ok(s, &ids, ids.n);
        CHECK_EQ_INT(ds4_session_last_prefilled(s), ids.n - kept);
        CHECK(memcmp(ds4_session_logits(s), fresh, V * 4) == 0);
        ds4_session_close(s);
    }
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

TEST(session_cancel, cancelled_decode_step_changes_nothing)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 20, V, 43);
    ds4_session *s = open_session(e, 64);
    sync_ok(s, &ids, 20);
    float *before = test_alloc(V * 4);
    memcpy(before, ds4_session_logits(s), V * 4);
    cancel_ctx c = { .stop_after = 0 };
    ds4_callbacks cb = { .cancel = cancel_after, .ud = &c };
    ds4_error err = { "" };
    CHECK_EQ_INT(ds4_session_eval(s, 5, &cb, &err), DS4_INTERRUPTED);
    CHECK_EQ_INT(ds4_session_n_tokens(s), 20);
    CHECK(memcmp(ds4_session_logits(s), before, V * 4) == 0);
    ds4_session_close(s);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

TEST(session_bytes, estimate_covers_what_a_session_uses)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 2);
    int n_ctx = 600;
    uint64_t est = ds4_session_bytes_estimate(e, n_ctx);
    uint64_t bufs = fwd_session_buffers_bytes(fwd_of(e), n_ctx);
    CHECK(est > bufs);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, (size_t)n_ctx, V, 47);
    ds4_session *s = open_session(e, n_ctx);
    sync_ok(s, &ids, ids.n);
    uint64_t scratch = cpu_ops_scratch_bytes(fwd_ops_ctx(fwd_of(e)));
    CHECK_MSG(bufs + scratch <= est, "used %llu > estimate %llu", (unsigned long long)(bufs + scratch),
              (unsigned long long)est);
    /* the estimate is not wildly above what is used either */
    CHECK_MSG(est <= 2 * (bufs + scratch), "estimate %llu for %llu used", (unsigned long long)est,
              (unsigned long long)(bufs + scratch));
    /* the kept state grows with the context and the snapshot holds exactly it */
    uint64_t kv = ds4_session_kv_bytes(s);
    CHECK(kv > 0);
    size_t len;
    void *buf = snapshot_ok(s, &len);
    CHECK(len > kv);
    free(buf);
    ds4_session_close(s);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}
