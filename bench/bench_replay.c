/* bench_replay.c — `ds4cl-bench --replay-bench`: a coding agent's traffic
 * replayed against `ds4cl serve` (serve/serve.h, started here), reporting
 * for every request its prompt tokens and how many of them the server
 * computed and how many it took from a live session or its snapshot cache.
 *
 * The traffic is what a Claude-Code-like client sends to /v1/messages: a
 * main conversation with a system prompt of several thousand tokens and a
 * dozen tool definitions, growing turn by turn (the assistant's replies sent
 * back as the server gave them, tool_use answered by tool_result turns of
 * file-sized outputs), interleaved with sub-agent conversations (their own
 * system prompt and tools, a few turns each; two of them taking turns, as
 * agents started together do) and with one-shot title and background
 * requests. The first block of every request's system prompt is the
 * client's billing line, whose cch value changes from request to request
 * (--header changing), stays the same (constant), or is left out (none).
 *
 * The requests are generated here from seeded text, not read from a file:
 * their sizes follow the flags (the tests run the same traffic small), and
 * the billing value must change per request anyway. The replies come from
 * the engine: with the scripted engine (default) a cycle of tool calls and
 * short answers the bench writes, so that the conversations have tool
 * turns; with the CPU engine whatever the model says (a generated tiny
 * model: the counts are the real engine's, rewinds and snapshots included).
 *
 * The prompt tokens of a request are counted apart by /count_tokens, so
 * that prefilled + cached = prompt is a check of the server's accounting,
 * not its definition. Only counts are reported: time is not the point. */
#include "bench/bench_replay.h"

#include <arpa/inet.h>
#include <json-c/json.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/ds4.h"
#include "serve/serve.h"

#define DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

typedef struct json_object jo;

typedef struct {
    long turns, subagents, sub_turns, system_bytes, result_bytes, ctx, threads, max_tokens;
} plan;

/* How the client sends: one request at a time (serial), or as an agent
 * CLI does (together): the sub-agents of a group each from a thread of its
 * own while the main conversation waits for them, and the one-shot title
 * and background requests beside the main conversation's next request. */
typedef enum { CLIENTS_SERIAL, CLIENTS_TOGETHER } clients;

typedef struct {
    const char *name;       /* main, agent1, title3, … */
    const char *system;     /* the text after the billing line */
    jo *tools;              /* array, shared */
    jo *messages;           /* array, owned */
    jo *pending;            /* the tool_use blocks of the last reply, or NULL */
    uint64_t seed;
    int turn;
    bool thinking;
} conv;

typedef struct {
    char conversation[40];
    int turn;
    long prompt, prefilled, cached, output;
    double seconds;         /* from sending the request to its whole reply */
} row;

typedef struct {
    int port;
    const char *header;     /* changing, constant, none */
    const plan *p;
    clients mode;
    pthread_mutex_t lock;   /* the fields below, written by every client thread */
    unsigned long requests;
    row *rows;
    size_t n_rows;
    char error[512];
} run;

/* ---- seeded text --------------------------------------------------------------------- */

static uint64_t next_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Sentences of ordinary words, about `bytes` long. */
static void words(strbuf *b, uint64_t seed, long bytes)
{
    static const char *const w[] = {
        "the", "file", "function", "returns", "when", "tool", "call", "test", "build", "error", "path", "read",
        "write", "change", "before", "after", "user", "command", "output", "line", "module", "state", "cache",
        "request", "never", "always", "check", "result", "value", "empty", "list", "parse", "string", "number",
        "should", "must", "only", "each", "with", "from", "that", "this", "into", "session", "reply", "format",
    };
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t start = b->len;
    int in_sentence = 0;
    while ((long)(b->len - start) < bytes) {
        const char *x = w[next_rand(&s) % (sizeof w / sizeof w[0])];
        if (!in_sentence) sb_printf(b, "%c%s", x[0] - 32, x + 1);
        else sb_printf(b, " %s", x);
        if (++in_sentence > 6 + (int)(next_rand(&s) % 10)) {
            sb_puts(b, next_rand(&s) % 4 ? ". " : ".\n\n");
            in_sentence = 0;
        }
    }
    if (in_sentence) sb_puts(b, ".");
}

static char *words_str(uint64_t seed, long bytes)
{
    strbuf b = { 0 };
    words(&b, seed, bytes);
    return sb_take(&b);
}

