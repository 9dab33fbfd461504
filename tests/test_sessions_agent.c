/* Sessions with the agent over the script engine: autosave and resume
 * reading only the suffix, the system prompt cache, damaged and missing
 * files of every kind, another model, /save, /clear, fork, switch, new,
 * history, and the front end reading the session while the worker
 * writes it. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sessions/store_impl.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

/* A script whose replies continue whatever the cursor says. */
static const char *chat_script(void)
{
    const char *lines[] = {
        script_line("a</think>Remembered: blue.", NULL),
        script_line("b</think>It was blue.", "\"expect\": \"what colour\""),
        script_line("c</think>Third answer.", NULL),
        script_line("d</think>Fourth answer.", NULL),
        NULL,
    };
    return write_script(lines);
}

/* The tokens a live session prefills for a next user turn: the EOS that
 * closed the previous reply, the user turn, the assistant prefix. */
static size_t next_turn_tokens(ds4_engine *e, const char *text)
{
    ds4_tokens t = { 0 };
    ds4_chat_user(ds4_engine_tokenizer(e), &t, text);
    size_t n = t.n;
    ds4_tokens_free(&t);
    return 1 + n + 2;
}

static void corrupt(const char *path, long offset)
{
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    struct stat st;
    fstat(fd, &st);
    long at = offset >= 0 ? offset : (long)st.st_size + offset;
    unsigned char c;
    CHECK_EQ_INT(pread(fd, &c, 1, at), 1);
    c ^= 0x5a;
    CHECK_EQ_INT(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

TEST(sessions_agent, autosave_and_resume_reads_only_the_new_turn)
{
    const char *script = chat_script();
    ds4_engine *e = script_engine(script);
    sess_agent x;
    sa_start(&x, e, "s1", true);
    CHECK(sa_prefilled(&x) > 100); /* the system prompt, read once */
    sa_turn(&x, "remember blue");
    CHECK_STR_EQ(x.log.end, AGENT_END_DONE);
    agent_status st;
    agent_get_status(x.a, &st);
    size_t used = (size_t)st.ctx_used;
    sa_stop(&x);
    CHECK(access(sess_path("s1", "state.kv"), F_OK) == 0);
    CHECK_STR_EQ(journal_users("s1"), "remember blue");

    /* a later process: the same script file, the session resumed */
    ds4_engine *e2 = script_engine(script);
    sa_start(&x, e2, "s1", false);
    CHECK_STR_EQ(notes_of(x.s), "");
    CHECK_EQ_INT(sa_prefilled(&x), 1); /* only the last reply's EOS */
    agent_get_status(x.a, &st);
    CHECK_EQ_INT(st.ctx_used, used);
    sa_turn(&x, "what colour was it");
    CHECK_STR_EQ(x.log.end, AGENT_END_DONE);
    CHECK_CONTAINS(sb_str(&x.log.text), "It was blue.");
    CHECK_EQ_INT(sa_prefilled(&x), next_turn_tokens(e2, "what colour was it"));
    session_info info;
    session_get_info(x.s, &info);
    CHECK_EQ_INT(info.user_turns, 2);
    CHECK_STR_EQ(info.title, "remember blue");
    CHECK_STR_EQ(info.backend, "script");
    CHECK_EQ_INT(info.n_ctx, 8192);
    sa_stop(&x);
    CHECK_STR_EQ(journal_users("s1"), "remember blue|what colour was it");

    /* the journal replays to the saved state */
    journal_scan j;
    read_journal("s1", &j);
    ds4_tokens tx = { 0 };
    for (size_t i = 0; i < j.n; i++) {
        if (j.recs[i].kind == AGENT_TURN_SYSTEM || j.recs[i].kind == AGENT_TURN_REBUILD) tx.n = 0;
        ds4_tokens_append(&tx, j.recs[i].tokens, j.recs[i].n_tokens);
        CHECK_EQ_INT(tx.n, j.recs[i].transcript_len);
    }
    CHECK_EQ_INT(j.recs[0].kind, AGENT_TURN_SYSTEM);
    ds4_tokens_free(&tx);
    journal_scan_free(&j);
}

TEST(sessions_agent, new_sessions_start_from_the_cached_system_prompt)
{
    const char *script = chat_script();
    ds4_engine *e = script_engine(script);
    sess_agent x;
    sa_start(&x, e, NULL, true);
    size_t system = sa_prefilled(&x);
    CHECK(system > 100);
    sa_turn(&x, "remember blue");
    char id1[SESSION_ID_MAX];
    snprintf(id1, sizeof id1, "%s", session_id(x.s));
    sa_stop(&x);

    ds4_engine *e2 = script_engine(script);
    sa_start(&x, e2, NULL, true);
    /* only the workspace's part of the system prompt is read */
    CHECK_EQ_INT(sa_prefilled(&x), sa_workspace_part(&x));
    CHECK(sa_prefilled(&x) < system / 10);
    sa_turn(&x, "remember blue");
    /* a fresh session all the same: it begins with its system prompt */
    journal_scan j;
    read_journal(session_id(x.s), &j);
    CHECK(j.n >= 3);
    CHECK_EQ_INT(j.recs[0].kind, AGENT_TURN_SYSTEM);
    CHECK_EQ_INT(j.recs[0].n_tokens, system);
    journal_scan_free(&j);
    CHECK(strcmp(id1, session_id(x.s)) != 0);
    sa_stop(&x);

    /* a damaged cache is noticed, read again and replaced */
    char cache[4096];
    session_sysprompt_cache_dir(cache, sizeof cache);
    char *found;
    CHECK_EQ_INT(test_runf(&found, "ls '%s'/*.kv", cache), 0);
    found[strcspn(found, "\n")] = 0;
    CHECK(found[0]);
    corrupt(found, -3);
    ds4_engine *e3 = script_engine(script);
    sa_start(&x, e3, NULL, true);
    CHECK_EQ_INT(sa_prefilled(&x), system);
    CHECK_CONTAINS(sb_str(&x.log.notices), "could not be loaded");
    sa_turn(&x, "hi");
    sa_stop(&x);
    ds4_engine *e4 = script_engine(script);
    sa_start(&x, e4, NULL, true);
    CHECK_EQ_INT(sa_prefilled(&x), sa_workspace_part(&x));
    sa_stop(&x);
}

/* A session with two turns, stopped; the script is returned. */
static const char *two_turns(const char *id)
{
    const char *script = chat_script();
    sess_agent x;
    sa_start(&x, script_engine(script), id, true);
    sa_turn(&x, "remember blue");
    sa_turn(&x, "what colour");
    sa_stop(&x);
    return script;
}

static size_t transcript_tokens(const char *id)
{
    journal_scan j;
    read_journal(id, &j);
    size_t n = j.n ? j.recs[j.n - 1].transcript_len : 0;
    journal_scan_free(&j);
    return n;
}

/* Tokens of the system prompt the session's journal begins with. */
static size_t system_tokens(const char *id)
{
    journal_scan j;
    read_journal(id, &j);
    CHECK(j.n > 0 && j.recs[0].kind == AGENT_TURN_SYSTEM);
    size_t n = j.recs[0].n_tokens;
    journal_scan_free(&j);
    return n;
}

TEST(sessions_agent, damaged_or_missing_snapshot_reads_the_transcript_again)
{
    const char *script = two_turns("d1");
    size_t total = transcript_tokens("d1"), system = system_tokens("d1");
    for (int k = 0; k < 4; k++) {
        const char *kv = sess_path("d1", "state.kv");
        if (k == 0) corrupt(kv, -10);                 /* a flipped byte in the payload */
        if (k == 1) CHECK_EQ_INT(truncate(kv, 30), 0); /* truncated */
        if (k == 2) test_write_file(kv, "garbage", 7); /* not a snapshot */
        if (k == 3) CHECK_EQ_INT(unlink(kv), 0);       /* missing */
        sess_agent x;
        sa_start(&x, script_engine(script), "d1", false);
        if (k < 3) {
            /* the cached system prompt still helps */
            CHECK_CONTAINS(sb_str(&x.log.notices), "could not be loaded");
            CHECK_EQ_INT(sa_prefilled(&x), total - system + sa_workspace_part(&x));
        } else {
            /* missing: the cached system prompt still helps */
            CHECK_CONTAINS(notes_of(x.s), "no saved KV state");
            CHECK(sa_prefilled(&x) < total - 100);
        }
        CHECK_STR_EQ(journal_users("d1"), "remember blue|what colour");
        sa_stop(&x);
        /* and the state written at the first idle is good again */
        sa_start(&x, script_engine(script), "d1", false);
        CHECK_MSG(sa_prefilled(&x) <= 1, "case %d: %zu tokens read", k, sa_prefilled(&x));
        CHECK(strstr(sb_str(&x.log.notices), "could not be loaded") == NULL);
        sa_stop(&x);
    }
}

TEST(sessions_agent, damaged_journal_keeps_every_intact_turn)
{
    const char *script = two_turns("j1");
    journal_scan j;
    read_journal("j1", &j);
    size_t n_before = j.n;
    journal_scan_free(&j);

    /* a torn tail after a completed turn: the last bytes of the last
     * record are gone, and the metadata knows the journal was longer */
    const char *jp = sess_path("j1", "journal");
    struct stat st;
    stat(jp, &st);
    CHECK_EQ_INT(truncate(jp, st.st_size - 5), 0);
    sess_agent x;
    sa_start(&x, script_engine(script), "j1", false);
    CHECK_CONTAINS(notes_of(x.s), "was cut short");
    CHECK_STR_EQ(journal_users("j1"), "remember blue|what colour");
    sa_turn(&x, "third");
    sa_stop(&x);
    read_journal("j1", &j);
    CHECK_EQ_INT(j.torn, 0);
    CHECK_EQ_INT(j.damaged_spans, 0);
    CHECK(j.n >= n_before + 1);
    journal_scan_free(&j);
    CHECK_STR_EQ(journal_users("j1"), "remember blue|what colour|third");

    /* a flipped byte in the middle: that record is skipped, the rest kept,
     * the file repaired with the original kept beside it */
    read_journal("j1", &j);
    size_t off = 16, victim = 0;
    for (size_t i = 0; i < j.n; i++) {
        if (j.recs[i].kind == AGENT_TURN_ASSISTANT) {
            victim = i;
            break;
        }
        off += 16 + 24 + j.recs[i].len + 4 * j.recs[i].n_tokens;
    }
    CHECK(victim > 0);
    journal_scan_free(&j);
    corrupt(jp, (long)off + 40);
    sa_start(&x, script_engine(script), "j1", false);
    CHECK_CONTAINS(notes_of(x.s), "is damaged");
    CHECK_CONTAINS(notes_of(x.s), "rewritten from its intact records");
    CHECK_CONTAINS(notes_of(x.s), "the damaged original is");
    CHECK_STR_EQ(journal_users("j1"), "remember blue|what colour|third");
    sa_stop(&x);
    char *ls;
    CHECK_EQ_INT(test_runf(&ls, "ls '%s' | grep 'journal.damaged-'", sess_path("j1", "")), 0);
    read_journal("j1", &j);
    CHECK_EQ_INT(j.damaged_spans, 0);
    CHECK(!j.bad_header);
    journal_scan_free(&j);

    /* no journal at all: said so, and the session starts over */
    CHECK_EQ_INT(unlink(jp), 0);
    sa_start(&x, script_engine(script), "j1", false);
    CHECK_CONTAINS(notes_of(x.s), "journal of session j1 is missing");
    sa_turn(&x, "again");
    sa_stop(&x);
    CHECK_STR_EQ(journal_users("j1"), "again");
}

/* A generated model with the byte-level vocabulary (runner-owned path). */
static const char *gen_model(const char *name, int layers)
{
    const char *path = test_tmp_path("%s", name);
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-mkmodel' -q --tiny-vocab --layers %d -o '%s'", test_bindir(), layers, path);
    CHECK_MSG(rc == 0, "%s", out);
    return path;
}

static ds4_engine *engine_on(const char *model, const char *script)
{
    ds4_engine_options o = { .model_path = model, .backend = DS4_BACKEND_SCRIPT, .script_path = script };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    return e;
}

TEST(sessions_agent, garbage_metadata)
{
    const char *script = two_turns("g1");
    test_write_file(sess_path("g1", "meta.json"), "[1, 2", 5);
    sess_agent x;
    sa_start(&x, script_engine(script), "g1", false);
    CHECK_CONTAINS(notes_of(x.s), "rebuilt from the journal");
    CHECK_EQ_INT(sa_prefilled(&x), 1); /* the snapshot is still good */
    session_info info;
    session_get_info(x.s, &info);
    CHECK_STR_EQ(info.title, "remember blue");
    CHECK_EQ_INT(info.user_turns, 2);
    sa_stop(&x);
    char dir[4096];
    session_dir_of("g1", dir, sizeof dir);
    session_meta m;
    CHECK_EQ_INT(session_meta_read(dir, &m), 0);
    CHECK_STR_EQ(m.info.title, "remember blue");
}

TEST(sessions_agent, another_model_or_vocabulary)
{
    agent_test_model(); /* the test's home */
    const char *script = chat_script();
    /* two models with one vocabulary and different shapes (a Q2 and a Q4
     * file of one model are like that) */
    const char *ma = gen_model("a.gguf", 6), *mb = gen_model("b.gguf", 4);
    ds4_engine *ea = engine_on(ma, script), *eb = engine_on(mb, script);
    ds4_model_info ia, ib;
    ds4_engine_info(ea, &ia);
    ds4_engine_info(eb, &ib);
    CHECK(ia.identity != ib.identity);
    sess_agent x;
    sa_start(&x, ea, "o1", true);
    sa_turn(&x, "remember blue");
    sa_stop(&x);
    size_t total = transcript_tokens("o1");

    /* resumed on the other model: its state is not used, the transcript is */
    ds4_engine *eb2 = engine_on(mb, script);
    sa_start(&x, eb2, "o1", false);
    CHECK_CONTAINS(notes_of(x.s), "saved with another model");
    CHECK_CONTAINS(notes_of(x.s), "belongs to another model");
    CHECK_EQ_INT(sa_prefilled(&x), total);
    sa_stop(&x);
    CHECK_STR_EQ(journal_users("o1"), "remember blue");

    /* the state is now the other model's; when the metadata does not say
     * so, the engine refuses the snapshot itself */
    char dir[4096];
    ds4_error merr = { "" };
    session_dir_of("o1", dir, sizeof dir);
    session_meta m;
    CHECK_EQ_INT(session_meta_read(dir, &m), 0);
    CHECK_EQ_INT(m.info.model_identity, ib.identity);
    m.info.model_identity = ia.identity;
    CHECK_EQ_INT(session_meta_write(dir, &m, &merr), 0);
    ds4_engine *ea2 = engine_on(ma, script);
    sa_start(&x, ea2, "o1", false);
    CHECK_CONTAINS(sb_str(&x.log.notices), "another model");
    /* but this model's cached system prompt is used */
    CHECK_EQ_INT(sa_prefilled(&x), total - system_tokens("o1") + sa_workspace_part(&x));
    sa_stop(&x);

    /* another vocabulary: refused, nothing lost */
    CHECK_EQ_INT(session_meta_read(dir, &m), 0);
    m.tokenizer ^= 1;
    CHECK_EQ_INT(session_meta_write(dir, &m, &merr), 0);
    session *s = session_open("o1", &merr);
    CHECK(s != NULL);
    agent_config cfg = test_config(ea, 8192);
    ds4_error aerr = { "" };
    CHECK_EQ_INT(session_attach(s, ea, &cfg, &aerr), -1);
    CHECK_CONTAINS(aerr.msg, "another vocabulary");
    session_close(s);
    /* nor a context too small for it */
    CHECK_EQ_INT(session_meta_read(dir, &m), 0);
    m.tokenizer = 0;
    CHECK_EQ_INT(session_meta_write(dir, &m, &merr), 0);
    s = session_open("o1", &merr);
    cfg.n_ctx = 512;
    CHECK_EQ_INT(session_attach(s, ea, &cfg, &aerr), -1);
    CHECK_CONTAINS(aerr.msg, "more than the context");
    session_close(s);
    CHECK_STR_EQ(journal_users("o1"), "remember blue");
    ds4_engine_close(ea);
    ds4_engine_close(eb);
    ds4_engine_close(eb2);
    ds4_engine_close(ea2);
}

TEST(sessions_agent, save_request_clear_and_history)
{
    const char *script = chat_script();
    sess_agent x;
    sa_start(&x, script_engine(script), "h1", true);
    agent_request(x.a, AGENT_REQ_SAVE);
    wait_log(x.a, &x.log, "nothing to save yet", 5000);
    sa_turn(&x, "remember blue");
    sa_turn(&x, "what colour");
    agent_request(x.a, AGENT_REQ_SAVE);
    wait_log(x.a, &x.log, "saved session h1 (", 5000);

    session_turn *h;
    size_t n = session_history(x.s, 1, &h);
    CHECK(n >= 2);
    CHECK_EQ_INT(h[0].kind, AGENT_TURN_USER);
    CHECK_STR_EQ(h[0].text, "what colour");
    CHECK_EQ_INT(h[n - 1].kind, AGENT_TURN_ASSISTANT);
    CHECK_CONTAINS(h[n - 1].text, "It was blue.");
    session_turns_free(h, n);
    n = session_history(x.s, 0, &h);
    CHECK_EQ_INT(h[0].kind, AGENT_TURN_SYSTEM);
    session_turns_free(h, n);

    agent_request(x.a, AGENT_REQ_CLEAR);
    wait_log(x.a, &x.log, "conversation cleared", 5000);
    agent_status st;
    agent_get_status(x.a, &st);
    int cleared = st.ctx_used;
    sa_turn(&x, "after clear");
    agent_get_status(x.a, &st);
    int used = st.ctx_used;
    sa_stop(&x);
    (void)cleared;
    /* the rebuild replays: resumed, the context is what it was */
    sa_start(&x, script_engine(script), "h1", false);
    agent_get_status(x.a, &st);
    CHECK_EQ_INT(st.ctx_used, used);
    CHECK_EQ_INT(sa_prefilled(&x), 1);
    sa_stop(&x);
    journal_scan j;
    read_journal("h1", &j);
    int rebuilds = 0;
    for (size_t i = 0; i < j.n; i++) rebuilds += j.recs[i].kind == AGENT_TURN_REBUILD;
    CHECK_EQ_INT(rebuilds, 1);
    journal_scan_free(&j);
    CHECK_STR_EQ(journal_users("h1"), "remember blue|what colour|after clear");
}

TEST(sessions_agent, fork_switch_and_new_keep_the_engine)
{
    const char *script = chat_script();
    ds4_engine *e = script_engine(script);
    sess_agent x;
    sa_start(&x, e, "main", true);
    sa_turn(&x, "remember blue");
    char msg[512];
    ds4_error err = { "" };

    /* fork: a copy under a new ID, the agent now in it, nothing read again */
    CHECK_MSG(sessions_fork(&x.s, &x.a, &x.cfg, msg, sizeof msg) == 0, "%s", msg);
    CHECK_CONTAINS(msg, "forked from main");
    char fork_id[SESSION_ID_MAX];
    snprintf(fork_id, sizeof fork_id, "%s", session_id(x.s));
    CHECK(strcmp(fork_id, "main") != 0);
    agent_status st;
    agent_get_status(x.a, &st);
    CHECK_STR_EQ(st.session_id, fork_id);
    wait_idle(x.a, &x.log, 5000);
    CHECK(sa_prefilled(&x) <= 1);
    session_info info;
    session_get_info(x.s, &info);
    CHECK_STR_EQ(info.forked_from, "main");
    CHECK_STR_EQ(info.title, "remember blue");
    x.log.ended = false;
    sa_turn(&x, "only in the fork");
    CHECK_STR_EQ(journal_users(fork_id), "remember blue|only in the fork");
    CHECK_STR_EQ(journal_users("main"), "remember blue");

    /* switch back by prefix: instant */
    CHECK_EQ_INT(sessions_switch(&x.s, &x.a, &x.cfg, fork_id, msg, sizeof msg), -1);
    CHECK_CONTAINS(msg, "already in session");
    CHECK_MSG(sessions_switch(&x.s, &x.a, &x.cfg, "mai", msg, sizeof msg) == 0, "%s", msg);
    CHECK_CONTAINS(msg, "session main: remember blue (1 turns");
    wait_idle(x.a, &x.log, 5000);
    CHECK(sa_prefilled(&x) <= 1);
    agent_get_status(x.a, &st);
    CHECK_STR_EQ(st.session_id, "main");
    CHECK_EQ_INT(sessions_switch(&x.s, &x.a, &x.cfg, "nosuch", msg, sizeof msg), -1);
    CHECK_CONTAINS(msg, "no session");
    CHECK(x.a != NULL);

    /* a switch that cannot start keeps the current session running */
    agent_config small = x.cfg;
    small.n_ctx = 100; /* too small for any agent */
    session *target = session_open(fork_id, &err);
    CHECK(target != NULL);
    CHECK_EQ_INT(sessions_switch_to(&x.s, &x.a, &small, target, msg, sizeof msg), -1);
    CHECK_CONTAINS(msg, "cannot switch");
    CHECK(x.a == NULL); /* the small config cannot restart it either */
    CHECK_EQ_INT(session_attach(x.s, e, &x.cfg, &err), 0);
    ds4_error derr;
    x.a = agent_start(&x.cfg, &derr);
    session_attach_done(x.s);
    CHECK(x.a != NULL);

    /* /new: a fresh session from the cached system prompt */
    CHECK_MSG(sessions_new(&x.s, &x.a, &x.cfg, msg, sizeof msg) == 0, "%s", msg);
    wait_idle(x.a, &x.log, 5000);
    CHECK_EQ_INT(sa_prefilled(&x), sa_workspace_part(&x));
    CHECK(strcmp(session_id(x.s), "main") && strcmp(session_id(x.s), fork_id));
    char new_id[SESSION_ID_MAX];
    snprintf(new_id, sizeof new_id, "%s", session_id(x.s));
    /* and deleting the others, not the one open */
    CHECK_EQ_INT(sessions_delete(new_id, &err), -1);
    CHECK_EQ_INT(sessions_delete(fork_id, &err), 0);
    sa_stop(&x);
    /* the new one never got a turn: not kept */
    session_info *v;
    int n = sessions_list(&v, &err);
    CHECK_EQ_INT(n, 1);
    CHECK_STR_EQ(v[0].id, "main");
    free(v);
}

/* The front end polls the session while the worker writes it (run under
 * TSAN too). */
TEST(sessions_agent, info_and_history_while_the_worker_writes)
{
    strbuf big = { 0 };
    for (int i = 0; i < 12; i++)
        sb_printf(&big, "%s\n", script_line(test_printf("t%d</think>Answer %d.", i, i), "\"delay_ms\": 1"));
    const char *path = test_tmp_path("long.jsonl");
    test_write_file(path, big.s, big.len);
    sb_free(&big);
    sess_agent x;
    sa_start(&x, script_engine(path), "busy", true);
    for (int i = 0; i < 12; i++) {
        x.log.ended = false;
        CHECK_EQ_INT(agent_submit(x.a, test_printf("turn %d", i)), 0);
        while (!x.log.ended) {
            session_info info;
            session_get_info(x.s, &info);
            CHECK(info.user_turns <= i + 1);
            session_turn *h;
            size_t n = session_history(x.s, 2, &h);
            session_turns_free(h, n);
            agent_event *ev;
            size_t ne = agent_drain(x.a, &ev);
            for (size_t k = 0; k < ne; k++)
                if (ev[k].type == AGENT_EV_TURN_END) x.log.ended = true;
            agent_events_free(ev, ne);
            usleep(500);
        }
        wait_idle(x.a, &x.log, 5000);
    }
    session_info info;
    session_get_info(x.s, &info);
    CHECK_EQ_INT(info.user_turns, 12);
    sa_stop(&x);
}

static const sessions_command *command(const char *name)
{
    size_t n;
    const sessions_command *t = sessions_commands(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    FAIL("no command /%s", name);
}

static void add_id(void *ud, const char *id)
{
    sb_printf(ud, "%s;", id);
}

TEST(sessions_agent, slash_commands)
{
    const char *script = chat_script();
    sess_agent x;
    sa_start(&x, script_engine(script), "alpha", true);
    sa_turn(&x, "remember blue");
    sessions_ctx c = { &x.s, &x.a, &x.cfg };
    char *out;

    CHECK_EQ_INT(command("sessions")->run(&c, "", &out), 0);
    CHECK_CONTAINS(out, "* alpha");
    CHECK_CONTAINS(out, "remember blue");
    CHECK_CONTAINS(out, "/switch ID");
    free(out);
    CHECK(command("sessions")->busy_ok);
    CHECK(!command("switch")->busy_ok && command("switch")->takes_id);

    CHECK_EQ_INT(command("fork")->run(&c, "", &out), 0);
    CHECK_CONTAINS(out, "Now in session ");
    CHECK_CONTAINS(out, "(forked from alpha)");
    CHECK_CONTAINS(out, "> remember blue");
    free(out);
    char fork_id[SESSION_ID_MAX];
    snprintf(fork_id, sizeof fork_id, "%s", session_id(x.s));
    wait_idle(x.a, &x.log, 5000);

    CHECK_EQ_INT(command("switch")->run(&c, "", &out), -1);
    CHECK_CONTAINS(out, "usage: `/switch ID`");
    CHECK_CONTAINS(out, "alpha");
    free(out);
    CHECK_EQ_INT(command("switch")->run(&c, "  alp  ", &out), 0);
    CHECK_CONTAINS(out, "Switched to session alpha: remember blue");
    free(out);
    CHECK_STR_EQ(session_id(x.s), "alpha");
    wait_idle(x.a, &x.log, 5000);

    CHECK_EQ_INT(command("delete")->run(&c, "alpha", &out), -1);
    CHECK_CONTAINS(out, "is the current session");
    free(out);
    CHECK_EQ_INT(command("delete")->run(&c, "", &out), -1);
    CHECK_CONTAINS(out, "usage");
    free(out);

    strbuf ids = { 0 };
    sessions_complete("", add_id, &ids);
    CHECK_CONTAINS(sb_str(&ids), "alpha;");
    CHECK_CONTAINS(sb_str(&ids), fork_id);
    sb_clear(&ids);
    sessions_complete("alp", add_id, &ids);
    CHECK_STR_EQ(sb_str(&ids), "alpha;");

    /* asked first, deleted when the same command comes again */
    CHECK_EQ_INT(command("delete")->run(&c, fork_id, &out), 0);
    CHECK_CONTAINS(out, test_printf("Delete session %s (", fork_id));
    CHECK_CONTAINS(out, test_printf("`/delete %s` again within 30 s deletes it", fork_id));
    free(out);
    sb_clear(&ids);
    sessions_complete(fork_id, add_id, &ids);
    CHECK_STR_EQ(sb_str(&ids), test_printf("%s;", fork_id));
    CHECK_EQ_INT(command("delete")->run(&c, fork_id, &out), 0);
    CHECK_CONTAINS(out, "Deleted session");
    free(out);
    sb_clear(&ids);
    sessions_complete(fork_id, add_id, &ids);
    CHECK_STR_EQ(sb_str(&ids), "");
    sb_free(&ids);
    CHECK_EQ_INT(command("new")->run(&c, "", &out), 0);
    CHECK_CONTAINS(out, "New session ");
    free(out);
    CHECK(strcmp(session_id(x.s), "alpha") != 0);
    sa_stop(&x);
}

TEST(sessions_agent, history_keeps_tool_calls_across_resume)
{
    const char *lines[] = {
        script_line(test_printf("x</think>Echo.%s", dsml_block("echo", "text", "ping 7", NULL)), NULL),
        script_line("y</think>It said ping 7.", NULL),
        NULL,
    };
    const char *script = write_script(lines);
    sess_agent x;
    sa_start(&x, script_engine(script), "tc", true);
    sa_turn(&x, "echo it");
    sa_stop(&x);
    sa_start(&x, script_engine(script), "tc", false);
    session_turn *h;
    size_t n = session_history(x.s, 0, &h);
    const char *seq = "";
    const session_turn *tool = NULL;
    for (size_t i = 0; i < n; i++) {
        seq = test_printf("%s%d", seq, (int)h[i].kind);
        if (h[i].kind == AGENT_TURN_TOOL) tool = &h[i];
    }
    CHECK_STR_EQ(seq, "40121");
    CHECK(tool != NULL);
    CHECK_EQ_INT(tool->n_calls, 1);
    CHECK_STR_EQ(tool->calls[0].name, "echo");
    CHECK_STR_EQ(tool->calls[0].args_json, "{\"text\":\"ping 7\"}");
    CHECK_STR_EQ(tool->calls[0].result, "ping 7");
    CHECK(!tool->calls[0].is_error);
    CHECK_CONTAINS(tool->text, "Tool result 1 (echo):\nping 7");
    session_turns_free(h, n);
    sa_stop(&x);
}
