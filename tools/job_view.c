/* job_view.c — bash jobs as the model sees them (see job_view.h), and the
 * job helpers of tools.h. */
#include "tools/job_view.h"

#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WHOLE_MAX_BYTES 8192
#define WHOLE_MAX_LINES 200
#define HEAD_LINES 40
#define TAIL_LINES 60
#define HEAD_BYTES 4096
#define TAIL_BYTES 8192
#define PROGRESS_MS 200
#define PROGRESS_MAX (64u * 1024u)

/* ---- terminal output made plain ------------------------------------------------------- */

/* Appends command output without escape sequences: colours and cursor
 * movement are dropped, a carriage return keeps what was drawn over the
 * line last (progress bars), backspace takes back a character, and other
 * control characters are shown visibly. */
static void sanitize_append(strbuf *b, const char *s, size_t n)
{
    strbuf line = {0};
    size_t i = 0;
    while (i <= n) {
        if (i == n || s[i] == '\n') {
            sb_append_visible(b, sb_str(&line), line.len);
            if (i < n) sb_putc(b, '\n');
            sb_clear(&line);
            i++;
            continue;
        }
        unsigned char c = (unsigned char)s[i];
        if (c == 0x1b) {
            i++;
            if (i >= n) break;
            unsigned char k = (unsigned char)s[i++];
            if (k == '[') {
                while (i < n && !((unsigned char)s[i] >= 0x40 && (unsigned char)s[i] <= 0x7e)) i++;
                i++;
            } else if (k == ']' || k == 'P' || k == 'X' || k == '^' || k == '_') {
                while (i < n && s[i] != 0x07 && !(s[i] == 0x1b && i + 1 < n && s[i + 1] == '\\')) i++;
                i += i < n && s[i] == 0x1b ? 2 : 1;
            }
            continue;
        }
        if (c == '\r') {
            if (i + 1 < n && s[i + 1] == '\n') { i++; continue; }
            if (i + 1 < n) sb_clear(&line);
            i++;
            continue;
        }
        if (c == '\b') {
            if (line.len) {
                size_t k = line.len - 1;
                while (k > 0 && ((unsigned char)line.s[k] & 0xC0) == 0x80) k--;
                line.len = k;
                line.s[k] = 0;
            }
            i++;
            continue;
        }
        /* C1 controls in UTF-8 (U+0080–U+009F) */
        if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9F) {
            i += 2;
            continue;
        }
        sb_putc(&line, (char)c);
        i++;
    }
    sb_free(&line);
}

/* ---- reading the log ------------------------------------------------------------------ */

