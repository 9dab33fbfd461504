/* test_split.c — one model over several OpenCL devices, each holding a
 * contiguous range of layers (PoCL gives two with POCL_DEVICES="pthread
 * pthread"; the variable is set before the first OpenCL call of each test,
 * which runs in its own process). The split pass must give what one device
 * gives: logits within rel 1e-3 at every teacher-forced position with the
 * rounding simulations off, the same expert and indexer choices, for
 * several splits and with routed experts on the host; snapshots move
 * between split and single-device sessions; a decode step hands the next
 * device exactly one token's hyper-connection streams per range boundary;
 * bad device lists and splits are refused with the reason. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/testkit/mkmodel.h"
#include "tests/fwd_util.h"
#include "tests/model_cmp.h"
#include "tests/test.h"

#define REL_TOL 1e-3

/* Two OpenCL devices, or a skip saying why not. */
static const char *fixture(const mk_spec *spec)
{
    const char *path = test_tmp_path("split.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(spec, path, NULL, NULL, &err) == 0, "fixture: %s", err.msg);
    return path;
}

static ds4_engine *open_split(const char *path, const char *device, const char *split, int host, ds4_error *err)
{
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .device = device, .split = split,
                             .threads = 2, .quant_sim = DS4_QSIM_NONE, .host_expert_layers = host };
    return ds4_engine_open(&o, err);
}

static ds4_engine *must_split(const char *path, const char *device, const char *split, int host)
{
    ds4_error err = { "" };
    ds4_engine *e = open_split(path, device, split, host, &err);
    CHECK_MSG(e != NULL, "--device %s --split %s: %s", device, split ? split : "-", err.msg);
    return e;
}

typedef struct {
    const char *split;
    int host;
    int first1; /* the first layer of device 1 */
} split_case;

static void splits_agree(const mk_spec *spec, int n, const split_case *cases, int n_cases)
{
    const char *path = fixture(spec);
    ds4_engine *one = must_split(path, "0", NULL, DS4_EXPERTS_ON_DEVICE);
    const int V = one->n_vocab;
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, (size_t)n, V, (uint32_t)spec->seed + 3);
    float *ref = test_alloc((size_t)n * (size_t)V * 4), *got = test_alloc((size_t)n * (size_t)V * 4);
    fwd_routing rr, rg;
    fwd_teacher_force(one, &ids, ref, &rr);
    ds4_engine_close(one);
    for (int i = 0; i < n_cases; i++) {
        ds4_engine *e = must_split(path, "0,1", cases[i].split, cases[i].host);
        ds4_placement p;
        CHECK_EQ_INT(ds4_engine_placement(e, &p), 0);
        CHECK_EQ_INT(p.n_devices, 2);
        CHECK_EQ_INT(p.dev[0].first_layer, 0);
        CHECK_EQ_INT(p.dev[1].first_layer, cases[i].first1);
        CHECK_EQ_INT(p.dev[0].n_layers + p.dev[1].n_layers, spec->n_layer);
        CHECK(p.dev[1].head && !p.dev[0].head);
        fwd_teacher_force(e, &ids, got, &rg);
        int row;
        double rel = mc_worst_rel(got, ref, n, V, &row);
        fprintf(stderr, "split %s, host %d: rel %.3g (position %d)\n", cases[i].split ? cases[i].split : "auto",
                cases[i].host, rel, row);
        CHECK_MSG(rel <= REL_TOL, "split %s: rel %.3g at position %d", cases[i].split ? cases[i].split : "auto", rel, row);
        size_t cells = (size_t)n * (size_t)rr.n_layer;
        CHECK(memcmp(rr.experts, rg.experts, cells * (size_t)rr.k * 4) == 0);
        CHECK(memcmp(rr.has_sel, rg.has_sel, cells) == 0);
        for (size_t c = 0; c < cells; c++)
            if (rr.has_sel[c]) CHECK(memcmp(rr.sel + c * (size_t)rr.top_k, rg.sel + c * (size_t)rr.top_k, (size_t)rr.top_k * 4) == 0);
        ds4_engine_close(e);
    }
    ds4_tokens_free(&ids);
}

