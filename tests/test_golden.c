/* test_golden.c — the CPU forward pass against logits computed by an
 * independent implementation (../shared/golden, see its READMEs): tight
 * agreement with the rounding simulations off, the f16-cache variant, and
 * statistical agreement under the model's release numerics. Teacher
 * forced: the prompt, then the reference's fed tokens, one at a time. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

static float *run_teacher_forced(golden_set *g, ds4_quant_sim qs, fwd_routing *routing)
{
    ds4_engine *e = fwd_test_engine(qs, 1);
    float *out = test_alloc(g->all.n * (size_t)g->n_vocab * 4);
    fwd_teacher_force(e, &g->all, out, routing);
    ds4_engine_close(e);
    CHECK_EQ_INT(g->n_rows, g->all.n);
    return out;
}

static void report(const char *what, const fwd_stats *st)
{
    fprintf(stderr, "%s: rel max %.3g (pos %d) median %.3g p90 %.3g, argmax %d/%d (%d non-tie misses)\n", what, st->max,
            st->worst_pos, st->median, st->p90, st->argmax_equal, st->n, st->argmax_exempt_misses);
}

TEST(golden_nosim, teacher_forced_logits_are_tight)
{
    golden_set g;
    golden_load(&g, "A-f32-nosim", "prefix_logits.f32", false);
    float *mine = run_teacher_forced(&g, DS4_QSIM_NONE, NULL);
    fwd_stats st;
    fwd_compare(mine, g.ref, g.n_rows, g.n_vocab, 1e-3, &st);
    report("A-f32-nosim", &st);
    /* pass/fail of the set's README, and the level a careful f32 engine reaches */
    CHECK_MSG(st.max <= 1e-3, "rel %.3g at position %d", st.max, st.worst_pos);
    CHECK_MSG(st.max <= 1e-4, "rel %.3g at position %d (tight level)", st.max, st.worst_pos);
    CHECK_MSG(st.median <= 2e-5, "median rel %.3g", st.median);
    CHECK_EQ_INT(st.argmax_exempt_misses, 0);
    golden_free(&g);
}

/* Expert sets at every (position, layer) and indexer selections wherever
 * the reference had more rows than it keeps. */
TEST(golden_nosim, routing_and_indexer_choices_match)
{
    golden_set g;
    golden_load(&g, "A-f32-nosim", "prefix_logits.f32", true);
    fwd_routing r = { 0 };
    run_teacher_forced(&g, DS4_QSIM_NONE, &r);
    fwd_check_routing(&g, &r);
    golden_free(&g);
}

/* The prefill path: all prompt ids in one sync (chunked), then the greedy
 * continuation fed back one token at a time. */
TEST(golden_nosim, prefill_then_decode_matches_logits_rows)
{
    golden_set g;
    golden_load(&g, "A-f32-nosim", "logits.f32", false);
    setenv("DS4CL_EXPERTS", "q8k", 1);
    ds4_engine *e = fwd_test_engine(DS4_QSIM_NONE, 1);
    /* the tight tier's numerics multiply the experts exactly, whatever is asked */
    ds4_model_info info;
    ds4_engine_info(e, &info);
    CHECK_CONTAINS(info.device_name, "experts exact f32");
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, (int)g.all.n, &err);
    CHECK(s != NULL);
    float *mine = test_alloc(g.n_rows * (size_t)g.n_vocab * 4);
    CHECK_EQ_INT(ds4_session_sync(s, g.prompt.ids, g.prompt.n, NULL, &err), DS4_OK);
    for (size_t k = 0; k < g.n_rows; k++) {
        const float *lg = ds4_session_logits(s);
        CHECK(lg != NULL);
        memcpy(mine + k * (size_t)g.n_vocab, lg, (size_t)g.n_vocab * 4);
        CHECK_EQ_INT(fwd_argmax(lg, g.n_vocab), g.greedy.ids[k]);
        if (k < g.fed.n) CHECK_EQ_INT(ds4_session_eval(s, g.fed.ids[k], NULL, &err), DS4_OK);
    }
    fwd_stats st;
    fwd_compare(mine, g.ref, g.n_rows, g.n_vocab, 1e-3, &st);
    report("A-f32-nosim prefill+decode", &st);
    CHECK_MSG(st.max <= 1e-4, "rel %.3g at row %d", st.max, st.worst_pos);
    ds4_session_close(s);
    ds4_engine_close(e);
    golden_free(&g);
}

