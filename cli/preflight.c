/* preflight.c — see preflight.h. */
#include "cli/preflight.h"
#include "engine/plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/commands.h"
#include "cli/memplan.h"
#include "tools/tools.h"

static int check_script(const ds4cl_options *o)
{
    if (o->backend != DS4_BACKEND_SCRIPT) return EXIT_DONE;
    FILE *f = fopen(o->script_path, "r");
    if (!f) {
        fprintf(stderr, "ds4cl: --engine script:%s: %s\n", o->script_path, strerror(errno));
        return EXIT_USAGE;
    }
    fclose(f);
    return EXIT_DONE;
}

static int check_device(const ds4cl_options *o)
{
    if (o->backend == DS4_BACKEND_CPU && o->device) {
        fprintf(stderr, "ds4cl: --device %s picks an OpenCL device; add --backend opencl to use one\n", o->device);
        return EXIT_USAGE;
    }
    if (o->split && o->backend != DS4_BACKEND_OPENCL) {
        fprintf(stderr, "ds4cl: --split %s shares layers between OpenCL devices; add --backend opencl --device A,B\n",
                o->split);
        return EXIT_USAGE;
    }
    if (o->backend != DS4_BACKEND_OPENCL) return EXIT_DONE;
    if (o->split) {
        int n = 1;
        for (const char *p = o->device ? o->device : ""; *p; p++) n += *p == ',';
        double shares[DS4_MAX_DEVICES];
        ds4_error serr = { "" };
        if (n < 2) {
            fprintf(stderr, "ds4cl: --split %s needs several devices (--device A,B)\n", o->split);
            return EXIT_USAGE;
        }
        if (n > DS4_MAX_DEVICES || plan_parse_split(o->split, n, shares, &serr)) {
            fprintf(stderr, "ds4cl: %s\n", n > DS4_MAX_DEVICES ? "--device: too many devices" : serr.msg);
            return EXIT_USAGE;
        }
    }
    ds4_device *devs = NULL;
    int n = 0, pick = -1;
    ds4_error err = { "" };
    if (ds4_backend_devices(DS4_BACKEND_OPENCL, o->device, &devs, &n, &pick, &err) != 0) {
        fprintf(stderr, "ds4cl: --backend opencl: %s\n", err.msg);
        return EXIT_ERROR;
    }
    free(devs);
    if (pick < 0) {
        /* the message names --device=D or DS4CL_DEVICE=D */
        fprintf(stderr, "ds4cl: %s\n", err.msg);
        return EXIT_ERROR;
    }
    return EXIT_DONE;
}

/* The rules are read the way the tools will read them, from the same
 * files, so that what passes here also loads when the agent starts. */
static int check_rules(const ds4cl_options *o, const char *ws)
{
    tool_env_config tc = { .workspace = ws, .rules_path = o->rules_path };
    ds4_error msg = { "" };
    tool_env *env = tool_env_new(&tc, &msg);
    if (env) {
        tool_env_free(env);
        return EXIT_DONE;
    }
    bool given = o->rules_path && strstr(msg.msg, o->rules_path);
    fprintf(stderr, "ds4cl: %s%s\n", given ? "--rules: " : "", msg.msg);
    return given ? EXIT_USAGE : EXIT_ERROR;
}

static int check_memory_env(void)
{
    ds4_error err = { "" };
    if (memplan_env_check(&err) == 0) return EXIT_DONE;
    fprintf(stderr, "ds4cl: %s\n", err.msg);
    return EXIT_USAGE;
}

int preflight_check_engine(const ds4cl_options *o)
{
    int rc = check_memory_env();
    if (rc == EXIT_DONE) rc = check_script(o);
    if (rc == EXIT_DONE) rc = check_device(o);
    return rc;
}

int preflight_check(const ds4cl_options *o, const char *ws)
{
    int rc = preflight_check_engine(o);
    if (rc == EXIT_DONE) rc = check_rules(o, ws);
    return rc;
}