TEST(split, two_devices_agree_with_one_at_every_position)
{
    fwd_require_two_opencl_devices();
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 31;
    const split_case cases[] = {
        { NULL, DS4_EXPERTS_ON_DEVICE, 3 }, /* equal memory: half each */
        { "1,2", DS4_EXPERTS_ON_DEVICE, 2 },
        { "5,1", 4, 5 },                    /* and the first four layers' experts on the host */
    };
    splits_agree(&s, 300, cases, 3);
}

/* Flash's widths (16 experts, top-16 indexer, tiny vocabulary) on two
 * layers, one per device. */
TEST(split, flash_width_two_devices_agree_with_one)
{
    fwd_require_two_opencl_devices();
    mk_spec s;
    mk_spec_flash_width(&s, 2);
    int ratios[] = { 4, 128 };
    memcpy(s.ratios, ratios, sizeof ratios);
    s.n_expert = 16;
    s.n_hash_layer = 1;
    s.indexer_top_k = 16;
    s.vocab = MK_VOCAB_TINY;
    s.seed = 4;
    const char *path = fixture(&s);
    ds4_engine *one = must_split(path, "0", NULL, DS4_EXPERTS_ON_DEVICE);
    ds4_engine *two = must_split(path, "0,1", NULL, DS4_EXPERTS_ON_DEVICE);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 300, one->n_vocab, 5);
    mc_plan p = { &ids, 288, 96 };
    mc_outcome a, b;
    mc_run(one, &p, &a);
    mc_run(two, &p, &b);
    mc_diff d;
    mc_check_agree(&one->model->hp, &p, &a, &b, REL_TOL, &d);
    mc_outcome_free(&a);
    mc_outcome_free(&b);
    ds4_tokens_free(&ids);
    ds4_engine_close(two);
    ds4_engine_close(one);
}

/* Snapshots move both ways; a decode step moves one token's streams
 * (n_hc × n_embd floats) over the one boundary, and the head's row. */
TEST(split, snapshots_move_and_a_step_hands_over_one_tokens_streams)
{
    fwd_require_two_opencl_devices();
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 32;
    const char *path = fixture(&s);
    ds4_engine *one = must_split(path, "0", NULL, 0), *two = must_split(path, "0,1", "1,1", 0);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 320, one->n_vocab, 9);
    mc_plan p = { &ids, 300, 64 };
    mc_outcome a, b;
    mc_run(one, &p, &a);
    mc_run(two, &p, &b);
    mc_diff d;
    mc_check_agree(&one->model->hp, &p, &a, &b, REL_TOL, &d);
    mc_resume_on(two, &p, &a, a.step_logits, 4, REL_TOL, "one device's snapshot on two");
    mc_resume_on(one, &p, &b, a.step_logits, 4, REL_TOL, "two devices' snapshot on one");

    ds4_error err = { "" };
    ds4_session *ses = ds4_session_open(two, 64, &err);
    CHECK(ses != NULL);
    CHECK_EQ_INT(ds4_session_sync(ses, ids.ids, 20, NULL, &err), DS4_OK);
    fwd_handover_stats before, after;
    fwd_get_handover_stats(fwd_of(two), &before);
    CHECK_EQ_INT(ds4_session_eval(ses, 5, NULL, &err), DS4_OK);
    fwd_get_handover_stats(fwd_of(two), &after);
    const ds4_hparams *hp = &two->model->hp;
    uint64_t streams = (uint64_t)hp->n_hc * (uint64_t)hp->n_embd * 4;
    fprintf(stderr, "one decode step over two devices: %llu hand-overs, %llu bytes\n",
            (unsigned long long)(after.count - before.count), (unsigned long long)(after.bytes - before.bytes));
    /* the streams into device 1, the token id (its hash-routed layers
     * and nothing else read it there) */
    CHECK_EQ_INT(after.bytes - before.bytes, streams + 4);
    ds4_session_close(ses);
    mc_outcome_free(&a);
    mc_outcome_free(&b);
    ds4_tokens_free(&ids);
    ds4_engine_close(two);
    ds4_engine_close(one);
}

