/* test_mpi.c — the layer split over MPI ranks (mpi/): logits of 2- and
 * 3-rank jobs equal the single process's at every position, snapshots
 * gather and scatter the ranks' layers, a killed rank is reported within
 * seconds (and, under mpirun --enable-recovery, `ds4cl -p` still writes
 * its result), `-p` needs the same context split or not, and a rank with
 * another model refuses to start. Runs on an MPI
 * build (make MPI=1) with mpirun present; skips with the reason otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/testkit/mkmodel.h"
#include "tests/fwd_util.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

#ifdef DS4CL_MPI
#include "mpi/dmpi.h"
#endif

/* The tiny vocabulary: 256 bytes, 48 merges, 7 specials. */
#define TINY_VOCAB (256 + 48 + 7)

static void need_mpi(void)
{
#ifndef DS4CL_MPI
    SKIP("built without MPI (make MPI=1)");
#endif
    if (!test_have_program("mpirun")) SKIP("mpirun is not installed (openmpi-bin)");
}

/* mpirun as root, on more ranks than cores, without pinning; every wait
 * of a killed job ends. Under the sanitizers, the ranks skip the leak
 * check: Open MPI unloads its components at MPI_Finalize, and what they
 * keep for the process's lifetime is then reported from unnamed modules
 * that no suppression can match (the engine's stages are leak-checked in
 * one process by tests/test_stage.c). */
static const char *mpirun(void)
{
    const char *v = getenv("DS4CL_VARIANT");
    bool san = v && strcmp(v, "rel") != 0;
    return test_printf("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 %s"
                       "timeout 300 mpirun --oversubscribe --bind-to none",
                       san ? "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 " : "");
}

static const char *write_model(mk_spec *s, const char *name)
{
    const char *path = test_tmp_path("%s", name);
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    return path;
}

static const char *tiny_model(const char *name, uint64_t seed)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.vocab = MK_VOCAB_TINY;
    s.seed = seed;
    return write_model(&s, name);
}

/* "1,2,…": n ids from a fixed sequence over the tiny vocabulary. */
static const char *ids(int from, int n)
{
    strbuf b = { 0 };
    for (int i = 0; i < n; i++) sb_printf(&b, "%s%d", i ? "," : "", (from + i * 37) % 250 + 1);
    char *s = test_strdup(sb_str(&b));
    sb_free(&b);
    return s;
}

/* ds4cl-bench --logits with `args`, alone or under mpirun -np ranks
 * (split: DS4CL_MPI_SPLIT or NULL); the rows land in out. */
static void logits_run(int ranks, const char *split, const char *out, const char *args)
{
    char *o = NULL;
    const char *bench = test_printf("%s/ds4cl-bench --logits '%s' --threads 1 --quant-sim none %s", test_bindir(), out, args);
    int rc = ranks == 1 ? test_runf(&o, "%s", bench)
                        : test_runf(&o, "DS4CL_MPI_SPLIT=%s %s -x DS4CL_MPI_SPLIT -np %d %s", split ? split : "",
                                    mpirun(), ranks, bench);
    CHECK_MSG(rc == 0, "%d rank(s), split %s: exit %d\n%s", ranks, split ? split : "default", rc, o);
}

/* Every logit of every row within 1e-3; returns the rows. */
static size_t check_same(const char *ref, const char *got, const char *what)
{
    size_t na, nb;
    const char *a = test_read_file(ref, &na), *b = test_read_file(got, &nb);
    CHECK_MSG(a && b, "%s: a logits file is missing", what);
    CHECK_MSG(na == nb && na > 0, "%s: %zu vs %zu bytes of logits", what, nb, na);
    const float *x = (const float *)(const void *)a, *y = (const float *)(const void *)b;
    for (size_t i = 0; i < na / 4; i++)
        CHECK_MSG(fabsf(x[i] - y[i]) <= 1e-3f && isfinite(y[i]), "%s: logit %zu is %g, single process %g", what, i,
                  (double)y[i], (double)x[i]);
    return na;
}

/* A prefill of 10 tokens in chunks of 4, then 6 decode steps: every
 * position's logits, on 1, 2 and 3 ranks with even and uneven splits. */
