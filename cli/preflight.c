/* preflight.c — see preflight.h. */
#include "cli/preflight.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/commands.h"
#include "tools/tools.h"

/* Prints the refusal and keeps its text for the caller. */
static int refuse(ds4_error *why, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(ds4_error *why, int code, const char *fmt, ...)
{
    ds4_error e = { "" };
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ds4cl: %s\n", e.msg);
    if (why) *why = e;
    return code;
}

static int check_script(const ds4cl_options *o, ds4_error *why)
{
    if (o->backend != DS4_BACKEND_SCRIPT) return EXIT_DONE;
    FILE *f = fopen(o->script_path, "r");
    if (!f) {
        return refuse(why, EXIT_USAGE, "--engine script:%s: %s", o->script_path, strerror(errno));
    }
    fclose(f);
    return EXIT_DONE;
}

static int check_device(const ds4cl_options *o, ds4_error *why)
{
    if (o->backend == DS4_BACKEND_CPU && o->device) {
        return refuse(why, EXIT_USAGE, "--device %s picks an OpenCL device; add --backend opencl to use one", o->device);
    }
    if (o->split && o->backend != DS4_BACKEND_OPENCL) {
        return refuse(why, EXIT_USAGE, "--split %s shares layers between OpenCL devices; add --backend opencl --device A,B",
                o->split);
    }
    if (o->backend != DS4_BACKEND_OPENCL) return EXIT_DONE;
    if (o->split) {
        char pieces[DS4_MAX_DEVICES][DS4_DEVICE_PIECE_MAX], what[160];
        double shares[DS4_MAX_DEVICES];
        ds4_error serr = { "" };
        int n = ds4_parse_devices(o->device, "--device", pieces, &serr);
        if (n < 0) return refuse(why, EXIT_USAGE, "%s", serr.msg);
        if (n < 2) {
            return refuse(why, EXIT_USAGE, "--split %s needs several devices (--device A,B)", o->split);
        }
        snprintf(what, sizeof what, "--split %s", o->split);
        if (ds4_parse_shares(o->split, n, shares, what, "device", &serr)) return refuse(why, EXIT_USAGE, "%s", serr.msg);
    }
    ds4_device *devs = NULL;
    int n = 0, pick = -1;
    ds4_error err = { "" };
    if (ds4_backend_devices(DS4_BACKEND_OPENCL, o->device, &devs, &n, &pick, &err) != 0) {
        return refuse(why, EXIT_ERROR, "--backend opencl: %s", err.msg);
    }
    free(devs);
    if (pick < 0) {
        /* the message names --device=D or DS4CL_DEVICE=D */
        return refuse(why, EXIT_ERROR, "%s", err.msg);
    }
    return EXIT_DONE;
}

/* The rules are read the way the tools will read them, from the same
 * files, so that what passes here also loads when the agent starts. */
static int check_rules(const ds4cl_options *o, const char *ws, ds4_error *why)
{
    tool_env_config tc = { .workspace = ws, .rules_path = o->rules_path };
    ds4_error msg = { "" };
    tool_env *env = tool_env_new(&tc, &msg);
    if (env) {
        tool_env_free(env);
        return EXIT_DONE;
    }
    bool given = o->rules_path && strstr(msg.msg, o->rules_path);
    return refuse(why, given ? EXIT_USAGE : EXIT_ERROR, "%s%s", given ? "--rules: " : "", msg.msg);
}

static int check_memory_env(ds4_error *why)
{
    ds4_error err = { "" };
    if (ds4_memory_env_check(&err) == 0) return EXIT_DONE;
    return refuse(why, EXIT_USAGE, "%s", err.msg);
}

int preflight_check_engine(const ds4cl_options *o, ds4_error *why)
{
    int rc = check_memory_env(why);
    if (rc == EXIT_DONE) rc = check_script(o, why);
    if (rc == EXIT_DONE) rc = check_device(o, why);
    return rc;
}

int preflight_check(const ds4cl_options *o, const char *ws, ds4_error *why)
{
    int rc = preflight_check_engine(o, why);
    if (rc == EXIT_DONE) rc = check_rules(o, ws, why);
    return rc;
}