TEST(split, bad_device_lists_and_splits_are_refused)
{
    fwd_require_two_opencl_devices();
    mk_spec s;
    mk_spec_tiny(&s);
    const char *path = fixture(&s);
    ds4_error err = { "" };
    CHECK(open_split(path, "0,0", NULL, 0, &err) == NULL);
    CHECK_CONTAINS(err.msg, "named twice");
    CHECK(open_split(path, "0,9", NULL, 0, &err) == NULL);
    CHECK_CONTAINS(err.msg, "index 9");
    CHECK(open_split(path, "0,1", "1", 0, &err) == NULL);
    CHECK_CONTAINS(err.msg, "expected 2 numbers");
    CHECK(open_split(path, "0,1", "1,x", 0, &err) == NULL);
    CHECK_CONTAINS(err.msg, "positive numbers");
    CHECK(open_split(path, "0,", NULL, 0, &err) == NULL);
    CHECK_CONTAINS(err.msg, "empty");
    /* the command line says so before loading anything */
    char *out;
    int rc = test_runf(&out, "POCL_DEVICES='pthread pthread' %s/ds4cl -m %s --backend opencl --split 1,1 -p hi 2>&1",
                       test_bindir(), path);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "needs several devices");
    rc = test_runf(&out, "POCL_DEVICES='pthread pthread' %s/ds4cl --model-info -m %s --backend opencl --device 0,1 "
                         "--split 1,2 --ctx 4096 2>&1",
                   test_bindir(), path);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "device 0          ");
    CHECK_CONTAINS(out, ": layers 0-1;");
    CHECK_CONTAINS(out, ": layers 2-5 and the head;");
}

/* Device lists and shares have one reading, whoever reads them (the
 * engine, the command line's checks, the MPI split), and the layer ranges
 * one splitting: the same pieces, the same refusals. */
TEST(split, one_reading_of_device_lists_shares_and_ranges)
{
    char p[DS4_MAX_DEVICES][DS4_DEVICE_PIECE_MAX];
    ds4_error err = { "" };
    CHECK_EQ_INT(ds4_parse_devices(NULL, "--device", p, &err), 0);
    CHECK_EQ_INT(ds4_parse_devices("gfx", "--device", p, &err), 1);
    CHECK_STR_EQ(p[0], "gfx");
    CHECK_EQ_INT(ds4_parse_devices("0,pthread,2", "--device", p, &err), 3);
    CHECK_STR_EQ(p[1], "pthread");
    CHECK_STR_EQ(p[2], "2");
    CHECK_EQ_INT(ds4_parse_devices("0,,1", "--device", p, &err), -1);
    CHECK_CONTAINS(err.msg, "--device 0,,1: an empty");
    CHECK_EQ_INT(ds4_parse_devices("0,1,2,3,4", "DS4CL_DEVICE", p, &err), -1);
    CHECK_CONTAINS(err.msg, "at most 4 devices");

    double w[DS4_MAX_DEVICES];
    CHECK_EQ_INT(ds4_parse_shares("3,1", 2, w, "--split 3,1", "device", &err), 0);
    CHECK(w[0] == 3 && w[1] == 1);
    CHECK_EQ_INT(ds4_parse_shares("3,1,1", 2, w, "DS4CL_MPI_SPLIT=3,1,1", "rank", &err), -1);
    CHECK_CONTAINS(err.msg, "DS4CL_MPI_SPLIT=3,1,1: expected 2 positive numbers");
    CHECK_CONTAINS(err.msg, "one per rank");
    CHECK_EQ_INT(ds4_parse_shares("1", 2, w, "--split 1", "device", &err), -1);
    CHECK_CONTAINS(err.msg, "expected 2 numbers, one per device, not 1");
    CHECK_EQ_INT(ds4_parse_shares("1,0", 2, w, "--split 1,0", "device", &err), -1);
    CHECK_EQ_INT(ds4_parse_shares("1,1e999", 2, w, "--split 1,1e999", "device", &err), -1);

    int b[DS4_MAX_DEVICES + 1];
    const double three_one[] = { 3, 1 };
    CHECK_EQ_INT(ds4_split_layers(8, 2, three_one, "device", b, &err), 0);
    CHECK(b[0] == 0 && b[1] == 6 && b[2] == 8);
    CHECK_EQ_INT(ds4_split_layers(1, 2, three_one, "device", b, &err), -1);
    CHECK_CONTAINS(err.msg, "2 devices need at least as many layers");
}