/* ---- the requests ---------------------------------------------------------------------- */

static jo *tool(const char *name, uint64_t seed, long desc_bytes, const char *const *params)
{
    jo *t = json_object_new_object(), *schema = json_object_new_object(), *props = json_object_new_object(),
       *req = json_object_new_array();
    char *d = words_str(seed, desc_bytes);
    json_object_object_add(t, "name", json_object_new_string(name));
    json_object_object_add(t, "description", json_object_new_string(d));
    free(d);
    for (size_t i = 0; params[i]; i++) {
        jo *p = json_object_new_object();
        char *pd = words_str(seed * 31 + i, 80);
        json_object_object_add(p, "type", json_object_new_string("string"));
        json_object_object_add(p, "description", json_object_new_string(pd));
        free(pd);
        json_object_object_add(props, params[i], p);
        json_object_array_add(req, json_object_new_string(params[i]));
    }
    json_object_object_add(schema, "type", json_object_new_string("object"));
    json_object_object_add(schema, "properties", props);
    json_object_object_add(schema, "required", req);
    json_object_object_add(t, "input_schema", schema);
    return t;
}

/* The main conversation's tools (at --system-bytes 12000 their
 * descriptions are about as long as a real client's; they scale with it),
 * or the sub-agents' subset. */
static jo *tools_of(bool main, long system_bytes)
{
    static const char *const path[] = { "file_path", NULL }, *const cmd[] = { "command", NULL },
                             *const grep[] = { "pattern", "path", NULL },
                             *const edit[] = { "file_path", "old_string", "new_string", NULL },
                             *const write[] = { "file_path", "content", NULL }, *const task[] = { "description", "prompt", NULL },
                             *const todo[] = { "todos", NULL }, *const url[] = { "url", "prompt", NULL };
    static const struct {
        const char *name;
        long bytes;
        const char *const *params;
    } all[] = { { "Read", 900, path },   { "Bash", 2400, cmd },  { "Grep", 800, grep },
                { "Glob", 400, path },   { "Edit", 700, edit },  { "Write", 500, write },
                { "Task", 1800, task },  { "TodoWrite", 1500, todo }, { "WebFetch", 600, url } };
    jo *a = json_object_new_array();
    for (size_t i = 0; i < (main ? sizeof all / sizeof all[0] : 4); i++)
        json_object_array_add(a, tool(all[i].name, 11 + i, all[i].bytes * system_bytes / 12000 + 1, all[i].params));
    return a;
}

static jo *text_block(const char *text)
{
    jo *b = json_object_new_object();
    json_object_object_add(b, "type", json_object_new_string("text"));
    json_object_object_add(b, "text", json_object_new_string(text));
    return b;
}

/* The request body of c's next turn (its messages are up to date). */
static char *body_of(run *r, const conv *c, unsigned long number)
{
    jo *o = json_object_new_object(), *sys = json_object_new_array();
    json_object_object_add(o, "model", json_object_new_string("claude-sonnet-4-5"));
    json_object_object_add(o, "max_tokens", json_object_new_int((int)r->p->max_tokens));
    if (strcmp(r->header, "none")) {
        char line[160];
        /* a value of the request's own, as the client computes one */
        uint64_t v = strcmp(r->header, "changing") ? 7 : number;
        snprintf(line, sizeof line, "x-anthropic-billing-header: cc_version=2.1.197.abc; cc_entrypoint=cli; cch=%05llx;",
                 (unsigned long long)(next_rand(&v) & 0xfffff));
        json_object_array_add(sys, text_block(line));
    }
    json_object_array_add(sys, text_block(c->system));
    json_object_object_add(o, "system", sys);
    if (c->tools) json_object_object_add(o, "tools", json_object_get(c->tools));
    json_object_object_add(o, "messages", json_object_get(c->messages));
    if (c->thinking) {
        jo *t = json_object_new_object();
        json_object_object_add(t, "type", json_object_new_string("enabled"));
        json_object_object_add(t, "budget_tokens", json_object_new_int(4000));
        json_object_object_add(o, "thinking", t);
    }
    char *s = xstrdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return s;
}

/* POSTs body (GETs when NULL) to path over HTTP/1.0; the status, the
 * response body in *out. */
