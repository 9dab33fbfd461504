/* The measuring modes of ds4cl-bench that bench/README.md reports: the
 * stage-by-stage open time, the tokenizer comparison with the npm
 * reference and the integer 2-bit kernels' yardstick. Their numbers are not checked (speed lives in `make bench`),
 * their shape and their failures are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/testkit/mkmodel.h"
#include "engine/npm_vocab.h"
#include "cpu/qk.h"
#include "tests/test.h"

static const char *tiny_model(void)
{
    mk_spec s;
    mk_spec_tiny(&s);
    const char *path = test_tmp_path("tiny.gguf");
    ds4_error err = { { 0 } };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    return path;
}

TEST(bench, open_bench_reports_every_stage_cold_then_warm)
{
    const char *model = tiny_model();
    struct stat st;
    CHECK(stat(model, &st) == 0);
    char *out;
    int rc = test_runf(&out, "%s/ds4cl-bench --open-bench -m %s --runs 2", test_bindir(), model);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    char *save = NULL, *line = strtok_r(out, "\n", &save);
    CHECK(line != NULL);
    CHECK_STR_EQ(line, "run,cache,file_bytes,gguf_open_s,identity_s,tokenizer_s,bind_s,engine_open_s");
    int rows = 0;
    while ((line = strtok_r(NULL, "\n", &save))) {
        int run;
        char cache[8];
        long long bytes;
        double s[5];
        CHECK_MSG(sscanf(line, "%d,%7[a-z],%lld,%lf,%lf,%lf,%lf,%lf", &run, cache, &bytes, &s[0], &s[1], &s[2],
                         &s[3], &s[4]) == 8,
                  "row '%s'", line);
        CHECK_EQ_INT(run, rows);
        CHECK_STR_EQ(cache, rows == 0 ? "cold" : "warm");
        CHECK_EQ_INT(bytes, st.st_size);
        for (int i = 0; i < 5; i++) CHECK_MSG(s[i] >= 0 && s[i] < 60, "row '%s'", line);
        rows++;
    }
    CHECK_EQ_INT(rows, 3);

    rc = test_runf(&out, "%s/ds4cl-bench --open-bench -m %s/README.md", test_bindir(), test_root());
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "not a GGUF file");
    CHECK(!strstr(out, "run,cache"));
    rc = test_runf(&out, "%s/ds4cl-bench --open-bench", test_bindir());
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "usage: ds4cl-bench --open-bench");
    rc = test_runf(&out, "%s/ds4cl-bench --open-bench -m %s --runs 0", test_bindir(), model);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "--runs");
}

/* On a model with DeepSeek's vocabulary both tokenizers give the same ids,
 * and the bench says so next to the two rates. */
TEST(bench, tokenizer_bench_runs_both_tokenizers_on_the_same_text)
{
    if (!test_have_program("node") || !test_have_program("npm")) SKIP("node/npm not installed");
    char json[4096];
    ds4_error err = { { 0 } };
    if (npm_tokenizer_json_path(json, sizeof json, &err) != 0) SKIP("npm tokenizer unavailable: %s", err.msg);
    const char *model = test_tmp_path("npm.gguf");
    char *out;
    int rc = test_runf(&out, "%s/ds4cl-mkmodel --layers 1 --ratios 0 --experts 2 --experts-used 1 -q -o %s",
                       test_bindir(), model);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    const char *text = test_tmp_path("text.txt");
    const char *s = "Hello world! Ciao, come stai? 你好，世界。 12345678 ... \t\n  emoji 😀👍🏽 done.\n";
    test_write_file(text, s, strlen(s));
    rc = test_runf(&out, "%s/ds4cl-bench --tokenizer-bench %s -m %s --runs 2", test_bindir(), text, model);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    CHECK_CONTAINS(out, "impl,bytes,tokens,first_s,best_s,best_mb_per_s\n");
    CHECK_CONTAINS(out, test_printf("\nds4cl,%zu,", strlen(s)));
    CHECK_CONTAINS(out, test_printf("\nnpm,%zu,", strlen(s)));
    CHECK_CONTAINS(out, "# ids identical");
}

