/* The measuring modes of ds4cl-bench that bench/README.md reports: the
 * stage-by-stage open time and the tokenizer comparison with the npm
 * reference. Their numbers are not checked (speed lives in `make bench`),
 * their shape and their failures are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/testkit/mkmodel.h"
#include "engine/npm_vocab.h"
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