static int post(int port, const char *path, const char *body, char **out)
{
    *out = NULL;
    strbuf msg = { 0 };
    if (body)
        sb_printf(&msg, "POST %s HTTP/1.0\r\nContent-Type: application/json\r\nanthropic-version: 2023-06-01\r\n"
                        "Content-Length: %zu\r\n\r\n%s",
                  path, strlen(body), body);
    else sb_printf(&msg, "GET %s HTTP/1.0\r\n\r\n", path);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    bool sent = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    for (size_t at = 0; sent && at < msg.len;) {
        ssize_t k = write(fd, msg.s + at, msg.len - at);
        if (k <= 0) sent = false;
        else at += (size_t)k;
    }
    sb_free(&msg);
    strbuf in = { 0 };
    char buf[65536];
    ssize_t k;
    while (sent && (k = read(fd, buf, sizeof buf)) > 0) sb_append(&in, buf, (size_t)k);
    if (fd >= 0) close(fd);
    const char *head_end = in.s ? strstr(in.s, "\r\n\r\n") : NULL;
    int status = in.s && !strncmp(in.s, "HTTP/1.", 7) ? atoi(in.s + 9) : 0;
    if (head_end) *out = xstrdup(head_end + 4);
    sb_free(&in);
    return head_end ? status : 0;
}

static long int_at(jo *o, const char *a, const char *b)
{
    jo *x, *y;
    if (!json_object_object_get_ex(o, a, &x) || !json_object_object_get_ex(x, b, &y)) return -1;
    return (long)json_object_get_int64(y);
}

static void add_message(conv *c, const char *role, jo *content)
{
    jo *m = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string(role));
    json_object_object_add(m, "content", content);
    json_object_array_add(c->messages, m);
}

/* c's next user turn: the results of the calls of its last reply, else
 * more instructions (first: the task). */
static void user_turn(const run *r, conv *c, const char *task)
{
    uint64_t s = c->seed * 1000 + (uint64_t)c->turn;
    size_t n = c->pending ? json_object_array_length(c->pending) : 0;
    if (!n) {
        char *t = task && !c->turn ? xstrdup(task) : words_str(s, 160 + (long)(next_rand(&s) % 200));
        jo *content = json_object_new_array();
        json_object_array_add(content, text_block(t));
        free(t);
        add_message(c, "user", content);
        return;
    }
    jo *content = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        jo *call = json_object_array_get_idx(c->pending, i), *id, *b = json_object_new_object();
        json_object_object_get_ex(call, "id", &id);
        /* outputs from a few lines to a file's worth */
        long bytes = r->p->result_bytes / 4 + (long)(next_rand(&s) % (uint64_t)(r->p->result_bytes + 1));
        char *out = words_str(s + i, bytes);
        json_object_object_add(b, "type", json_object_new_string("tool_result"));
        json_object_object_add(b, "tool_use_id", json_object_get(id));
        json_object_object_add(b, "content", json_object_new_string(out));
        free(out);
        json_object_array_add(content, b);
    }
    add_message(c, "user", content);
}

/* One request of c: counted, sent, its reply kept in the conversation as
 * the client keeps it (every block, thinking and its signature included). */
static int request(run *r, conv *c, const char *task)
{
    user_turn(r, c, task);
    json_object_put(c->pending);
    c->pending = NULL;
    pthread_mutex_lock(&r->lock);
    unsigned long number = ++r->requests;
    pthread_mutex_unlock(&r->lock);
    char *body = body_of(r, c, number), *resp = NULL;
    int st = post(r->port, "/v1/messages/count_tokens", body, &resp);
    jo *o = st == 200 ? json_tokener_parse(resp) : NULL, *v;
    long prompt = o && json_object_object_get_ex(o, "input_tokens", &v) ? (long)json_object_get_int64(v) : -1;
    json_object_put(o);
    free(resp);
    double t0 = base_now_ms();
    st = prompt >= 0 ? post(r->port, "/v1/messages", body, &resp) : 0;
    double seconds = (base_now_ms() - t0) / 1000.0;
    free(body);
    o = st == 200 ? json_tokener_parse(resp) : NULL;
    jo *content;
    if (!o || !json_object_object_get_ex(o, "content", &content)) {
        pthread_mutex_lock(&r->lock);
        if (!r->error[0])
            snprintf(r->error, sizeof r->error, "%s turn %d: status %d: %.400s", c->name, c->turn + 1, st,
                     resp ? resp : "(no response)");
        pthread_mutex_unlock(&r->lock);
        json_object_put(o);
        free(resp);
        return -1;
    }
    free(resp);
    row w = { .turn = c->turn + 1, .prompt = prompt, .prefilled = int_at(o, "usage", "input_tokens"),
              .cached = int_at(o, "usage", "cache_read_input_tokens"), .output = int_at(o, "usage", "output_tokens"),
              .seconds = seconds };
    snprintf(w.conversation, sizeof w.conversation, "%s", c->name);
    pthread_mutex_lock(&r->lock);
    r->rows = xrealloc(r->rows, (r->n_rows + 1) * sizeof *r->rows);
    r->rows[r->n_rows++] = w;
    pthread_mutex_unlock(&r->lock);
    c->pending = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(content); i++) {
        jo *b = json_object_array_get_idx(content, i), *type;
        if (json_object_object_get_ex(b, "type", &type) && !strcmp(json_object_get_string(type), "tool_use"))
            json_object_array_add(c->pending, json_object_get(b));
    }
    add_message(c, "assistant", json_object_get(content));
    json_object_put(o);
    c->turn++;
    return 0;
}