/* --quant-bench --qk-only runs the ggml command it is given first and reads
 * its MUL_MAT times (a stand-in script prints them here); levels the CPU
 * lacks get a row saying so, unknown ones are refused. */
TEST(bench, quant_bench_reads_the_ggml_yardstick_and_names_missing_levels)
{
    const char *fake = test_tmp_path("tbo.sh");
    FILE *f = fopen(fake, "w");
    CHECK(f != NULL);
    fputs("#!/bin/sh\n"
          "echo '  MUL_MAT(type_a=iq2_xxs,type_b=f32,m=4096,n=1,k=14336,bs=[1,1]):  69 runs - 11286.00 us/run - 117.44 MFLOP/run'\n"
          "echo '  MUL_MAT(type_a=q2_K,type_b=f32,m=4096,n=512,k=14336,bs=[1,1]):  1 runs - 1823994.00 us/run - 60.13 GFLOP/run'\n",
          f);
    fclose(f);
    CHECK(chmod(fake, 0755) == 0);
    char *out;
    /* a level this CPU lacks (with all of them, avx2's rows run for real) */
    qk_level lvl = QK_AVX2;
    for (int l = QK_AVX2; l < QK_N_LEVELS; l++)
        if (!qk_level_supported((qk_level)l)) lvl = (qk_level)l;
    int rc = test_runf(&out, "%s/ds4cl-bench --quant-bench --qk-only --threads 1 --reps 1 --levels %s --ggml %s",
                       test_bindir(), qk_level_name(lvl), fake);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    CHECK_CONTAINS(out, "IQ2_XXS 11286 / 0 us, Q2_K 0 / 1823994 us per run at n = 1 / 512");
    if (!qk_level_supported(lvl)) CHECK_CONTAINS(out, "IQ2_XXS  decode  6x(gate+up) 2048x4096      (not on this CPU)");
    rc = test_runf(&out, "%s/ds4cl-bench --quant-bench --qk-only --levels avx1024", test_bindir());
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "unknown SIMD level 'avx1024'");
}

/* The placement rows: one device, routed experts half and all on the
 * host, and the layers over two devices, each with its breakdown. */
TEST(bench, hybrid_bench_rows_and_their_breakdown)
{
    setenv("POCL_DEVICES", "pthread pthread", 1);
    const char *model = test_golden_path("A/model.gguf");
    if (!model) SKIP("the golden tiny model is not available");
    char *out;
    int rc = test_runf(&out, "%s/ds4cl --list-devices 2>&1", test_bindir());
    if (rc != 0 || !strstr(out, "  [1] ")) SKIP("two OpenCL devices are needed: %s", out);
    rc = test_runf(&out, "%s/ds4cl-bench --hybrid-bench -m %s --prefill 24 --gen-tokens 3 --rounds 1 --threads 2 "
                         "--split-devices 0,1 2>/dev/null",
                   test_bindir(), model);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "placement,host_expert_layers,prefill_tps,decode_tps,prefill_vs_device,decode_vs_device,step_ms,"
                        "handover_ms,handover_pct,host_experts_ms,wait_ms,device_ms,handover_bytes_per_token\n");
    CHECK_CONTAINS(out, "\ndevice,0,");
    CHECK_CONTAINS(out, "\nhybrid-half,3,");
    CHECK_CONTAINS(out, "\nhybrid-all,6,");
    CHECK_CONTAINS(out, "\nhybrid-all-streamed,6,");
    CHECK_CONTAINS(out, "\nsplit,0,");
    const char *dev = strstr(out, "\ndevice,");
    double ptps, dtps, pr, dr;
    CHECK(sscanf(dev, "\ndevice,0,%lf,%lf,%lf,%lf,", &ptps, &dtps, &pr, &dr) == 4);
    CHECK(ptps > 0 && dtps > 0 && pr == 1.0 && dr == 1.0);
    /* hybrid steps hand rows over and run experts on the host; a split
     * step moves one token's streams and its id */
    const char *all = strstr(out, "\nhybrid-all,");
    double f[11];
    CHECK(sscanf(all, "\nhybrid-all,6,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &f[0], &f[1], &f[2], &f[3], &f[4],
                 &f[5], &f[6], &f[7], &f[8], &f[9], &f[10]) == 11);
    CHECK(f[7] > 0);   /* host_experts_ms */
    CHECK(f[10] > 0);  /* handover bytes */
    const char *sp = strstr(out, "\nsplit,0,");
    CHECK(sscanf(sp, "\nsplit,0,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5],
                 &f[6], &f[7], &f[8], &f[9], &f[10]) == 11);
    CHECK_EQ_INT((long)f[10], 4 * 256 * 4 + 4); /* n_hc × n_embd floats and a token id */
}

