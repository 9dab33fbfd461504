/* test_stream_plan.c — when host memory is smaller than the model file, the
 * routed experts are planned into an expert cache instead of a refusal:
 * the arithmetic (engine/stream_plan.h), and what `ds4cl --model-info`
 * and a run say with the memory override. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/expert_cache.h"
#include "engine/stream_plan.h"
#include "engine/testkit/mkmodel.h"
#include "tests/test.h"

#define MiB (1024ull * 1024ull)

static ds4_expert_shape flash_like(void)
{
    /* Flash's q2 file in round numbers: 43 layers × 256 experts of 6.75 MiB */
    ds4_expert_shape s = { 0 };
    s.slot_bytes = 7 * MiB;
    s.n_experts = 43 * 256;
    s.expert_bytes = s.n_experts * (uint64_t)(6.75 * MiB);
    s.resident_bytes = 3000 * MiB;
    s.weights_bytes = s.expert_bytes + s.resident_bytes;
    s.min_slots = 6;
    s.token_bytes = 43ull * 6 * (uint64_t)(6.75 * MiB);
    return s;
}

TEST(stream_plan, a_file_that_fits_is_mapped_and_one_that_does_not_streams)
{
    ds4_expert_shape s = flash_like();
    ds4_expert_plan p;
    uint64_t session = 2048 * MiB;
    CHECK_EQ_INT(stream_plan_make(&s, s.weights_bytes + session, session, session, 0, false, &p), 0);
    CHECK(!p.streaming);
    CHECK_EQ_INT((int)p.cache_bytes, 0);

    /* 32 GiB usable: the cache takes 80 % of what the other weights leave */
    uint64_t usable = 32768 * MiB, left = usable - s.resident_bytes;
    CHECK_EQ_INT(stream_plan_make(&s, usable, session, session, 0, false, &p), 0);
    CHECK(p.streaming);
    CHECK(p.cache_bytes % s.slot_bytes == 0);
    CHECK(p.cache_bytes <= (uint64_t)(0.8 * (double)left) && p.cache_bytes > (uint64_t)(0.8 * (double)left) - s.slot_bytes);
    CHECK_EQ_INT((int)p.slots, (int)(p.cache_bytes / s.slot_bytes));

    /* a large wanted session: the cache gives way to it, down to one
     * request when the smallest session still leaves room */
    uint64_t big = left - 100 * s.slot_bytes;
    CHECK_EQ_INT(stream_plan_make(&s, usable, session, big, 0, false, &p), 0);
    CHECK_EQ_INT((int)p.slots, 100);
    CHECK_EQ_INT(stream_plan_make(&s, usable, session, left * 2, 0, false, &p), 0);
    CHECK_EQ_INT((int)p.slots, 6);
    /* the whole file fits beside the smallest session but not the wanted one: streams */
    CHECK_EQ_INT(stream_plan_make(&s, s.weights_bytes + session, session, 2 * session, 0, false, &p), 0);
    CHECK(p.streaming);

    /* a budget given is taken in whole slots, even when all would fit */
    CHECK_EQ_INT(stream_plan_make(&s, s.weights_bytes * 2, session, session, 70 * MiB + 5, true, &p), 0);
    CHECK(p.streaming);
    CHECK_EQ_INT((int)p.slots, 10);
    /* never more slots than experts */
    CHECK_EQ_INT(stream_plan_make(&s, usable, session, session, s.weights_bytes * 2, true, &p), 0);
    CHECK(p.slots == s.n_experts);
}

TEST(stream_plan, refuses_only_when_the_other_weights_and_a_session_leave_no_room)
{
    ds4_expert_shape s = flash_like();
    ds4_expert_plan p;
    uint64_t session = 2048 * MiB;
    /* room for exactly one layer's request */
    uint64_t usable = s.resident_bytes + session + 6 * s.slot_bytes;
    CHECK_EQ_INT(stream_plan_make(&s, usable, session, session, 0, false, &p), 0);
    CHECK_EQ_INT((int)p.slots, 6);
    CHECK_EQ_INT(stream_plan_make(&s, usable - 1, session, session, 0, false, &p), -1);
    CHECK_CONTAINS(p.refusal, "the non-routed weights (2.93 GiB) and a session (2.00 GiB)");
    CHECK_CONTAINS(p.refusal, "6 experts");
    /* a budget below one request is refused whatever the memory */
    CHECK_EQ_INT(stream_plan_make(&s, usable * 4, session, session, 5 * s.slot_bytes, true, &p), -1);
    CHECK_CONTAINS(p.refusal, "too small");
}

TEST(stream_plan, bytes_from_disk_per_token)
{
    ds4_expert_shape s = flash_like();
    CHECK(ds4_expert_disk_bytes(&s, 0.0) == s.token_bytes);
    CHECK(ds4_expert_disk_bytes(&s, 1.0) == 0);
    CHECK(ds4_expert_disk_bytes(&s, 0.75) == (s.token_bytes + 2) / 4);
    CHECK(ds4_expert_uniform_hit_rate(&s, s.n_experts / 4) == 0.25);
    CHECK(ds4_expert_uniform_hit_rate(&s, s.n_experts * 2) == 1.0);
}