static void splits_agree(const char *model, const char *backend, int n_vocab, const char *const *splits2,
                         const char *const *splits3)
{
    const char *args = test_printf("-m '%s' --backend %s --chunk 4 --token-ids %s --feed %s", model, backend, ids(1, 10),
                                   ids(50, 6));
    const char *ref = test_tmp_path("one.f32");
    logits_run(1, NULL, ref, args);
    for (int i = 0; splits2[i]; i++) {
        const char *out = test_tmp_path("two-%d.f32", i);
        logits_run(2, splits2[i], out, args);
        CHECK_EQ_INT(check_same(ref, out, test_printf("2 ranks, split %s", splits2[i])), 7 * (size_t)n_vocab * 4);
    }
    for (int i = 0; splits3[i]; i++) {
        const char *out = test_tmp_path("three-%d.f32", i);
        logits_run(3, splits3[i], out, args);
        check_same(ref, out, test_printf("3 ranks, split %s", splits3[i]));
    }
}

TEST(mpi, tiny_logits_equal_the_single_process_on_2_and_3_ranks)
{
    need_mpi();
    const char *model = tiny_model("tiny.gguf", 1);
    /* "" splits by memory (even here); 1,5 puts one layer on rank 0 */
    static const char *const two[] = { "", "1,5", "5,1", NULL };
    static const char *const three[] = { "", "1,1,4", NULL };
    splits_agree(model, "cpu", TINY_VOCAB, two, three);
}

/* Flash's widths (4096 embedding, 64 heads x 512, four streams: 64 KiB of
 * streams per token and hop) on three layers with ratios 0, 4 and 128
 * and a hash-routed first layer; 16 experts and the tiny vocabulary keep
 * the file at ~800 MB. */
TEST(mpi, flash_width_logits_equal_the_single_process_on_2_and_3_ranks)
{
    need_mpi();
    mk_spec s;
    mk_spec_flash_width_small(&s);
    const char *model = write_model(&s, "flash.gguf");
    static const char *const two[] = { "", NULL };
    static const char *const three[] = { "", NULL };
    splits_agree(model, "cpu", TINY_VOCAB, two, three);
}

/* Ranks on the OpenCL backend (PoCL here): the same, against one process
 * on it. */
TEST(mpi, opencl_ranks_equal_the_single_process)
{
    need_mpi();
    fwd_require_backend(DS4_BACKEND_OPENCL);
    const char *model = tiny_model("tiny.gguf", 1);
    static const char *const two[] = { "", NULL };
    static const char *const three[] = { "", NULL };
    splits_agree(model, "opencl", TINY_VOCAB, two, three);
}

/* A snapshot saved alone resumes on 3 ranks (scatter), and the one those
 * ranks save is the single process's, byte for byte (gather). */
TEST(mpi, snapshots_gather_and_scatter_the_ranks_layers)
{
    need_mpi();
    const char *model = tiny_model("tiny.gguf", 3);
    const char *a = test_tmp_path("a.snap"), *b1 = test_tmp_path("b1.snap"), *b3 = test_tmp_path("b3.snap");
    const char *p = ids(1, 9), *pf = test_printf("%s,%s", p, ids(80, 3));
    logits_run(1, NULL, test_tmp_path("x.f32"),
               test_printf("-m '%s' --chunk 4 --token-ids %s --feed %s --save-session '%s'", model, p, ids(80, 3), a));
    const char *resume = test_printf("-m '%s' --chunk 4 --load-session '%s' --token-ids %s --feed %s --save-session", model,
                                     a, pf, ids(120, 4));
    logits_run(1, NULL, test_tmp_path("r1.f32"), test_printf("%s '%s'", resume, b1));
    logits_run(3, NULL, test_tmp_path("r3.f32"), test_printf("%s '%s'", resume, b3));
    check_same(test_tmp_path("r1.f32"), test_tmp_path("r3.f32"), "resumed on 3 ranks");
    /* had the ranks not received their layers, the rows would differ from
     * a fresh computation of the same tokens */
    logits_run(1, NULL, test_tmp_path("fresh.f32"),
               test_printf("-m '%s' --chunk 4 --token-ids %s --feed %s", model, pf, ids(120, 4)));
    check_same(test_tmp_path("fresh.f32"), test_tmp_path("r3.f32"), "resumed on 3 ranks vs fresh");
    size_t n1, n3;
    const char *s1 = test_read_file(b1, &n1), *s3 = test_read_file(b3, &n3);
    CHECK_MSG(s1 && s3 && n1 == n3 && !memcmp(s1, s3, n1), "the 3-rank snapshot (%zu bytes) is not the single one (%zu)",
              s3 ? n3 : 0, s1 ? n1 : 0);
}