static conv conv_new(const char *name, const char *system, jo *tools, uint64_t seed, bool thinking)
{
    return (conv){ .name = name, .system = system, .tools = tools, .messages = json_object_new_array(), .seed = seed,
                   .thinking = thinking };
}

static void conv_free(conv *c)
{
    json_object_put(c->messages);
    json_object_put(c->pending);
}

/* A one-shot request of its own conversation (a title, a command check). */
static int one_shot(run *r, const char *system, const char *what, long seed)
{
    char name[40];
    snprintf(name, sizeof name, "%.16s%ld", what, seed);
    char *task = words_str((uint64_t)seed * 7 + 3, 300);
    conv c = conv_new(name, system, NULL, (uint64_t)seed + 500, false);
    int rc = request(r, &c, task);
    conv_free(&c);
    free(task);
    return rc;
}

/* A one-shot request sent beside the main conversation (together), or in
 * its turn (serial): started, then joined before the next one starts. */
typedef struct {
    run *r;
    const char *system, *what;
    long seed;
    int rc;
    bool started;
    pthread_t th;
} side;

static void *side_main(void *arg)
{
    side *x = arg;
    x->rc = one_shot(x->r, x->system, x->what, x->seed);
    return NULL;
}

static int side_join(side *x)
{
    if (x->started) pthread_join(x->th, NULL);
    x->started = false;
    return x->rc;
}

static int side_start(side *x, run *r, const char *system, const char *what, long seed)
{
    int rc = side_join(x);
    *x = (side){ .r = r, .system = system, .what = what, .seed = seed };
    if (rc) return rc;
    if (r->mode == CLIENTS_SERIAL || pthread_create(&x->th, NULL, side_main, x) != 0) return one_shot(r, system, what, seed);
    x->started = true;
    return 0;
}

/* ---- the traffic ------------------------------------------------------------------------- */

/* The sub-agents of group g (the first alone, then pairs that take turns):
 * its first agent, and how many. */
static long group_of(long g, long agents, long *count)
{
    long first = g == 0 ? 0 : 2 * g - 1;
    *count = first >= agents ? 0 : g == 0 || first + 1 >= agents ? 1 : 2;
    return first;
}

typedef struct {
    run *r;
    conv c;
    char name[32];
    char *task;
    jo *tools;
    int rc;
} agent;

static void *agent_main(void *arg)
{
    agent *a = arg;
    for (long t = 0; t < a->r->p->sub_turns && !a->rc; t++) a->rc = request(a->r, &a->c, a->task);
    return NULL;
}

/* A group of sub-agents: in serial, their requests take turns; together,
 * each agent sends from a thread of its own. The main conversation waits
 * for them (a client's task tool returns when its agents are done). */
static int run_agents(run *r, long first, long count, const char *system)
{
    agent a[2];
    pthread_t th[2];
    bool started[2] = { false, false };
    for (long k = 0; k < count; k++) {
        a[k] = (agent){ .r = r, .task = words_str(200 + (uint64_t)(first + k), 400),
                        .tools = tools_of(false, r->p->system_bytes) };
        snprintf(a[k].name, sizeof a[k].name, "agent%ld", first + k + 1);
        a[k].c = conv_new(a[k].name, system, a[k].tools, 100 + (uint64_t)(first + k), true);
    }
    int rc = 0;
    if (r->mode == CLIENTS_TOGETHER)
        for (long k = 0; k < count; k++) started[k] = pthread_create(&th[k], NULL, agent_main, &a[k]) == 0;
    for (long t = 0; t < r->p->sub_turns && !rc; t++)
        for (long k = 0; k < count && !rc; k++)
            if (!started[k]) rc = a[k].rc = request(r, &a[k].c, a[k].task);
    for (long k = 0; k < count; k++) {
        if (started[k]) pthread_join(th[k], NULL);
        if (!rc) rc = a[k].rc;
        conv_free(&a[k].c);
        json_object_put(a[k].tools);
        free(a[k].task);
    }
    return rc;
}