/* A fixture whose routed experts are two thirds of its 60 MiB. */
static const char *fixture(void)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_expert = 64;
    s.n_ff_exp = 512;
    const char *path = test_tmp_path("experts.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "fixture: %s", err.msg);
    return path;
}

TEST(stream_plan, model_info_says_what_is_where_and_what_a_token_costs)
{
    const char *path = fixture();
    char *out;
    /* 81 MiB less the planner's reserve (1/16): 76 MiB usable, the file and a
     * session do not fit, the non-routed 19 MiB and a cache do */
    int rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=81M %s/ds4cl --model-info -m %s 2>&1", test_bindir(), path);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    CHECK_CONTAINS(out, "routed experts  read from the file through an expert cache");
    CHECK_CONTAINS(out, "the non-routed weights 19.27 MiB, an expert cache of");
    CHECK_CONTAINS(out, "the routed experts 40.50 MiB; a token reads 6 per layer: 3.80 MiB");
    CHECK_CONTAINS(out, "(uniform routing)");
    CHECK_CONTAINS(out, "t/s at 3 GB/s");
    /* plenty: mapped, as before */
    rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=64G %s/ds4cl --model-info -m %s 2>&1", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "routed experts  mapped with the rest of the file");
    /* a budget given streams whatever the memory */
    rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=64G %s/ds4cl --model-info --expert-cache 4M -m %s 2>&1", test_bindir(),
                   path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "an expert cache of 4.00 MiB (32 of 384 experts");
    /* too little for the non-routed weights: the refusal says so in numbers */
    rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=17M %s/ds4cl --model-info -m %s 2>&1", test_bindir(), path);
    CHECK_CONTAINS(out, "the non-routed weights (19.3 MiB) and a session");
    CHECK_CONTAINS(out, "no expert cache fits");
}

TEST(stream_plan, a_session_is_planned_where_the_file_does_not_fit)
{
    const char *path = fixture();
    char *out;
    /* off: the weights must all fit, and with 76 MiB usable no context does */
    int rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=81M DS4CL_EXPERT_CACHE=off %s/ds4cl --model-info --ctx auto -m %s 2>&1",
                       test_bindir(), path);
    CHECK_MSG(rc != 0, "%s", out);
    CHECK_CONTAINS(out, "the model does not fit in memory: the weights need 59.8 MiB");
    /* auto (the default): the routed experts stream and a context fits */
    rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=81M %s/ds4cl --model-info --ctx auto -m %s 2>&1", test_bindir(), path);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_CONTAINS(out, "--ctx auto: 4096 tokens");
    CHECK_CONTAINS(out, "read from the file through an expert cache");
    /* a run: the other weights' refusal before loading is gone; with
     * --ctx 4096 it stops at the next step (below what the agent needs),
     * still before any weight is read */
    rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=81M %s/ds4cl -m %s --ctx 4096 -p hi -n 1 2>&1", test_bindir(), path);
    CHECK_CONTAINS(out, "the routed experts (40.5 MiB) are read from the file as needed, through an expert cache");
    CHECK_CONTAINS(out, "--ctx 4096 is too small");
    /* too little even for the non-routed weights and a session: refused before loading */
    rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=49M %s/ds4cl -m %s -p hi -n 1 2>&1", test_bindir(), path);
    CHECK(rc != 0);
    CHECK_CONTAINS(out, "the model does not fit in memory: the non-routed weights (19.3 MiB) and a session");
}

/* After a run has kept the experts' popularity, --model-info also gives
 * the hit rate the planned cache would have had on that routing. */
TEST(stream_plan, model_info_measures_the_hit_rate_on_earlier_routing)
{
    const char *path = fixture();
    const char *cache = test_tmp_path("xdg-cache");
    const char *stats = test_printf("%s/ds4cl/expert-popularity/experts.gguf.pop", cache);
    ds4_engine_options eo = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = 2,
                              .expert_cache = 16 * MiB, .expert_stats = stats };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    ds4_session *s = ds4_session_open(e, 64, &err);
    CHECK(s != NULL);
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (i * 37 + 5) % 311;
    CHECK_MSG(ds4_session_sync(s, ids, 12, NULL, &err) == DS4_OK, "%s", err.msg);
    ds4_session_close(s);
    ds4_engine_close(e); /* writes the popularity */
    char *out;
    int rc = test_runf(&out, "XDG_CACHE_HOME=%s DS4CL_MEM_AVAILABLE=81M %s/ds4cl --model-info -m %s 2>&1", cache,
                       test_bindir(), path);
    CHECK_MSG(rc == 0, "%s", out);
    const char *at = strstr(out, "(the routing of earlier runs)");
    CHECK_MSG(at != NULL, "%s", out);
    /* the line starts "  hit rate H": a real share, above the uniform one */
    const char *line = at;
    while (line > out && line[-1] != '\n') line--;
    double h = -1, u = -1;
    CHECK(sscanf(line, "  hit rate %lf", &h) == 1);
    const char *uni = strstr(out, "(uniform routing)");
    const char *ul = uni;
    while (ul > out && ul[-1] != '\n') ul--;
    CHECK(sscanf(ul, "  hit rate %lf", &u) == 1);
    CHECK_MSG(h > u && h <= 1.0, "earlier routing %.2f, uniform %.2f", h, u);
}
