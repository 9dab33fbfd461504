/* The three programs answer --help and --version and reject unknown flags
 * with exit status 2 and a message naming the flag; each finds the
 * backends it offers. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/agent_setup.h"
#include "cli/options.h"
#include "tests/test.h"

static const char *const programs[] = { "ds4cl", "ds4cl-bench", "ds4cl-mkmodel" };

TEST(cli, help_and_version)
{
    for (int i = 0; i < 3; i++) {
        char *out;
        int rc = test_runf(&out, "'%s/%s' --help", test_bindir(), programs[i]);
        CHECK_EQ_INT(rc, 0);
        CHECK_CONTAINS(out, "usage:");
        rc = test_runf(&out, "'%s/%s' --version", test_bindir(), programs[i]);
        CHECK_EQ_INT(rc, 0);
        CHECK_CONTAINS(out, programs[i]);
        CHECK_CONTAINS(out, DS4CL_VERSION);
    }
}

/* The help is written by hand: every option the parser takes must be in
 * it, as "--NAME" standing alone. */
TEST(cli, help_names_every_option)
{
    char *out;
    CHECK_EQ_INT(test_runf(&out, "'%s/ds4cl' --help", test_bindir()), 0);
    size_t n = 0;
    for (const char *name; (name = options_long_name(n)); n++) {
        const char *flag = test_printf("--%s", name);
        bool found = false;
        for (const char *p = out; !found && (p = strstr(p, flag)); p += strlen(flag)) {
            char next = p[strlen(flag)];
            found = !(next == '-' || (next >= 'a' && next <= 'z'));
        }
        CHECK_MSG(found, "ds4cl --help does not name %s", flag);
    }
    CHECK(n > 40);
}

TEST(cli, unknown_flag_is_a_usage_error)
{
    for (int i = 0; i < 3; i++) {
        char *out;
        int rc = test_runf(&out, "'%s/%s' --no-such-flag", test_bindir(), programs[i]);
        CHECK_EQ_INT(rc, 2);
        CHECK_CONTAINS(out, "--no-such-flag");
    }
}