static int replay(run *r)
{
    const plan *p = r->p;
    char *main_sys = words_str(1, p->system_bytes), *agent_sys = words_str(2, p->system_bytes / 4),
         *title_sys = words_str(3, 300), *bg_sys = words_str(4, 500), *task = words_str(5, 600);
    jo *main_tools = tools_of(true, p->system_bytes);
    conv m = conv_new("main", main_sys, main_tools, 1, true);
    long groups = 0, n;
    while (group_of(groups, p->subagents, &n), n > 0) groups++;
    side one = { 0 };
    int rc = 0;
    long g = 0;
    for (long t = 0; t < p->turns && !rc; t++) {
        rc = request(r, &m, task);
        if (!rc && t == 0) rc = side_start(&one, r, title_sys, "title", t);
        if (!rc && t % 6 == 2) rc = side_start(&one, r, bg_sys, "background", t);
        /* the groups of sub-agents start spread over the main conversation */
        if (!rc && g < groups && t + 1 == (g + 1) * p->turns / (groups + 1)) {
            long first = group_of(g++, p->subagents, &n);
            rc = run_agents(r, first, n, agent_sys);
        }
    }
    int rc_side = side_join(&one);
    conv_free(&m);
    json_object_put(main_tools);
    free(main_sys);
    free(agent_sys);
    free(title_sys);
    free(bg_sys);
    free(task);
    return rc ? rc : rc_side;
}

/* The scripted engine's replies: tool calls of the tools every conversation
 * with tools has, and now and then an answer without one. */
static int write_script(const char *path, ds4_error *err)
{
    strbuf b = { 0 };
    for (int i = 0; i < 2000; i++) {
        strbuf a = { 0 };
        sb_printf(&a, "Step %d: look before changing anything.</think>", i);
        switch (i % 4) {
        case 0:
            sb_printf(&a, "Reading it.\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"Read\">\n<" DSML
                          "parameter name=\"file_path\" string=\"true\">src/module_%d.c</" DSML "parameter>\n</" DSML
                          "invoke>\n</" DSML "tool_calls>",
                      i);
            break;
        case 1:
            sb_printf(&a, "<" DSML "tool_calls>\n<" DSML "invoke name=\"Bash\">\n<" DSML
                          "parameter name=\"command\" string=\"true\">make test T=unit_%d</" DSML "parameter>\n</" DSML
                          "invoke>\n</" DSML "tool_calls>",
                      i);
            break;
        case 2:
            sb_printf(&a, "Looking for its callers.\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"Grep\">\n<" DSML
                          "parameter name=\"pattern\" string=\"true\">handle_%d</" DSML "parameter>\n<" DSML
                          "parameter name=\"path\" string=\"true\">src</" DSML "parameter>\n</" DSML "invoke>\n</" DSML
                          "tool_calls>",
                      i);
            break;
        default:
            sb_printf(&a, "The change for step %d is in place and the tests pass.", i);
        }
        jo *line = json_object_new_object();
        json_object_object_add(line, "assistant", json_object_new_string_len(a.s, (int)a.len));
        sb_printf(&b, "%s\n", json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN));
        json_object_put(line);
        sb_free(&a);
    }
    int rc = file_write_atomic(path, b.s, b.len, 0600, false, err);
    sb_free(&b);
    return rc;
}

/* ---- the command ------------------------------------------------------------------------- */

static int usage(void)
{
    fputs("usage: ds4cl-bench --replay-bench -m MODEL [--engine script|cpu] [--parallel LIST] [--header LIST]\n"
          "                   [--clients LIST] [--batch LIST] [--turns N] [--subagents N] [--sub-turns N]\n"
          "                   [--system-bytes N] [--result-bytes N] [--max-tokens N] [--ctx N] [--threads T]\n"
          "  LIST: comma-separated; --parallel 1,4, --header changing,constant (or none), --clients serial\n"
          "  (or together) and --batch on (or off) by default\n",
          stderr);
    return 2;
}