/* --stream-bench: the mapped rows and one row per cache budget, each with
 * the cache's hit rate and read rate; a budget of every expert misses
 * only on first use. */
TEST(bench, stream_bench_rows_per_budget)
{
    const char *model = test_golden_path("A/model.gguf");
    if (!model) SKIP("the golden tiny model is not available");
    char *out;
    int rc = test_runf(&out, "%s/ds4cl-bench --stream-bench -m %s --budgets 25,100 --prompt-tokens 3 --gen-tokens 4 "
                             "--threads 2 2>&1",
                       test_bindir(), model);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "model,row,budget_pct,cache_bytes,prefill_tps,decode_tps,hit_rate,disk_bytes_per_token,"
                        "read_gbps_while_missing,disk_seq_gbps\n");
    CHECK_CONTAINS(out, "\nmodel.gguf,mapped-cold,,,");
    CHECK_CONTAINS(out, "\nmodel.gguf,resident,,,");
    const char *q = strstr(out, "\nmodel.gguf,cache-25%,25,");
    const char *all = strstr(out, "\nmodel.gguf,cache-100%,100,");
    CHECK(q && all);
    double c, ptps, dtps, hq, ha;
    CHECK(sscanf(q, "\nmodel.gguf,cache-25%%,25,%lf,%lf,%lf,%lf,", &c, &ptps, &dtps, &hq) == 4);
    CHECK(c > 0 && dtps > 0 && hq >= 0 && hq < 1);
    CHECK(sscanf(all, "\nmodel.gguf,cache-100%%,100,%lf,%lf,%lf,%lf,", &c, &ptps, &dtps, &ha) == 4);
    CHECK_MSG(ha > hq, "every expert cached hits %.3f, a quarter %.3f", ha, hq);
}

/* The batch bench's rows: every B batched but the first, and the ceiling
 * that reading each weight once per step allows, growing with B and
 * below B (the routed experts chosen by several rows are read once, the
 * others once each). */
TEST(bench, batch_bench_rows_and_their_read_ceiling)
{
    const char *model = tiny_model();
    char *out;
    int rc = test_runf(&out, "%s/ds4cl-bench --batch-bench -m %s --batches 1,2,4 --prompt-tokens 3 --gen-tokens 2 "
                             "--rounds 1 --threads 1 2>/dev/null",
                       test_bindir(), model);
    CHECK_MSG(rc == 0, "%s", out);
    const char *head = strstr(out, "read_ceiling_vs_batch_1,pct_of_ceiling\n");
    CHECK_MSG(head != NULL, "%s", out);
    double last = 0;
    int rows = 0;
    for (char *line = strtok(strchr(head, '\n') + 1, "\n"); line; line = strtok(NULL, "\n")) {
        /* the last columns: batch at 7, batched at 8, the ceiling at 17 */
        char *col[18];
        int n = 0;
        for (char *p = line; n < 18; p++) {
            col[n++] = p;
            if (!(p = strchr(p, ','))) break;
        }
        CHECK_MSG(n == 18, "a bad row: %s", line);
        int batch = atoi(col[6]);
        double ceiling = atof(col[16]);
        CHECK_MSG(!strncmp(col[7], batch > 1 ? "yes" : "no", batch > 1 ? 3 : 2), "%s", line);
        CHECK_MSG(batch == 1 ? ceiling == 1.0 : ceiling > last && ceiling <= batch, "%s", line);
        last = ceiling;
        rows++;
    }
    CHECK_EQ_INT(rows, 3);
}
