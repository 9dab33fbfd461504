/* memory_detect.c — how much memory there is: host memory (MemAvailable,
 * cgroup limits, $DS4CL_MEM_AVAILABLE), the OpenCL device's, and the
 * check of the override variables (engine/ds4.h, "memory planning"). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/ds4.h"

#define UNLIMITED_CGROUP (1ull << 60)

int ds4_memory_parse_meminfo(const char *text, const char *key, uint64_t *out)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, kl) != 0 || line[kl] != ':') continue;
        char *end;
        unsigned long long v = strtoull(line + kl + 1, &end, 10);
        while (*end == ' ') end++;
        *out = !strncmp(end, "kB", 2) ? (uint64_t)v * 1024 : (uint64_t)v;
        return 0;
    }
    return -1;
}

static int read_u64_file(const char *path, uint64_t *out, bool *is_max)
{
    char *t = file_read_all(path, NULL);
    if (!t) return -1;
    int rc = 0;
    if (is_max) *is_max = !strncmp(t, "max", 3);
    if (is_max && *is_max) {
        *out = 0;
    } else {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(t, &end, 10);
        if (errno || end == t) rc = -1;
        else *out = v;
    }
    free(t);
    return rc;
}

static uint64_t stat_key(const char *dir, const char *key)
{
    char path[PATH_MAX * 2 + 32];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    char *t = file_read_all(path, NULL);
    if (!t) return 0;
    uint64_t v = 0;
    size_t kl = strlen(key);
    for (char *line = t; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            v = strtoull(line + kl + 1, NULL, 10);
            break;
        }
    }
    free(t);
    return v;
}

/* Walks dir and its ancestors up to root, taking the smallest headroom. */
static bool walk_levels(const char *root, const char *cg_path, bool v2, uint64_t *best)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", cg_path);
    size_t n = strlen(rel);
    while (n > 1 && rel[n - 1] == '/') rel[--n] = 0;
    bool found = false;
    for (;;) {
        char dir[PATH_MAX * 2], p_limit[PATH_MAX * 2 + 32], p_usage[PATH_MAX * 2 + 32];
        snprintf(dir, sizeof dir, "%s%s%s", root, v2 ? "" : "/memory", strcmp(rel, "/") ? rel : "");
        snprintf(p_limit, sizeof p_limit, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        snprintf(p_usage, sizeof p_usage, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
        uint64_t limit = 0, usage = 0;
        bool is_max = false;
        if (read_u64_file(p_limit, &limit, &is_max) == 0 && !is_max && limit < UNLIMITED_CGROUP &&
            read_u64_file(p_usage, &usage, NULL) == 0) {
            /* Page cache the kernel can drop counts as usage but is available. */
            uint64_t cache = stat_key(dir, v2 ? "inactive_file" : "total_inactive_file");
            uint64_t used = usage > cache ? usage - cache : 0;
            uint64_t avail = limit > used ? limit - used : 0;
            if (!found || avail < *best) *best = avail;
            found = true;
        }
        if (!strcmp(rel, "/") || !rel[0]) break;
        char *slash = strrchr(rel, '/');
        if (slash == rel) rel[1] = 0;
        else *slash = 0;
    }
    return found;
}

int ds4_memory_cgroup_available(const char *sysfs_root, const char *proc_cgroup, uint64_t *out)
{
    bool found = false;
    uint64_t best = 0;
    for (const char *line = proc_cgroup; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *c1 = strchr(line, ':');
        if (!c1) continue;
        const char *c2 = strchr(c1 + 1, ':');
        if (!c2) continue;
        size_t plen = strcspn(c2 + 1, "\n");
        char path[PATH_MAX];
        if (plen == 0 || plen >= sizeof path) continue;
        memcpy(path, c2 + 1, plen);
        path[plen] = 0;
        size_t clen = (size_t)(c2 - c1 - 1);
        bool v2 = clen == 0 && line[0] == '0';
        bool v1_memory = false;
        for (const char *p = c1 + 1; p < c2;) {
            size_t k = strcspn(p, ",:");
            if (k == 6 && !strncmp(p, "memory", 6)) v1_memory = true;
            p += k + 1;
        }
        if (!v2 && !v1_memory) continue;
        uint64_t v = 0;
        if (walk_levels(sysfs_root, path, v2, &v) && (!found || v < best)) {
            best = v;
            found = true;
        }
    }
    if (!found) return -1;
    *out = best;
    return 0;
}

int ds4_memory_host_available(uint64_t *bytes, char *source, size_t source_n)
{
    const char *env = getenv("DS4CL_MEM_AVAILABLE");
    if (env && *env) {
        if (num_parse_size(env, bytes, NULL) == 0) {
            snprintf(source, source_n, "DS4CL_MEM_AVAILABLE");
            return 0;
        }
        /* not a size: ds4_memory_env_check refuses it before any command
         * plans, so here it only falls back to what is detected */
    }
    char *mi = file_read_all("/proc/meminfo", NULL);
    uint64_t avail = 0;
    bool have = mi && ds4_memory_parse_meminfo(mi, "MemAvailable", &avail) == 0;
    free(mi);
    if (have) snprintf(source, source_n, "MemAvailable");
    char *cg = file_read_all("/proc/self/cgroup", NULL);
    uint64_t cg_avail;
    if (cg && ds4_memory_cgroup_available("/sys/fs/cgroup", cg, &cg_avail) == 0 && (!have || cg_avail < avail)) {
        avail = cg_avail;
        have = true;
        snprintf(source, source_n, "cgroup memory limit");
    }
    free(cg);
    if (!have) return -1;
    *bytes = avail;
    return 0;
}

int ds4_memory_env_check(ds4_error *err)
{
    static const char *const vars[] = { "DS4CL_MEM_AVAILABLE", "DS4CL_DEVICE_MEM" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *env = getenv(vars[i]);
        uint64_t v;
        if (!env || !*env) continue;
        bool size = num_parse_size(env, &v, NULL) == 0;
        if (!size || v == 0)
            return ds4_error_set(err, "%s=%s %s: give bytes or a size such as 64G or 512M (or unset it to use the "
                                      "memory detected)", vars[i], env,
                                 size ? "leaves no memory to plan with" : "is not a memory size");
    }
    return 0;
}

uint64_t ds4_memory_device_override(void)
{
    const char *env = getenv("DS4CL_DEVICE_MEM");
    uint64_t v;
    if (env && *env && num_parse_size(env, &v, NULL) == 0) return v;
    return 0;
}

/* The engine's device enumeration and selection rule; no context is
 * created. */
int ds4_memory_opencl_device(const char *device, ds4_memory_device *out)
{
    memset(out, 0, sizeof *out);
    ds4_device *devs;
    int n, i;
    ds4_error err = { "" };
    if (ds4_backend_devices(DS4_BACKEND_OPENCL, device, &devs, &n, &i, &err) != 0) return -1;
    if (i >= 0) {
        snprintf(out->name, sizeof out->name, "%s", devs[i].name);
        out->global_mem = devs[i].memory;
        out->unified = devs[i].shares_host_memory;
    }
    free(devs);
    return i >= 0 && out->global_mem > 0 ? 0 : -1;
}