typedef struct {
    long parallel;
    const char *header, *clients, *batch;
} run_key;

/* The sum of the request rows (after_first: but each conversation's
 * first); its seconds are the run's wall time. */
static void print_sum(const run *r, const run_key *k, const char *label, bool after_first, double wall)
{
    long count = 0, prompt = 0, prefilled = 0, cached = 0, output = 0;
    for (size_t i = 0; i < r->n_rows; i++) {
        if (after_first && r->rows[i].turn < 2) continue;
        count++;
        prompt += r->rows[i].prompt;
        prefilled += r->rows[i].prefilled;
        cached += r->rows[i].cached;
        output += r->rows[i].output;
    }
    printf("%ld,%s,%s,%s,%s,-,%ld,%ld,%ld,%ld,%.1f,%ld,%.2f\n", k->parallel, k->header, k->clients, k->batch, label,
           count, prompt, prefilled, cached, prompt ? 100.0 * (double)cached / (double)prompt : 0.0, output, wall);
}

/* The server's count of decode steps and of those shared by sessions. */
static void health(int port, long *steps, long *shared)
{
    char *resp = NULL;
    jo *o = post(port, "/health", NULL, &resp) == 200 ? json_tokener_parse(resp) : NULL, *v;
    *steps = o && json_object_object_get_ex(o, "decode_steps", &v) ? (long)json_object_get_int64(v) : -1;
    *shared = o && json_object_object_get_ex(o, "shared_steps", &v) ? (long)json_object_get_int64(v) : -1;
    json_object_put(o);
    free(resp);
}

/* One server on a fresh cache directory, the traffic, its rows. */
static int one_run(ds4_engine *e, const plan *p, const run_key *k, const char *dir)
{
    char cache[4200];
    snprintf(cache, sizeof cache, "%s/cache-%ld-%s-%s-%s", dir, k->parallel, k->header, k->clients, k->batch);
    serve_config cfg = { .engine = e, .n_ctx = (int)p->ctx, .quiet = true, .cache_dir = cache,
                         .parallel = (int)k->parallel, .no_batch = !strcmp(k->batch, "off") };
    ds4_error err = { "" };
    serve *s = serve_start(&cfg, &err);
    if (!s) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        return 1;
    }
    run r = { .port = serve_port(s), .header = k->header, .p = p,
              .mode = !strcmp(k->clients, "together") ? CLIENTS_TOGETHER : CLIENTS_SERIAL };
    pthread_mutex_init(&r.lock, NULL);
    double t0 = base_now_ms();
    int rc = replay(&r);
    double wall = (base_now_ms() - t0) / 1000.0;
    long steps, shared;
    health(r.port, &steps, &shared);
    serve_stop(s);
    if (rc) fprintf(stderr, "ds4cl-bench: %s\n", r.error);
    for (size_t i = 0; i < r.n_rows && !rc; i++)
        printf("%ld,%s,%s,%s,%zu,%s,%d,%ld,%ld,%ld,%.1f,%ld,%.2f\n", k->parallel, k->header, k->clients, k->batch, i + 1,
               r.rows[i].conversation, r.rows[i].turn, r.rows[i].prompt, r.rows[i].prefilled, r.rows[i].cached,
               r.rows[i].prompt > 0 ? 100.0 * (double)r.rows[i].cached / (double)r.rows[i].prompt : 0.0,
               r.rows[i].output, r.rows[i].seconds);
    if (!rc) {
        print_sum(&r, k, "all", false, wall);
        print_sum(&r, k, "after_first", true, wall);
        fflush(stdout); /* the CSV's lines whole, before this one */
        fprintf(stderr, "ds4cl-bench: --parallel %ld, %s clients, batch %s: %.2f s, %ld decode steps, %ld shared\n",
                k->parallel, k->clients, k->batch, wall, steps, shared);
    }
    pthread_mutex_destroy(&r.lock);
    free(r.rows);
    return rc;
}

/* The next name of a comma-separated list (at *at) that is one of the
 * allowed; 0 at its end, -1 for one that is not. */
static int next_name(const char **at, const char *const *allowed, char *name, size_t n)
{
    if (!**at) return 0;
    size_t len = strcspn(*at, ",");
    snprintf(name, n, "%.*s", (int)len, *at);
    *at += len + ((*at)[len] == ',');
    for (size_t i = 0; allowed[i]; i++)
        if (!strcmp(name, allowed[i])) return 1;
    return -1;
}