/* Rank 1 is killed (SIGKILL) once rank 0 has written logits rows; a shell
 * keeps the launcher from ending the job itself, so rank 0 must notice
 * the silence: it fails with the rank named, soon after the timeout. */
TEST(mpi, a_killed_rank_is_reported_within_seconds)
{
    need_mpi();
    const char *model = tiny_model("tiny.gguf", 1);
    const char *out = test_tmp_path("k.f32"), *killed = test_tmp_path("killed_at");
    const char *bench = test_printf("%s/ds4cl-bench", test_bindir());
    const char *r0 = test_printf("%s --logits '%s' -m '%s' --threads 1 --token-ids 1,2 --feed %s", bench, out, model,
                                 ids(5, 3000));
    const char *r1 = test_printf("sh -c '%s & p=$!; while [ ! -s %s ]; do sleep 0.05; done; kill -9 $p; "
                                 "date +%%s.%%N > %s; sleep 120'",
                                 bench, out, killed);
    const char *ended = test_tmp_path("ended_at");
    char *o = NULL;
    test_runf(&o, "DS4CL_MPI_TIMEOUT=2 %s -x DS4CL_MPI_TIMEOUT -np 1 %s : -np 1 %s; date +%%s.%%N > %s", mpirun(), r0, r1,
              ended);
    CHECK_CONTAINS(o, "ds4cl-bench: rank 1 stopped answering");
    const char *k = test_read_file(killed, NULL), *e = test_read_file(ended, NULL);
    CHECK_MSG(k && e, "rank 1 was never killed:\n%s", o);
    double after = atof(e) - atof(k);
    CHECK_MSG(after < 15.0, "the job ended %.1f s after the kill (timeout 2 s):\n%s", after, o);
}

/* A rank opened on another file refuses to start, and says why. */
TEST(mpi, a_rank_with_another_model_refuses_to_start)
{
    need_mpi();
    const char *model = tiny_model("tiny.gguf", 1), *other = tiny_model("other.gguf", 2);
    const char *bench = test_printf("%s/ds4cl-bench", test_bindir());
    char *o = NULL;
    int rc = test_runf(&o, "%s -np 1 %s --logits '%s' -m '%s' --threads 1 --token-ids 1,2 --feed 3 : -np 1 env "
                           "DS4CL_MPI_MODEL='%s' %s",
                       mpirun(), bench, test_tmp_path("x.f32"), model, other, bench);
    CHECK_MSG(rc != 0, "a mismatched job ran:\n%s", o);
    CHECK_CONTAINS(o, "rank 1 (");
    CHECK_CONTAINS(o, "refusing to start");
    CHECK_CONTAINS(o, "is not rank 0's");
}

/* The engine's one splitting of layers by shares, which the ranks use. */
TEST(mpi, layer_ranges_follow_the_shares)
{
    int b[5];
    ds4_error err = { "" };
    double even[] = { 1, 1 }, three_one[] = { 3, 1 }, skew[] = { 100, 1, 1 }, zero[] = { 1, 0 };
    CHECK(ds4_split_layers(6, 2, even, "rank", b, &err) == 0);
    CHECK(b[0] == 0 && b[1] == 3 && b[2] == 6);
    CHECK(ds4_split_layers(43, 2, three_one, "rank", b, &err) == 0);
    CHECK_EQ_INT(b[1], 32);
    CHECK_EQ_INT(b[2], 43);
    /* every rank keeps a layer however small its share */
    CHECK(ds4_split_layers(6, 3, skew, "rank", b, &err) == 0);
    CHECK(b[1] == 4 && b[2] == 5 && b[3] == 6);
    CHECK(ds4_split_layers(2, 3, skew, "rank", b, &err) != 0);
    CHECK_CONTAINS(err.msg, "3 ranks need at least");
    CHECK(ds4_split_layers(6, 2, zero, "rank", b, &err) != 0);
    CHECK_CONTAINS(err.msg, "no share");
}

/* --mpi-bench: one row on rank 0 alone and one split over the ranks, in
 * the same run; a decode step moves one token's streams and id to rank 1
 * and its streams back (4 streams × 256 floats on the tiny shape). Its
 * speed is not checked here (bench/README.md). */