TEST(golden_f16kv, teacher_forced_logits_within_the_f16_cache_tolerance)
{
    golden_set g;
    golden_load(&g, "A-f32-nosim", "variants/prefix_logits_f16kv.f32", false);
    float *mine = run_teacher_forced(&g, DS4_QSIM_F16KV, NULL);
    fwd_stats st;
    fwd_compare(mine, g.ref, g.n_rows, g.n_vocab, 1e-3, &st);
    report("A-f32-nosim f16kv", &st);
    CHECK_MSG(st.max <= 2e-3, "rel %.3g at position %d", st.max, st.worst_pos);
    CHECK_MSG(st.median <= 5e-4, "median rel %.3g", st.median);
    CHECK_EQ_INT(st.argmax_exempt_misses, 0);
    golden_free(&g);
}

/* The release tier was written for f32 activations: exact expert
 * products asked for (DS4CL_EXPERTS=f32). */
TEST(golden_full, release_numerics_agree_statistically)
{
    golden_set g;
    golden_load(&g, "A-f32", "prefix_logits.f32", false);
    setenv("DS4CL_EXPERTS", "f32", 1);
    float *mine = run_teacher_forced(&g, DS4_QSIM_FULL, NULL);
    fwd_stats st;
    fwd_compare(mine, g.ref, g.n_rows, g.n_vocab, 0, &st);
    report("A-f32 full, exact experts", &st);
    fwd_check_release_tier(&st, "exact experts");
    golden_free(&g);
}

/* What ds4cl runs unless told otherwise: the routed experts by integer
 * dots against 8-bit activations, judged by the 8-bit tier. */
TEST(golden_full, default_8bit_experts_meet_the_8bit_tier)
{
    golden_set g;
    golden_load(&g, "A-f32", "prefix_logits.f32", false);
    unsetenv("DS4CL_EXPERTS");
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    ds4_model_info info;
    ds4_engine_info(e, &info);
    CHECK_CONTAINS(info.device_name, "experts Q8_K");
    float *mine = test_alloc(g.all.n * (size_t)g.n_vocab * 4);
    fwd_teacher_force(e, &g.all, mine, NULL);
    ds4_engine_close(e);
    fwd_stats st;
    fwd_compare(mine, g.ref, g.n_rows, g.n_vocab, 0, &st);
    report("A-f32 full, default (8-bit) experts", &st);
    fwd_check_8bit_tier(&st, "default experts");
    golden_free(&g);
}

/* ds4cl-bench --logits writes rows in the golden layout and prints their
 * argmax. */