static bool names_ok(const char *list, const char *const *allowed)
{
    char name[16];
    int got;
    while ((got = next_name(&list, allowed, name, sizeof name)) > 0) {}
    return got == 0 && *list == 0;
}

int bench_replay_main(int argc, char **argv)
{
    const char *model = NULL, *engine = "script", *parallel = "1,4", *headers = "changing,constant",
               *clients = "serial", *batch = "on";
    plan p = { .turns = 24, .subagents = 3, .sub_turns = 4, .system_bytes = 12000, .result_bytes = 1200,
               .ctx = 65536, .threads = 0, .max_tokens = 256 };
    struct { const char *flag; long *v; long min; } nums[] = {
        { "--turns", &p.turns, 1 }, { "--subagents", &p.subagents, 0 }, { "--sub-turns", &p.sub_turns, 1 },
        { "--system-bytes", &p.system_bytes, 1 }, { "--result-bytes", &p.result_bytes, 1 }, { "--ctx", &p.ctx, 256 },
        { "--threads", &p.threads, 0 }, { "--max-tokens", &p.max_tokens, 1 },
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--replay-bench")) continue;
        if (!v) return usage();
        bool known = true;
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "--engine")) engine = v;
        else if (!strcmp(a, "--parallel")) parallel = v;
        else if (!strcmp(a, "--header")) headers = v;
        else if (!strcmp(a, "--clients")) clients = v;
        else if (!strcmp(a, "--batch")) batch = v;
        else known = false;
        for (size_t k = 0; !known && k < sizeof nums / sizeof nums[0]; k++)
            if (!strcmp(a, nums[k].flag)) {
                if (num_parse_long(v, nums[k].min, LONG_MAX, nums[k].v, NULL)) return usage();
                known = true;
            }
        if (!known) return usage();
        i++;
    }
    bool script = !strcmp(engine, "script");
    if (!model || (!script && strcmp(engine, "cpu"))) return usage();
    char dir[4096], prefix[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(prefix, sizeof prefix, "%s/ds4cl-replay-", tmp && *tmp ? tmp : "/tmp");
    if (temp_template(dir, sizeof dir, prefix) != 0 || !mkdtemp(dir)) {
        perror("ds4cl-bench: mkdtemp");
        return 1;
    }
    char script_path[4200];
    snprintf(script_path, sizeof script_path, "%s/replies.jsonl", dir);
    ds4_error err = { "" };
    ds4_engine *e = NULL;
    if (!script || write_script(script_path, &err) == 0) {
        ds4_engine_options eo = { .model_path = model, .backend = script ? DS4_BACKEND_SCRIPT : DS4_BACKEND_CPU,
                                  .script_path = script ? script_path : NULL, .threads = (int)p.threads };
        e = ds4_engine_open(&eo, &err);
    }
    int rc = e ? 0 : 1;
    if (!e) fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
    else
        printf("parallel,header,clients,batch,request,conversation,turn,prompt_tokens,prefilled_tokens,cached_tokens,"
               "cached_pct,output_tokens,seconds\n");
    /* every --parallel with every --header, --clients and --batch */
    static const char *const header_names[] = { "changing", "constant", "none", NULL },
                             *const client_names[] = { "serial", "together", NULL }, *const batch_names[] = { "on", "off", NULL };
    long nps[16];
    int n_np = num_parse_list(parallel, 1, 16, nps, 16, NULL);
    if (n_np < 0 || !names_ok(headers, header_names) || !names_ok(clients, client_names) || !names_ok(batch, batch_names))
        rc = usage();
    for (int pi = 0; e && !rc && pi < n_np; pi++) {
        char h[16], c[16], b[16];
        for (const char *hs = headers; !rc && next_name(&hs, header_names, h, sizeof h) > 0;)
            for (const char *cs = clients; !rc && next_name(&cs, client_names, c, sizeof c) > 0;)
                for (const char *bs = batch; !rc && next_name(&bs, batch_names, b, sizeof b) > 0;) {
                    run_key k = { .parallel = nps[pi], .header = h, .clients = c, .batch = b };
                    rc = one_run(e, &p, &k, dir);
                }
    }
    ds4_engine_close(e);
    rm_rf(dir);
    return rc;
}
