/* cmd_prompt.c — `ds4cl -p TEXT`: one task, non-interactively, to its end.
 *
 * The prompt comes from -p TEXT, from stdin with -p - (stdin is never read
 * otherwise), or from --prompt-file F. Permissions never prompt: --yes,
 * --allow TOOL, or the rules decide and "ask" means deny. SIGINT/SIGTERM
 * interrupt the agent cooperatively (a second one exits at once).
 *
 * The run is a session turn (sessions/sessions.h): a new session, or the
 * one --session / --resume ID / --continue names, saved as it goes and
 * resumed from its KV state. --resume without an ID is refused here with
 * the list: a script names its session. A run that cannot be saved at all
 * (no home, a data directory that takes no session) is refused with exit
 * 5 before the model runs.
 *
 * Output: with --output-format text (default), the final answer on stdout
 * and progress on stderr; with stream-json, one JSON object per line on
 * stdout (schema in README.md, "type" and "schema" in every object) ending
 * with a "result" object, also when the run is refused before it starts;
 * with json, that "result" object alone, at the end, and nothing on stderr
 * but errors before the run starts. Exit status: 0 done, 1 error, 2 usage,
 * 3 interrupted, 4 context exhausted, 5 the session could not be saved.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "base/base.h"
#include "base/utf8.h"
#include "cli/agent_setup.h"
#include "cli/commands.h"
#include "cli/model_open.h"
#include "cli/preflight.h"
#include "cli/workspace.h"
#include "sessions/sessions.h"

#define STREAM_SCHEMA 1
#define DEFAULT_CTX 65536

static int g_sig_pipe[2] = { -1, -1 };
static volatile sig_atomic_t g_signals;
static volatile long g_first_signal_ms;

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The first signal asks the agent to stop; one more, a moment later,
 * leaves at once. (A signal sent to the process and to its group arrives
 * twice in a row: that is still the first request.) */
static void on_signal(int sig)
{
    (void)sig;
    long now = mono_ms();
    if (g_signals && now - (long)g_first_signal_ms > 500) _exit(EXIT_INTERRUPTED);
    if (!g_signals) g_first_signal_ms = now;
    g_signals = 1;
    int saved = errno;
    char c = 1;
    ssize_t w = write(g_sig_pipe[1], &c, 1);
    (void)w;
    errno = saved;
}

static char *read_all_stdin(void)
{
    strbuf b = { 0 };
    char buf[65536];
    ssize_t n;
    while ((n = read(0, buf, sizeof buf)) != 0) {
        if (n < 0) {
            if (errno == EINTR) continue;
            sb_free(&b);
            return NULL;
        }
        sb_append(&b, buf, (size_t)n);
    }
    return sb_take(&b);
}

typedef struct {
    bool json;           /* stream-json: an event per line as things happen */
    bool single;         /* json: nothing until the one result object */
    strbuf answer;       /* visible text since the last tool result */
    bool answer_started;
    const char *end;     /* TURN_END reason */
    char end_buf[64];
    bool saw_end;
    char error[640];     /* the last error, whole (the status keeps its start) */
} run_state;

static void emit(struct json_object *o)
{
    json_object_object_add(o, "schema", json_object_new_int(STREAM_SCHEMA));
    fputs(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE), stdout);
    fputc('\n', stdout);
    fflush(stdout);
    json_object_put(o);
}

static struct json_object *typed(const char *type)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string(type));
    return o;
}

/* JSON text must be valid UTF-8; a model (random weights, say) can write
 * anything, so invalid bytes become U+FFFD. */
static struct json_object *jstr(const char *s, size_t len)
{
    strbuf b = { 0 };
    utf8_append_valid(&b, s ? s : "", len);
    struct json_object *o = json_object_new_string_len(b.s ? b.s : "", (int)b.len);
    sb_free(&b);
    return o;
}

/* First line of a text, for progress lines: at most n bytes, cut at a
 * character boundary and marked with "…" when it is longer. */