TEST(golden_bench, logits_mode_writes_the_golden_layout)
{
    golden_set g;
    golden_load(&g, "A-f32-nosim", "logits.f32", false);
    strbuf ids = { 0 }, feed = { 0 };
    for (size_t i = 0; i < g.prompt.n; i++) sb_printf(&ids, "%s%d", i ? "," : "", g.prompt.ids[i]);
    for (size_t i = 0; i < g.fed.n; i++) sb_printf(&feed, "%s%d", i ? "," : "", g.fed.ids[i]);
    const char *out = test_tmp_path("rows.f32");
    char *text;
    int rc = test_runf(&text, "%s/ds4cl-bench --logits %s -m %s --token-ids %s --feed %s --quant-sim none --threads 1",
                       test_bindir(), out, golden_model(), sb_str(&ids), sb_str(&feed));
    CHECK_MSG(rc == 0, "ds4cl-bench failed: %s", text);
    strbuf want = { 0 };
    sb_putc(&want, '[');
    for (size_t i = 0; i < g.greedy.n; i++) sb_printf(&want, "%s%d", i ? "," : "", g.greedy.ids[i]);
    sb_putc(&want, ']');
    CHECK_CONTAINS(text, sb_str(&want));
    size_t len;
    float *rows = (float *)(void *)test_read_file(out, &len);
    CHECK(rows != NULL);
    CHECK_EQ_INT(len, g.n_rows * (size_t)g.n_vocab * 4);
    fwd_stats st;
    fwd_compare(rows, g.ref, g.n_rows, g.n_vocab, 1e-3, &st);
    CHECK_MSG(st.max <= 1e-4, "rel %.3g", st.max);
    /* --decode follows its own argmax: the same rows here */
    rc = test_runf(&text, "%s/ds4cl-bench --logits %s -m %s --token-ids %s --decode 16 --quant-sim none --threads 1",
                   test_bindir(), out, golden_model(), sb_str(&ids));
    CHECK_MSG(rc == 0, "ds4cl-bench failed: %s", text);
    CHECK_CONTAINS(text, sb_str(&want));
    /* bad usage is refused with a message */
    rc = test_runf(&text, "%s/ds4cl-bench --logits %s -m %s --token-ids 1,x", test_bindir(), out, golden_model());
    CHECK(rc == 2);
    CHECK_CONTAINS(text, "--token-ids");
    sb_free(&ids);
    sb_free(&feed);
    sb_free(&want);
    golden_free(&g);
}

/* The speed sweep's CSV: a header and one row per frontier. */
TEST(golden_bench, speed_sweep_writes_one_csv_row_per_frontier)
{
    const char *prompt = test_tmp_path("prompt.txt");
    const char *text = "The quick brown fox jumps over the lazy dog. Compressed rows and experts.\n";
    test_write_file(prompt, text, strlen(text));
    char *out;
    int rc = test_runf(&out, "%s/ds4cl-bench -m %s --prompt-file %s --ctx-start 8 --ctx-max 40 --step 16 --gen-tokens 3"
                             " --threads 1 2>/dev/null",
                       test_bindir(), golden_model(), prompt);
    CHECK_MSG(rc == 0, "ds4cl-bench failed: %s", out);
    CHECK_CONTAINS(out, "backend,frontier,prefill_tps,decode_tps,weights_bytes_per_token,decode_gbps,ceiling_gbps,kv_bytes,"
                        "decode_pct_ceiling,prefill_gflops,peak_gflops,prefill_pct_peak,launches_per_token\n");
    int rows = 0;
    for (const char *p = out; (p = strstr(p, "\ncpu,")); p++) {
        rows++;
        /* the rates are positive, the ratios follow from them, no launches on the CPU */
        double v[11];
        int n = sscanf(p + 5, "%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                       &v[6], &v[7], &v[8], &v[9], &v[10]);
        CHECK_EQ_INT(n, 11);
        CHECK(v[1] > 0 && v[2] > 0 && v[5] > 0 && v[8] > 0 && v[9] > 0);
        /* the rates are printed to 2 decimals and the percentages from
         * the unrounded rates: on a busy machine a rate near 0.1 moves the
         * percentage by several tenths */
        CHECK(fabs(v[7] - 100 * v[4] / v[5]) < 0.1 + 1e-3 * v[7] + 100 * 0.005 / v[5] * (1 + v[7] / 100));
        CHECK(fabs(v[10] - 100 * v[8] / v[9]) < 0.1 + 1e-3 * v[10] + 100 * 0.005 / v[9] * (1 + v[10] / 100));
        const char *eol = strchr(p + 1, '\n');
        CHECK(eol && eol[-1] == ',');
    }
    CHECK_EQ_INT(rows, 3); /* frontiers 8, 24, 40 */
    CHECK_CONTAINS(out, "\ncpu,24,");
    rc = test_runf(&out, "%s/ds4cl-bench -m %s --prompt-file %s --ctx-start 9 --ctx-max 4 --step 1 --gen-tokens 1",
                   test_bindir(), golden_model(), prompt);
    CHECK(rc == 2);
    CHECK_CONTAINS(out, "--ctx-start");
}