static size_t pread_all(int fd, char *buf, size_t n, size_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

static size_t count_newlines(int fd, size_t from, size_t to)
{
    char buf[65536];
    size_t n = 0;
    while (from < to) {
        size_t want = to - from < sizeof buf ? to - from : sizeof buf;
        size_t got = pread_all(fd, buf, want, from);
        if (!got) break;
        for (const char *p = buf; (p = memchr(p, '\n', got - (size_t)(p - buf))); p++) n++;
        from += got;
    }
    return n;
}

/* Appends log bytes [from, to): all of it when small, otherwise its first
 * and last lines with a note of what was left out. */
static void append_region(strbuf *b, job *j, size_t from, size_t to)
{
    size_t len = to - from;
    size_t lines = count_newlines(job_log_fd(j), from, to);
    if (len <= WHOLE_MAX_BYTES && lines <= WHOLE_MAX_LINES) {
        char *buf = xmalloc(len + 1);
        size_t got = pread_all(job_log_fd(j), buf, len, from);
        sanitize_append(b, buf, got);
        if (got && buf[got - 1] != '\n') sb_putc(b, '\n');
        free(buf);
        return;
    }
    char head[HEAD_BYTES];
    size_t hn = pread_all(job_log_fd(j), head, sizeof head, from);
    size_t hl = 0, hend = 0;
    for (size_t i = 0; i < hn && hl < HEAD_LINES; i++)
        if (head[i] == '\n') { hl++; hend = i + 1; }
    if (hl == 0) hend = hn; /* one long line */
    sanitize_append(b, head, hend);
    if (hend && head[hend - 1] != '\n') sb_puts(b, " …\n");
    size_t tstart = to > TAIL_BYTES ? to - TAIL_BYTES : 0;
    if (tstart < from + hend) tstart = from + hend;
    char *tail = xmalloc(TAIL_BYTES);
    size_t tn = pread_all(job_log_fd(j), tail, to - tstart, tstart);
    /* the last TAIL_LINES lines, starting at a line start */
    size_t k = tn, tl = 0;
    while (k > 0) {
        if (tail[k - 1] == '\n' && k != tn) {
            if (++tl >= TAIL_LINES) break;
        }
        k--;
    }
    if (k == 0 && tstart > from + hend) {
        const char *nl = memchr(tail, '\n', tn);
        k = nl ? (size_t)(nl - tail) + 1 : 0;
    }
    size_t tail_from = tstart + k;
    size_t skipped_lines = count_newlines(job_log_fd(j), from + hend, tail_from);
    size_t skipped_bytes = tail_from - (from + hend);
    if (skipped_bytes)
        sb_printf(b, "[… %zu lines (%zu bytes) not shown; the whole log is %s …]\n", skipped_lines,
                  skipped_bytes, j->log_path);
    sanitize_append(b, tail + k, tn - k);
    if (tn > k && tail[tn - 1] != '\n') sb_putc(b, '\n');
    free(tail);
}

/* ---- observations --------------------------------------------------------------------- */

static const char *signame(int sig)
{
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case SIGINT: return "SIGINT";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGPIPE: return "SIGPIPE";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

static double elapsed_s(const job *j)
{
    return ((j->done ? j->end_ms : base_now_ms()) - j->start_ms) / 1000.0;
}

static void status_words(strbuf *b, const job *j)
{
    if (!j->done) {
        sb_printf(b, "running for %.1f s (timeout %d s)", elapsed_s(j), j->timeout_s);
        if (j->stopping) sb_puts(b, ", being stopped");
        if (j->shell_exited) {
            sb_puts(b, "; the shell has exited (");
            if (WIFEXITED(j->shell_status)) sb_printf(b, "status %d", WEXITSTATUS(j->shell_status));
            else sb_printf(b, "%s", signame(WTERMSIG(j->shell_status)));
            sb_puts(b, ") but processes it started in the background are still running");
        }
        return;
    }
    if (!j->shell_exited) sb_puts(b, "ended (exit status unknown)");
    else if (WIFEXITED(j->shell_status)) sb_printf(b, "exit status %d", WEXITSTATUS(j->shell_status));
    else {
        int sig = WTERMSIG(j->shell_status);
        sb_printf(b, "killed by %s (%d; exit status %d)", signame(sig), sig, 128 + sig);
    }
    sb_printf(b, " after %.1f s", elapsed_s(j));
    if (j->timed_out) sb_printf(b, " — timed out: stopped at the %d s limit", j->timeout_s);
    else if (j->stopping) sb_puts(b, " — stopped");
}

void job_observe(tool_env *env, job *j, strbuf *b)
{
    job_poll(j);
    sandbox_probe(env);
    size_t size = job_log_size(j);
    bool first = j->shown_upto == 0;
    sb_printf(b, "job %d: ", j->id);
    status_words(b, j);
    sb_putc(b, '\n');
    if (!env->sandbox.noted) {
        env->sandbox.noted = true;
        sb_printf(b, "(note: %s)\n", env->sandbox.status);
    }
    if (first && !j->sandboxed && sandbox_active(env)) {
        sb_puts(b, "(ran without the sandbox)\n");
    }
    if (size <= j->shown_upto) {
        sb_puts(b, first ? "(no output)\n" : "(no new output)\n");
    } else {
        size_t lines = count_newlines(job_log_fd(j), j->shown_upto, size);
        if (!first) sb_printf(b, "new output (%zu line%s):\n", lines, lines == 1 ? "" : "s");
        else if (size > WHOLE_MAX_BYTES || lines > WHOLE_MAX_LINES)
            sb_printf(b, "output (%zu lines, %zu bytes; first and last lines shown):\n", lines, size);
        append_region(b, j, j->shown_upto, size);
        j->shown_upto = size;
    }
    if (j->log_capped) sb_puts(b, "(the log reached its size limit; later output was discarded)\n");
    if (!j->done)
        sb_printf(b, "It keeps running in the background. bash_status job=%d shows new output "
                     "(refresh_sec=N waits up to N s for it to end); bash_stop job=%d stops it.\n",
                  j->id, j->id);
    else {
        j->final_reported = true;
        job_release(j);
    }
}

/* ---- waiting ---------------------------------------------------------------------------- */

static void send_progress(job *j, const tool_call_ctx *ctx)
{
    if (!ctx->progress) return;
    size_t size = job_log_size(j);
    if (size <= j->progress_upto) return;
    size_t from = j->progress_upto;
    if (size - from > PROGRESS_MAX) from = size - PROGRESS_MAX;
    char *buf = xmalloc(size - from);
    size_t got = pread_all(job_log_fd(j), buf, size - from, from);
    /* only whole lines, unless the job is over */
    size_t end = got;
    if (!j->done) {
        while (end > 0 && buf[end - 1] != '\n') end--;
        if (end == 0 && got >= PROGRESS_MAX) end = got;
    }
    if (end) {
        strbuf t = {0};
        sanitize_append(&t, buf, end);
        ctx->progress(ctx->ud, sb_str(&t), t.len);
        sb_free(&t);
        j->progress_upto = from + end;
    }
    free(buf);
}

/* Waits until the job is done or wait_ms passed (< 0: no limit). Returns
 * false when the call was cancelled (the job is then being stopped). */
bool job_wait(job *j, double wait_ms, const tool_call_ctx *ctx)
{
    double until = wait_ms < 0 ? -1 : base_now_ms() + wait_ms;
    double next_progress = base_now_ms() + PROGRESS_MS;
    for (;;) {
        job_poll(j);
        if (j->done) break;
        if (tool_cancelled(ctx)) {
            job_stop(j);
            return false;
        }
        double now = base_now_ms();
        if (until >= 0 && now >= until) break;
        if (now >= next_progress) {
            send_progress(j, ctx);
            next_progress = now + PROGRESS_MS;
        }
        if (j->report_fd >= 0) {
            struct pollfd pf = { j->report_fd, POLLIN, 0 };
            poll(&pf, 1, 20);
            if (pf.revents & (POLLHUP | POLLERR)) {
                /* the supervisor is exiting: reap it soon */
                struct timespec ts = { 0, 2 * 1000 * 1000 };
                nanosleep(&ts, NULL);
            }
        } else {
            struct timespec ts = { 0, 20 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    send_progress(j, ctx);
    return true;
}

int job_interrupted(tool_env *env, job *j, tool_result *out)
{
    strbuf b = {0};
    sb_printf(&b, "Tool error: interrupted by the user; job %d was stopped after %.1f s.\n", j->id, elapsed_s(j));
    size_t size = job_log_size(j);
    if (size > j->shown_upto) {
        sb_puts(&b, "Output so far:\n");
        append_region(&b, j, j->shown_upto, size);
        j->shown_upto = size;
    }
    (void)env;
    free(out->text);
    out->text = sb_take(&b);
    out->is_error = true;
    return -1;
}

job *job_find_arg(tool_env *env, json_object *args, tool_result *out)
{
    long long id = 0;
    targ_int(args, "job", &id);
    job *j = jobs_find(env, (int)id);
    if (j) return j;
    strbuf b = {0};
    sb_printf(&b, "there is no job %lld", id);
    if (env->jobs && env->jobs->n) {
        sb_puts(&b, " (jobs:");
        for (size_t i = 0; i < env->jobs->n; i++) sb_printf(&b, " %d", env->jobs->v[i]->id);
        sb_puts(&b, ")");
    } else {
        sb_puts(&b, "; no job has been started");
    }
    tool_fail(out, "%s", sb_str(&b));
    sb_free(&b);
    return NULL;
}

/* ---- lists and summaries ------------------------------------------------------------- */

void jobs_list(tool_env *env, strbuf *b)
{
    if (!env->jobs || !env->jobs->n) {
        sb_puts(b, "No bash jobs have been started.\n");
        return;
    }
    for (size_t i = 0; i < env->jobs->n; i++) {
        job *j = env->jobs->v[i];
        sb_printf(b, "job %d: ", j->id);
        status_words(b, j);
        sb_puts(b, " — ");
        sb_append_line_capped(b, j->command, strlen(j->command), 160);
        sb_putc(b, '\n');
    }
}

void job_summarize(json_object *args, char *buf, size_t size, const char *tool)
{
    long long id;
    if (targ_int(args, "job", &id)) snprintf(buf, size, "%s: job %lld", tool, id);
    else snprintf(buf, size, "%s", tool);
}

/* ---- public job helpers (tools.h) -------------------------------------------------------- */

char *tools_jobs_report(tool_env *env)
{
    if (!env || !env->jobs || !env->jobs->n) return NULL;
    jobs_poll_all(env);
    strbuf b = {0};
    for (size_t i = 0; i < env->jobs->n; i++) {
        job *j = env->jobs->v[i];
        if (j->done && j->final_reported) continue;
        sb_printf(&b, "job %d: ", j->id);
        status_words(&b, j);
        sb_puts(&b, " — ");
        sb_append_line_capped(&b, j->command, strlen(j->command), 160);
        sb_putc(&b, '\n');
    }
    if (!b.len) return NULL;
    return sb_take(&b);
}

size_t tools_jobs_running(tool_env *env)
{
    if (!env) return 0;
    jobs_poll_all(env);
    return jobs_running(env);
}