static void first_line(char *out, size_t n, const char *s)
{
    size_t len = s ? strcspn(s, "\n") : 0;
    if (len < n) {
        if (len) memcpy(out, s, len);
        out[len] = 0;
        return;
    }
    size_t k = n - 4; /* room for "…" and the NUL */
    while (k && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    memcpy(out, s, k);
    memcpy(out + k, "\xe2\x80\xa6", 4);
}

static void handle(run_state *rs, const agent_event *e)
{
    switch (e->type) {
    case AGENT_EV_USER:
        break;
    case AGENT_EV_THINKING:
        if (rs->json) {
            struct json_object *o = typed("thinking");
            json_object_object_add(o, "text", jstr(e->text, e->len));
            emit(o);
        }
        break;
    case AGENT_EV_TEXT:
        sb_append(&rs->answer, e->text, e->len);
        if (rs->json) {
            struct json_object *o = typed("text");
            json_object_object_add(o, "text", jstr(e->text, e->len));
            emit(o);
        }
        break;
    case AGENT_EV_TOOL_START:
    case AGENT_EV_TOOL_PARAM:
    case AGENT_EV_TOOL_PROGRESS:
    case AGENT_EV_CONFIRM:
        break;
    case AGENT_EV_TOOL_CALL:
        sb_clear(&rs->answer);
        if (rs->json) {
            struct json_object *o = typed("tool_use");
            json_object_object_add(o, "index", json_object_new_int(e->call_index));
            json_object_object_add(o, "name", json_object_new_string(e->tool ? e->tool : ""));
            struct json_object *input = e->args_json ? json_tokener_parse(e->args_json) : NULL;
            json_object_object_add(o, "input", input ? input : json_object_new_object());
            emit(o);
        } else if (!rs->single) {
            fprintf(stderr, "ds4cl: %s %s\n", e->tool ? e->tool : "?", e->args_json ? e->args_json : "{}");
        }
        break;
    case AGENT_EV_TOOL_RESULT:
        sb_clear(&rs->answer);
        if (rs->json) {
            struct json_object *o = typed("tool_result");
            json_object_object_add(o, "index", json_object_new_int(e->call_index));
            json_object_object_add(o, "name", json_object_new_string(e->tool ? e->tool : ""));
            json_object_object_add(o, "is_error", json_object_new_boolean(e->is_error));
            json_object_object_add(o, "denied", json_object_new_boolean(e->denied));
            json_object_object_add(o, "text", jstr(e->text, e->len));
            emit(o);
        } else if (!rs->single) {
            /* a denial says how to allow the call: all of it is kept */
            char line[160];
            first_line(line, sizeof line, e->text);
            fprintf(stderr, "ds4cl: %s %s: %s\n", e->tool ? e->tool : "?",
                    e->denied ? "denied" : e->is_error ? "failed" : "done", e->denied && e->text ? e->text : line);
        }
        break;
    case AGENT_EV_NOTICE:
        if (rs->json) {
            struct json_object *o = typed("notice");
            json_object_object_add(o, "level", json_object_new_string(e->is_error ? "error" : "info"));
            json_object_object_add(o, "message", jstr(e->text, e->len));
            emit(o);
        } else if (!rs->single) {
            fprintf(stderr, "ds4cl: %s\n", e->text ? e->text : "");
        }
        break;
    case AGENT_EV_COMPACTION:
        if (rs->json) {
            struct json_object *o = typed("compaction");
            json_object_object_add(o, "summary", jstr(e->text, e->len));
            emit(o);
        }
        break;
    case AGENT_EV_ERROR:
        snprintf(rs->error, sizeof rs->error, "%s", e->text ? e->text : "error");
        if (rs->json) {
            struct json_object *o = typed("error");
            json_object_object_add(o, "message", jstr(e->text, e->len));
            emit(o);
        } else if (!rs->single) {
            fprintf(stderr, "ds4cl: %s\n", e->text ? e->text : "error");
        }
        break;
    case AGENT_EV_TURN_END:
        snprintf(rs->end_buf, sizeof rs->end_buf, "%s", e->text ? e->text : AGENT_END_ERROR);
        rs->end = rs->end_buf;
        rs->saw_end = true;
        break;
    }
}

static int exit_code_for(const char *end)
{
    if (!strcmp(end, AGENT_END_DONE) || !strcmp(end, AGENT_END_MAX_TOKENS)) return EXIT_DONE;
    if (!strcmp(end, AGENT_END_INTERRUPTED)) return EXIT_INTERRUPTED;
    if (!strcmp(end, AGENT_END_CONTEXT_FULL)) return EXIT_CONTEXT_FULL;
    if (!strcmp(end, AGENT_END_NOT_SAVED)) return EXIT_NOT_SAVED;
    return EXIT_ERROR;
}

/* A run refused before its agent started: the stream still ends with a
 * result, so that a script reading it learns why (msg, the cause, was
 * printed). stop_reason "error" ("not saved" when the run could not be
 * saved), exit_code tells usage from the rest;
 * session_id only when the run was refused on a saved session (sid), never
 * for one this run would have created. */
static int refused(const ds4cl_options *o, int code, const char *sid, const char *msg)
{
    if (o->output != OUTPUT_STREAM_JSON && o->output != OUTPUT_JSON) return code;
    struct json_object *r = typed("result");
    if (sid && *sid) json_object_object_add(r, "session_id", json_object_new_string(sid));
    json_object_object_add(r, "stop_reason",
                           json_object_new_string(code == EXIT_NOT_SAVED ? AGENT_END_NOT_SAVED : AGENT_END_ERROR));
    json_object_object_add(r, "exit_code", json_object_new_int(code));
    json_object_object_add(r, "is_error", json_object_new_boolean(true));
    json_object_object_add(r, "text", json_object_new_string(""));
    json_object_object_add(r, "error", jstr(msg, strlen(msg)));
    emit(r);
    return code;
}

/* Waits for the wake fd or a signal; forwards signals as interrupts. */
static void wait_events(agent *a, int timeout_ms)
{
    struct pollfd p[2] = { { agent_wake_fd(a), POLLIN, 0 }, { g_sig_pipe[0], POLLIN, 0 } };
    if (poll(p, 2, timeout_ms) > 0 && (p[1].revents & POLLIN)) {
        char buf[16];
        while (read(g_sig_pipe[0], buf, sizeof buf) > 0) {
        }
        agent_interrupt(a);
    }
}

static void drain(agent *a, run_state *rs)
{
    agent_event *ev;
    size_t n = agent_drain(a, &ev);
    for (size_t i = 0; i < n; i++) handle(rs, &ev[i]);
    agent_events_free(ev, n);
}

static char *load_prompt(const ds4cl_options *o)
{
    if (o->prompt_file) {
        size_t len;
        char *t = file_read_all(o->prompt_file, &len);
        if (!t) fprintf(stderr, "ds4cl: cannot read %s: %s\n", o->prompt_file, strerror(errno));
        return t;
    }
    if (o->prompt && !strcmp(o->prompt, "-")) {
        char *t = read_all_stdin();
        if (!t) fprintf(stderr, "ds4cl: cannot read the standard input: %s\n", strerror(errno));
        return t;
    }
    char *t = xstrdup(o->prompt ? o->prompt : "");
    return t;
}

static struct json_object *string_array(const char *const *v)
{
    struct json_object *arr = json_object_new_array();
    for (size_t i = 0; v && v[i]; i++) json_object_array_add(arr, json_object_new_string(v[i]));
    return arr;
}

int cmd_prompt(const ds4cl_options *o)
{
    char *prompt = load_prompt(o);
    if (!prompt) return refused(o, EXIT_ERROR, NULL, "the prompt cannot be read (the reason is on stderr)");
    bool blank = true;
    for (const char *p = prompt; *p && blank; p++) blank = *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r';
    if (blank) {
        fprintf(stderr, "ds4cl: the prompt is empty\n");
        free(prompt);
        return refused(o, EXIT_USAGE, NULL, "the prompt is empty");
    }
    if (o->backend == DS4_BACKEND_SCRIPT && !o->model_path) {
        fprintf(stderr, "ds4cl: the script engine needs -m MODEL (its tokenizer is used)\n");
        free(prompt);
        return refused(o, EXIT_USAGE, NULL, "the script engine needs -m MODEL (its tokenizer is used)");
    }
    char ws[PATH_MAX];
    int wrc = workspace_resolve(o, ws);
    if (wrc != 0) {
        free(prompt);
        return refused(o, wrc, NULL, "the workspace cannot be used (the reason is on stderr)");
    }
    ds4_error pre = { "" };
    wrc = preflight_check(o, ws, &pre);
    if (wrc != 0) {
        free(prompt);
        return refused(o, wrc, NULL, pre.msg);
    }

    /* The session first: a resumed one brings its context size. */
    session *sess = NULL;
    ds4_error serr = { "" };
    session_request rq = { .resume = o->resume, .resume_id = o->resume_id, .continue_last = o->continue_last,
                           .session_id = o->session_id, .cwd = ws };
    sessions_set_prompt_cache(!o->no_prompt_cache);
    session_open_status so = session_open_request(&rq, &sess, &serr);
    bool asked = o->resume || o->continue_last || o->session_id;
    if (so == SESSION_OPEN_ERROR && !asked) {
        /* Nowhere to keep it (no home, a data directory that takes no
         * session): the run could not be saved, as on a full disk (exit
         * 5), and is refused before the model touches the workspace. */
        fprintf(stderr, "ds4cl: this run cannot be saved as a session: %s; nothing was done (make the data directory "
                        "writable, or set XDG_DATA_HOME to one that is)\n", serr.msg);
        free(prompt);
        return refused(o, EXIT_NOT_SAVED, NULL, serr.msg);
    }
    if (so != SESSION_OPEN_OK) {
        if (so == SESSION_OPEN_PICK) {
            fprintf(stderr, "ds4cl: --resume needs a session ID with --prompt (--continue takes the latest of this "
                            "directory)\n");
            session_info *v;
            int n = sessions_list(&v, &serr);
            if (n >= 0) {
                char *list = sessions_format_list(v, (size_t)n, 20, NULL);
                if (n > 0) {
                    char *head = sessions_format_header(v, (size_t)n, 20);
                    fputs(head, stderr);
                    free(head);
                }
                fputs(list, stderr);
                free(list);
                free(v);
            }
        } else {
            fprintf(stderr, "ds4cl: %s\n", serr.msg);
        }
        free(prompt);
        if (so == SESSION_OPEN_PICK)
            return refused(o, EXIT_USAGE, NULL, "--resume needs a session ID with --prompt");
        /* the session asked for, when it is a saved one (held elsewhere, say) */
        char sid[SESSION_ID_MAX] = "";
        const char *asked_id = o->session_id ? o->session_id : o->resume_id;
        ds4_error rerr = { "" };
        if (asked_id && sessions_resolve(asked_id, sid, sizeof sid, &rerr) != 0) sid[0] = 0;
        return refused(o, EXIT_ERROR, sid, serr.msg);
    }
    session_info sinfo = { .n_ctx = 0 };
    if (sess) session_get_info(sess, &sinfo);
    /* a refusal from here on names the session only when it was saved before */
    const char *saved_id = sess && sinfo.user_turns > 0 ? session_id(sess) : NULL;

    int n_ctx = 0;
    int open_rc = EXIT_ERROR;
    agent_setup_ctx chk = { .o = o, .ws = ws, .interactive = false };
    model_open_check mc = { agent_setup_least_ctx, &chk, AGENT_LEAST_CTX_WHAT };
    ds4_error why = { "" };
    ds4_engine *e = model_open(o, sinfo.n_ctx > 0 ? sinfo.n_ctx : DEFAULT_CTX, &n_ctx, &open_rc, &mc, &why);
    if (!e) {
        refused(o, open_rc, saved_id, why.msg);
        session_close(sess);
        free(prompt);
        return open_rc;
    }

    if (pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "ds4cl: %s\n", strerror(errno));
        ds4_engine_close(e);
        session_close(sess);
        free(prompt);
        return EXIT_ERROR;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    agent_config cfg;
    agent_setup_config(&cfg, o, e, n_ctx, ws, false);
    cfg.session_id = o->session_id;

    ds4_error err = { "" };
    double t0 = base_now_ms();
    agent *a = NULL;
    if (!sess) {
        a = agent_start(&cfg, &err);
    } else if (session_attach(sess, e, &cfg, &err) == 0) {
        a = agent_start(&cfg, &err);
        session_attach_done(sess);
    }
    if (!a) {
        fprintf(stderr, "ds4cl: %s\n", err.msg);
        refused(o, EXIT_ERROR, saved_id, err.msg);
        ds4_engine_close(e);
        session_close(sess);
        free(prompt);
        return EXIT_ERROR;
    }
    run_state rs = { .json = o->output == OUTPUT_STREAM_JSON, .single = o->output == OUTPUT_JSON };
    const char *const *notes = NULL;
    size_t n_notes = sess ? session_notes(sess, &notes) : 0;
    agent_status st;
    agent_get_status(a, &st);
    if (rs.json) {
        ds4_model_info info;
        ds4_engine_info(e, &info);
        struct json_object *init = typed("init");
        json_object_object_add(init, "session_id", json_object_new_string(st.session_id));
        json_object_object_add(init, "version", json_object_new_string(DS4CL_VERSION));
        json_object_object_add(init, "model", json_object_new_string(info.name));
        json_object_object_add(init, "backend", json_object_new_string(info.backend_name ? info.backend_name : ""));
        json_object_object_add(init, "ctx", json_object_new_int(n_ctx));
        json_object_object_add(init, "workspace", json_object_new_string(ws));
        struct json_object *names = json_object_new_array();
        size_t nt = 0;
        const tool_def *const *all = tools_all(&nt);
        for (size_t i = 0; i < nt; i++) json_object_array_add(names, json_object_new_string(all[i]->name));
        json_object_object_add(init, "tools", names);
        struct json_object *perm = json_object_new_object();
        json_object_object_add(perm, "mode", json_object_new_string(o->yes ? "yes" : o->n_allow ? "allow" : "deny"));
        json_object_object_add(perm, "allow", string_array(o->n_allow ? o->allow : NULL));
        json_object_object_add(init, "permissions", perm);
        const char *why = "";
        bool sandboxed = agent_sandbox(a, &why);
        struct json_object *sb = json_object_new_object();
        json_object_object_add(sb, "active", json_object_new_boolean(sandboxed));
        json_object_object_add(sb, "status", json_object_new_string(why));
        json_object_object_add(init, "sandbox", sb);
        emit(init);
    }
    for (size_t i = 0; i < n_notes; i++) {
        if (rs.json) {
            struct json_object *no = typed("notice");
            json_object_object_add(no, "level", json_object_new_string("warning"));
            json_object_object_add(no, "message", json_object_new_string(notes[i]));
            emit(no);
        } else if (!rs.single) {
            fprintf(stderr, "ds4cl: %s\n", notes[i]);
        }
    }

    /* Wait until the system prompt is read, then hand in the task. */
    bool submitted = false;
    while (!rs.saw_end) {
        agent_get_status(a, &st);
        if (!submitted && (st.state == AGENT_IDLE || st.state == AGENT_ERROR)) {
            if (st.state == AGENT_ERROR) {
                drain(a, &rs);
                rs.end = AGENT_END_ERROR;
                break;
            }
            if (g_signals) {
                rs.end = AGENT_END_INTERRUPTED;
                break;
            }
            if (agent_submit(a, prompt) == 0) submitted = true;
        }
        wait_events(a, 100);
        drain(a, &rs);
        if (!submitted && g_signals) {
            rs.end = AGENT_END_INTERRUPTED;
            break;
        }
    }
    /* The idle hook runs once the turn has ended (the KV state is saved
     * then): what it reports belongs to this run, before its result. */
    while (rs.saw_end) {
        agent_get_status(a, &st);
        if (st.state == AGENT_IDLE || st.state == AGENT_ERROR) break;
        wait_events(a, 100);
        drain(a, &rs);
    }
    drain(a, &rs);
    agent_get_status(a, &st);
    const char *end = rs.end ? rs.end : AGENT_END_ERROR;
    int code = exit_code_for(end);

    /* The answer: what the model said after its last tool result. */
    size_t alen = rs.answer.len;
    while (alen && (rs.answer.s[alen - 1] == '\n' || rs.answer.s[alen - 1] == ' ')) alen--;
    if (rs.json || rs.single) {
        struct json_object *r = typed("result");
        json_object_object_add(r, "session_id", json_object_new_string(st.session_id));
        json_object_object_add(r, "stop_reason", json_object_new_string(end));
        json_object_object_add(r, "exit_code", json_object_new_int(code));
        json_object_object_add(r, "is_error", json_object_new_boolean(code != EXIT_DONE));
        json_object_object_add(r, "text", jstr(rs.answer.s, alen));
        const char *error = rs.error[0] ? rs.error : st.error;
        if (error[0]) json_object_object_add(r, "error", jstr(error, strlen(error)));
        json_object_object_add(r, "prefilled_tokens", json_object_new_int64((int64_t)st.prefilled_total));
        json_object_object_add(r, "generated_tokens", json_object_new_int64((int64_t)st.generated_total));
        struct json_object *usage = json_object_new_object();
        json_object_object_add(usage, "input_tokens", json_object_new_int64((int64_t)st.prefilled_total));
        json_object_object_add(usage, "output_tokens", json_object_new_int64((int64_t)st.generated_total));
        json_object_object_add(r, "usage", usage);
        json_object_object_add(r, "prefill_ms", json_object_new_int64(llround(st.prefill_ms)));
        json_object_object_add(r, "decode_ms", json_object_new_int64(llround(st.decode_ms)));
        json_object_object_add(r, "duration_ms", json_object_new_int64(llround(base_now_ms() - t0)));
        json_object_object_add(r, "tool_rounds", json_object_new_int(st.tool_rounds));
        json_object_object_add(r, "compactions", json_object_new_int(st.compactions));
        json_object_object_add(r, "ctx_used", json_object_new_int(st.ctx_used));
        json_object_object_add(r, "ctx_size", json_object_new_int(st.ctx_size));
        emit(r);
    } else {
        if (alen) {
            fwrite(rs.answer.s, 1, alen, stdout);
            fputc('\n', stdout);
            fflush(stdout);
        }
        if (code == EXIT_INTERRUPTED) fprintf(stderr, "ds4cl: interrupted\n");
        else if (code != EXIT_DONE && !st.error[0]) fprintf(stderr, "ds4cl: stopped: %s\n", end);
        fprintf(stderr, "ds4cl: %zu tokens read in %.0f ms, %zu written in %.0f ms\n", st.prefilled_total,
                st.prefill_ms, st.generated_total, st.decode_ms);
        if (submitted && sess) fprintf(stderr, "ds4cl: session %s (continue it with --resume %s)\n", st.session_id, st.session_id);
    }
    /* Stopping runs the idle hook of a busy worker: the state is saved. */
    agent_stop(a);
    session_close(sess);
    ds4_engine_close(e);
    sb_free(&rs.answer);
    free(prompt);
    close(g_sig_pipe[0]);
    close(g_sig_pipe[1]);
    return code;
}