TEST(cli, bad_values_are_usage_errors)
{
    static const char *const cases[][2] = {
        { "--ctx lots", "--ctx" },
        { "--backend cuda", "--backend" },
        { "--quant-sim some", "--quant-sim" },
        { "--temp -1", "--temp" },
        { "--top-p 2", "--top-p" },
        { "--output-format xml", "--output-format" },
        { "--dump-tokens -m x.gguf", "--dump-tokens" },
        { "stray-argument", "stray-argument" },
        { "-m", "-m" },
        { "--allow wirte -p x", "wirte" },
        { "--allow read,edti -p x", "edti" },
        /* every numeric flag: garbage, out of range, trailing junk */
        { "--ctx 100 -p x", "--ctx 100 is too small" },
        { "--ctx 0 -p x", "--ctx" },
        { "--ctx 12k -p x", "--ctx" },
        { "--ctx 99999999999 -p x", "--ctx" },
        { "-n 0 -p x", "--max-tokens" },
        { "--max-tokens -5 -p x", "--max-tokens" },
        { "--max-tokens 3x -p x", "--max-tokens" },
        { "--temp abc -p x", "--temp" },
        { "--temp 101 -p x", "--temp" },
        { "--temp nan -p x", "--temp" },
        { "--top-p 1.5 -p x", "--top-p" },
        { "--top-p inf -p x", "--top-p" },
        { "--top-k -1 -p x", "--top-k" },
        { "--top-k 2.5 -p x", "--top-k" },
        { "--min-p -0.5 -p x", "--min-p" },
        { "--seed -1 -p x", "--seed" },
        { "--seed 1e3 -p x", "--seed" },
        { "--seed 99999999999999999999999 -p x", "--seed" },
        { "--threads 0 -p x", "--threads" },
        { "--threads 4096 -p x", "--threads" },
        { "--threads two -p x", "--threads" },
        { "--max-tool-rounds 0 -p x", "--max-tool-rounds" },
        { "--max-tool-rounds many -p x", "--max-tool-rounds" },
        /* the number is the whole value: no blanks around it */
        { "--threads ' 4' -p x", "--threads" },
        { "--top-k '3 ' -p x", "--top-k" },
        { "--temp ' 0.5' -p x", "--temp" },
        { "--seed ' 7' -p x", "--seed" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        int rc = test_runf(&out, "'%s/ds4cl' %s", test_bindir(), cases[i][0]);
        CHECK_MSG(rc == 2, "'%s' exited %d, not 2:\n%s", cases[i][0], rc, out);
        CHECK_CONTAINS(out, cases[i][1]);
    }
}

/* DS4CL_CONFIRM_TIMEOUT sets the interactive agent's own deadline, which
 * the dialog's countdown reads: one number for both. */
TEST(cli, confirm_timeout_is_the_agents)
{
    ds4cl_options o;
    char *argv[] = { "ds4cl", NULL };
    CHECK_EQ_INT(options_parse(1, argv, &o), 0);
    agent_config cfg;
    setenv("DS4CL_CONFIRM_TIMEOUT", "60", 1);
    agent_setup_config(&cfg, &o, NULL, 0, "/", true);
    CHECK_EQ_INT(agent_confirm_timeout_ms(&cfg), 60000);
    setenv("DS4CL_CONFIRM_TIMEOUT", "8", 1);
    agent_setup_config(&cfg, &o, NULL, 0, "/", true);
    CHECK_EQ_INT(agent_confirm_timeout_ms(&cfg), 8000);
    setenv("DS4CL_CONFIRM_TIMEOUT", "soon", 1);
    agent_setup_config(&cfg, &o, NULL, 0, "/", true);
    CHECK_EQ_INT(agent_confirm_timeout_ms(&cfg), AGENT_CONFIRM_TIMEOUT_MS);
    unsetenv("DS4CL_CONFIRM_TIMEOUT");
    agent_setup_config(&cfg, &o, NULL, 0, "/", true);
    CHECK_EQ_INT(agent_confirm_timeout_ms(&cfg), AGENT_CONFIRM_TIMEOUT_MS);
}

/* Each --ctx refusal names the limit the number broke, and nothing else:
 * a context beyond the model's limit is no matter of memory. */
TEST(cli, ctx_refusals_name_the_real_limit)
{
    static const char *const cases[][3] = {
        { "--ctx 99999999999 -p x", "--ctx 99999999999 is beyond the model's limit", "1048576 tokens" },
        { "--ctx 2000000 -p x", "--ctx 2000000 is beyond the model's limit", "1048576 tokens" },
        { "--ctx 100 -p x", "--ctx 100 is too small", "at least 256 tokens" },
        { "--ctx 5 -p x", "--ctx 5 is too small", "at least 256 tokens" },
        { "--ctx 5 --model-info", "--ctx 5 is too small", "at least 16 tokens" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        int rc = test_runf(&out, "'%s/ds4cl' %s", test_bindir(), cases[i][0]);
        CHECK_MSG(rc == 2, "'%s' exited %d, not 2:\n%s", cases[i][0], rc, out);
        CHECK_CONTAINS(out, cases[i][1]);
        CHECK_CONTAINS(out, cases[i][2]);
        CHECK_MSG(!strstr(out, "≥ 16"), "'%s':\n%s", cases[i][0], out);
        CHECK_MSG(!strstr(out, "DS4CL_MEM_AVAILABLE"), "'%s' talks of memory:\n%s", cases[i][0], out);
    }
}

/* A memory size in the environment that is not one is refused with the
 * variable named, before any model is looked for: planning with the
 * detected memory would ignore what the user said. */
TEST(cli, memory_variables_that_are_not_sizes_are_refused)
{
    static const char *const vars[] = { "DS4CL_MEM_AVAILABLE", "DS4CL_DEVICE_MEM" };
    const char *missing = test_tmp_path("no-model.gguf");
    for (size_t i = 0; i < 2; i++) {
        char *out;
        int rc = test_runf(&out, "cd '%s' && %s=lots '%s/ds4cl' -m '%s' -p x", test_tmpdir(), vars[i], test_bindir(),
                           missing);
        CHECK_MSG(rc == 2, "%s=lots exited %d:\n%s", vars[i], rc, out);
        CHECK_CONTAINS(out, vars[i]);
        CHECK_CONTAINS(out, "=lots is not a memory size");
        CHECK_MSG(!strstr(out, missing), "the model was looked for first:\n%s", out);
        rc = test_runf(&out, "%s=lots '%s/ds4cl' -m '%s' --model-info", vars[i], test_bindir(), missing);
        CHECK_MSG(rc == 2, "--model-info with %s=lots exited %d:\n%s", vars[i], rc, out);
        CHECK_CONTAINS(out, "=lots is not a memory size");
        /* zero is no memory to plan with, not "detect it" */
        rc = test_runf(&out, "cd '%s' && %s=0 '%s/ds4cl' -m '%s' -p x", test_tmpdir(), vars[i], test_bindir(), missing);
        CHECK_MSG(rc == 2, "%s=0 exited %d:\n%s", vars[i], rc, out);
        CHECK_CONTAINS(out, "=0 leaves no memory to plan with");
        /* a size is taken */
        rc = test_runf(&out, "cd '%s' && %s=64G '%s/ds4cl' -m '%s' -p x", test_tmpdir(), vars[i], test_bindir(),
                       missing);
        CHECK_MSG(!strstr(out, "not a memory size"), "%s=64G:\n%s", vars[i], out);
    }
}

/* No program names a backend: each backend registers itself before main
 * (engine/backend.h), so what the programs link decides what they find.
 * Each program opens a model on each backend it offers; one that lost a
 * backend would answer that the backend is unknown. */
TEST(cli, every_program_opens_each_backend)
{
    const char *model = test_tmp_path("backends.gguf");
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-mkmodel' --tiny-vocab --layers 1 -q -o '%s'", test_bindir(), model);
    CHECK_MSG(rc == 0, "ds4cl-mkmodel exited %d:\n%s", rc, out);

    rc = test_runf(&out, "'%s/ds4cl' -m '%s' --engine cpu --model-info", test_bindir(), model);
    CHECK_MSG(rc == 0, "ds4cl on the cpu backend exited %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "cpu experts");
    /* without an OpenCL platform the backend still answers, with why */
    rc = test_runf(&out, "'%s/ds4cl' -m '%s' --engine opencl --model-info", test_bindir(), model);
    CHECK_MSG(!strstr(out, "unknown backend") && !strstr(out, "the ? backend"), "ds4cl has no opencl backend:\n%s", out);
    CHECK_CONTAINS(out, "OpenCL");
    const char *script = test_tmp_path("backends.jsonl");
    static const char reply[] = "{\"assistant\": \"</think>scripted hello\"}\n";
    test_write_file(script, reply, strlen(reply));
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' -p hi", test_tmpdir(), test_bindir(), model,
                   script);
    CHECK_MSG(rc == 0, "ds4cl on the script backend exited %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "scripted hello");

    const char *logits = test_tmp_path("backends.f32");
    for (int cl = 0; cl < 2; cl++) {
        rc = test_runf(&out, "'%s/ds4cl-bench' --logits '%s' -m '%s' --token-ids 1,2 --decode 1 --threads 1 --backend %s",
                       test_bindir(), logits, model, cl ? "opencl" : "cpu");
        CHECK_MSG(!strstr(out, "unknown backend"), "ds4cl-bench has no %s backend:\n%s", cl ? "opencl" : "cpu", out);
        if (!cl) CHECK_MSG(rc == 0, "ds4cl-bench on the cpu backend exited %d:\n%s", rc, out);
    }
}
