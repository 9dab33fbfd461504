/* bench-search.c — times the search tool over a tree: one call per run,
 * prints the milliseconds and the first line of the result. Built and run
 * by build-aux/bench-search.sh. */
#include "tools/tools.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench-search DIR QUERY [regex|literal] [case|nocase] [runs]\n");
        return 2;
    }
    bool regex = argc > 3 && !strcmp(argv[3], "regex");
    bool nocase = argc > 4 && !strcmp(argv[4], "nocase");
    int runs = argc > 5 ? atoi(argv[5]) : 3;
    tool_env_config cfg = { .workspace = argv[1], .yes_to_all = true };
    char err[256];
    tool_env *env = tool_env_new(&cfg, err, sizeof err);
    if (!env) {
        fprintf(stderr, "bench-search: %s\n", err);
        return 1;
    }
    json_object *a = json_object_new_object();
    json_object_object_add(a, "query", json_object_new_string(argv[2]));
    json_object_object_add(a, "regex", json_object_new_boolean(regex));
    json_object_object_add(a, "case_sensitive", json_object_new_boolean(!nocase));
    json_object_object_add(a, "max_results", json_object_new_int(1000));
    const char *args = json_object_to_json_string(a);
    double best = 1e18;
    char first[400] = "";
    for (int i = 0; i < runs; i++) {
        tool_result r;
        double t0 = now_ms_();
        tools_run(env, "search", args, NULL, &r);
        double t = now_ms_() - t0;
        if (t < best) best = t;
        size_t n = strcspn(r.text, "\n");
        snprintf(first, sizeof first, "%.*s", (int)(n < 399 ? n : 399), r.text);
        tool_result_free(&r);
    }
    printf("%.1f\t%s\n", best, first);
    json_object_put(a);
    tool_env_free(env);
    return 0;
}