TEST(mpi, bench_rows_for_one_and_two_ranks)
{
    const char *model = tiny_model("tiny.gguf", 1);
    char *o = NULL;
    const char *bench = test_printf("%s/ds4cl-bench --mpi-bench -m '%s' --prompt-tokens 8 --gen-tokens 4 --reps 1",
                                    test_bindir(), model);
#ifndef DS4CL_MPI
    CHECK(test_runf(&o, "%s", bench) == 2);
    CHECK_CONTAINS(o, "needs a build with MPI (make MPI=1)");
#else
    need_mpi();
    int rc = test_runf(&o, "%s -np 2 %s 2>&1", mpirun(), bench);
    CHECK_MSG(rc == 0, "%s", o);
    CHECK_CONTAINS(o, "model,backend,threads,ranks,split,prompt,gen,decode_tok_s,ratio,bytes_per_token");
    CHECK_CONTAINS(o, ",cpu,1,1,-,8,4,");
    const char *two = strstr(o, ",cpu,1,2,\"layers 0-2 on rank 0");
    CHECK_MSG(two != NULL, "%s", o);
    CHECK_MSG(strstr(two, ",8196,2.0,") != NULL, "bytes per token: %s", two);
#endif
}

/* The smallest --ctx `ds4cl -p` takes on the tiny byte-level model: what
 * its refusal names (exit 2), alone or under mpirun (ranks: 0). */
static int min_ctx_named(const char *model, int ranks)
{
    const char *cmd = test_printf("'%s/ds4cl' -m '%s' -p hi --ctx 1024 --threads 1 --engine cpu 2>&1", test_bindir(), model);
    char *o = NULL;
    int rc = ranks ? test_runf(&o, "%s -np %d %s", mpirun(), ranks, cmd) : test_runf(&o, "%s", cmd);
    CHECK_MSG(rc == 2, "%d rank(s): exit %d\n%s", ranks, rc, o);
    const char *at = strstr(o, "take at least ");
    CHECK_MSG(at != NULL, "%d rank(s): %s", ranks, o);
    return atoi(at + strlen("take at least "));
}

/* The context the agent needs is the system prompt's (with the room a
 * turn and a compaction take), in this model's tokens: the same whether
 * the layers are split or not. */
TEST(mpi, prompt_mode_needs_the_same_context_split_or_not)
{
    need_mpi();
    const char *model = tiny_model("tiny.gguf", 1);
    sessions_test_home();
    int one = min_ctx_named(model, 0), two = min_ctx_named(model, 2);
    CHECK_EQ_INT(two, one);
    CHECK_MSG(one > 4096, "the byte-level vocabulary makes the system prompt long: %d", one);
}

/* A rank killed while `ds4cl -p --output-format stream-json` runs: under
 * `mpirun --enable-recovery` (README) the launcher leaves rank 0 alive,
 * so it ends the turn itself within DS4CL_MPI_TIMEOUT and the stream
 * still ends with an error result that names the rank. */
TEST(mpi, a_killed_rank_still_gives_prompt_mode_its_result)
{
    need_mpi();
    const char *model = tiny_model("tiny.gguf", 1);
    sessions_test_home();
    const char *ds4cl = test_printf("%s/ds4cl", test_bindir());
    const char *out = test_tmp_path("run.jsonl"), *pid = test_tmp_path("rank1.pid");
    const char *r0 = test_printf("%s -m '%s' -p hi --ctx 12000 --threads 1 --engine cpu --output-format stream-json",
                                 ds4cl, model);
    const char *r1 = test_printf("sh -c 'echo $$ > %s; exec %s'", pid, ds4cl);
    /* killed once the run has started (its system prompt takes a while) */
    const char *killer = test_printf("(while ! grep -q '\"type\":\"init\"' '%s' 2>/dev/null; do sleep 0.05; done; "
                                     "kill -9 $(cat '%s')) &",
                                     out, pid);
    char *o = NULL;
    test_runf(&o, "%s DS4CL_MPI_TIMEOUT=2 %s --enable-recovery -x DS4CL_MPI_TIMEOUT -np 1 %s : -np 1 %s > '%s' 2>&1",
              killer, mpirun(), r0, r1, out);
    const char *text = test_read_file(out, NULL);
    CHECK_MSG(text != NULL, "no output: %s", o);
    const char *r = strstr(text, "{\"type\":\"result\"");
    CHECK_MSG(r != NULL, "no result line:\n%s", text);
    CHECK_CONTAINS(r, "\"is_error\":true");
    CHECK_CONTAINS(r, "rank 1 stopped answering");
}
