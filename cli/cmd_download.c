/* cmd_download.c — `ds4cl download [TARGET|URL] [--dir D] [--token T]`:
 * fetch a model file and make it the default model. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/base.h"
#include "cli/commands.h"
#include "download/download.h"
#include "cli/model_path.h"
#include "base/progress.h"

#define DEFAULT_TARGET "q2-imatrix"

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

static int env_int(const char *name, int dflt, int min, int max)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    int n;
    ds4_error err = { "" };
    if (num_parse_int(v, min, max, &n, &err)) {
        fprintf(stderr, "ds4cl: ignoring %s: %s\n", name, err.msg);
        return dflt;
    }
    return n;
}

static bool host_is(const char *url, const char *host)
{
    const char *p = strstr(url, "://");
    if (!p) return false;
    p += 3;
    size_t n = strcspn(p, "/:?#");
    return n == strlen(host) && !strncasecmp(p, host, n);
}

/* The Hugging Face token: --token, else $HF_TOKEN, else the token file the
 * Hugging Face tools keep. Only --token is sent to hosts other than the
 * model repository's, so a user's HF token never leaks to a random URL. */
static char *pick_token(const ds4cl_options *o, bool repo_host)
{
    if (o->token && *o->token) return strdup(o->token);
    if (!repo_host) return NULL;
    const char *env = getenv("HF_TOKEN");
    if (env && *env) return strdup(env);
    char path[PATH_MAX];
    const char *hf_home = getenv("HF_HOME"), *home = getenv("HOME");
    if (hf_home && *hf_home) snprintf(path, sizeof path, "%s/token", hf_home);
    else if (home && *home) snprintf(path, sizeof path, "%s/.cache/huggingface/token", home);
    else return NULL;
    char *t = file_read_all(path, NULL);
    if (!t) return NULL;
    t[strcspn(t, "\r\n")] = 0;
    if (!*t) { free(t); return NULL; }
    return t;
}

static void make_default(const char *dest)
{
    char dflt[PATH_MAX];
    ds4_error err = { "" };
    if (default_model_set(dest, &err) != 0) {
        fprintf(stderr, "ds4cl: could not make it the default model: %s\n", err.msg);
        fprintf(stderr, "Use it with: ds4cl -m %s\n", dest);
        return;
    }
    fprintf(stderr, "default model: %s -> %s\n",
            default_model_path(dflt, sizeof dflt) ? dflt : "(default)", dest);
}

int cmd_download(const ds4cl_options *o)
{
    const char *what = o->download_what ? o->download_what : DEFAULT_TARGET;
    char url[4096], file[1024], err[512];
    ds4_error rerr = { "" };
    if (download_resolve(what, NULL, url, sizeof url, file, sizeof file, &rerr) != 0) {
        fprintf(stderr, "ds4cl: %s\n", rerr.msg);
        return EXIT_USAGE;
    }
    const download_target *target = download_target_find(what);
    bool named = target != NULL;

    char dir[PATH_MAX + 16];
    if (o->download_dir) {
        snprintf(dir, sizeof dir, "%s", o->download_dir);
    } else {
        char data[PATH_MAX];
        if (!xdg_dir(XDG_DATA, data, sizeof data)) {
            fprintf(stderr, "ds4cl: no home directory to download into; use --dir D\n");
            return EXIT_ERROR;
        }
        snprintf(dir, sizeof dir, "%s/models", data);
    }
    if (base_mkdir_p(dir, 0755) != 0) {
        fprintf(stderr, "ds4cl: cannot create %s: %s\n", dir, strerror(errno));
        return EXIT_ERROR;
    }
    char dest[PATH_MAX + 1100];
    snprintf(dest, sizeof dest, "%s/%s", dir, file);

    struct stat st;
    if (stat(dest, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        fprintf(stderr, "already downloaded: %s\n", dest);
        make_default(dest);
        return EXIT_DONE;
    }

    if (named) fprintf(stderr, "downloading %s (%s)\n", target->name, target->about);
    fprintf(stderr, "from %s\nto   %s\n", url, dest);

    bool repo_host = named || host_is(url, "huggingface.co");
    char *token = pick_token(o, repo_host);
    download_request rq = {
        .url = url,
        .dest = dest,
        .token = token,
        .max_retries = env_int("DS4CL_DOWNLOAD_RETRIES", 8, 0, 1000),
        .backoff_ms = env_int("DS4CL_DOWNLOAD_BACKOFF_MS", 1000, 1, 3600 * 1000),
        .backoff_max_ms = 30000,
        .stall_timeout_s = env_int("DS4CL_DOWNLOAD_STALL_S", 60, 1, 3600),
        .show_progress = true,
        .interrupted = &g_interrupted,
    };
    if (rq.backoff_max_ms < rq.backoff_ms) rq.backoff_max_ms = rq.backoff_ms;

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    double t0 = base_now_ms();
    download_result res;
    download_status ds = download_file(&rq, &res);

    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(token);

    char a[32], b[32];
    if (ds == DOWNLOAD_INTERRUPTED) {
        fprintf(stderr, "\ninterrupted; %s kept in %s.part — run the same command again to resume\n",
                format_bytes(a, sizeof a, res.size), dest);
        return EXIT_INTERRUPTED;
    }
    if (ds != DOWNLOAD_OK) {
        fprintf(stderr, "ds4cl: download failed: %s\n", res.error);
        char part[sizeof dest + 8];
        snprintf(part, sizeof part, "%s.part", dest);
        if (stat(part, &st) == 0 && st.st_size > 0)
            fprintf(stderr, "%s kept in %s — run the same command again to resume\n",
                    format_bytes(a, sizeof a, (uint64_t)st.st_size), part);
        return EXIT_ERROR;
    }
    double secs = (base_now_ms() - t0) / 1000.0;
    fprintf(stderr, "saved %s (%s%s; %s fetched in %s)\n", dest, format_bytes(a, sizeof a, res.size),
            res.sha256_checked ? ", SHA-256 verified" : "", format_bytes(b, sizeof b, res.fetched),
            format_duration(err, sizeof err, secs));
    make_default(dest);
    fprintf(stderr, "next: ds4cl --model-info   (then: ds4cl --ctx auto)\n");
    return EXIT_DONE;
}
