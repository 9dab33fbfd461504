/* `ds4cl serve` under the coding agents as they ship: Claude Code (claude
 * -p, Anthropic messages), Codex CLI (codex exec, OpenAI responses) and
 * opencode (opencode run, OpenAI chat), installed from tests/agents' lock
 * file into build/serve-agents. The script engine makes the model call the
 * client's own file-writing tool with the parameter names of its schema;
 * the test asserts the file the client wrote. Each client runs with its
 * home, config and data in the test's temp directory, every URL on
 * 127.0.0.1, its telemetry, update checks and sharing switched off, and a
 * timeout, so that nothing leaks to the user's config and a client that
 * tries the network cannot hang the test.
 *
 * Also: request bodies captured from those clients (tests/serve/captured)
 * are answered, each in its API's shape. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/serve_util.h"

#define D SRV_DSML

/* The client's time limit: far above what a run takes (seconds), far below
 * the runner's; a client that waits on the network fails instead of hanging. */
#define CLIENT_TIMEOUT_S 120

/* The agents' prompts are long (some 30,000 tokens of the tiny model's
 * byte vocabulary); the key checks that each sends it where it should. */
#define AGENT_SERVE_FLAGS "--api-key sekrit --ctx 65536"

/* A reply that thinks, says so and calls tool with the given parameters
 * (pairs of name and string value, NULL-terminated). */
static const char *tool_call(const char *tool, const char *const *params)
{
    char *s = test_printf("plan</think>Writing it.\n\n<" D "tool_calls>\n<" D "invoke name=\"%s\">\n", tool);
    for (size_t i = 0; params[i]; i += 2)
        s = test_printf("%s<" D "parameter name=\"%s\" string=\"true\">%s</" D "parameter>\n", s, params[i],
                        params[i + 1]);
    return test_printf("%s</" D "invoke>\n</" D "tool_calls>", s);
}

/* Runs cmd (a client) in dir with a clean environment (PATH kept) plus env;
 * its output. Fails with the output and the server's log unless it exits 0. */
static char *run_client(const srv_server *s, const char *dir, const char *env, const char *cmd)
{
    char *out;
    int rc = test_runf(&out, "cd '%s' && env -i PATH=\"$PATH\" LANG=C.UTF-8 TERM=dumb %s timeout -k 5 %d %s", dir, env,
                       CLIENT_TIMEOUT_S, cmd);
    CHECK_MSG(rc == 0, "the client exited with %d:\n%s\nserver log:\n%s", rc, out, test_read_file(s->log, NULL));
    return out;
}

static void check_file(const srv_server *s, const char *path, const char *want, const char *client_out)
{
    char *got = test_read_file(path, NULL);
    CHECK_MSG(got != NULL, "%s was not written; client:\n%s\nserver log:\n%s", path, client_out,
              test_read_file(s->log, NULL));
    CHECK_STR_EQ(got, want);
}

static const char *make_dir(const char *name)
{
    const char *dir = test_tmp_path("%s", name);
    char *out;
    CHECK_MSG(test_runf(&out, "mkdir -p '%s'", dir) == 0, "%s", out);
    return dir;
}

TEST(serve_agents, claude_code_writes_a_file_through_serve)
{
    const char *bin = test_printf("%s/node_modules/.bin/claude", srv_agents_dir());
    const char *home = make_dir("cc-home"), *work = make_dir("cc-work");
    const char *file = test_printf("%s/hello.txt", work);
    const char *params[] = { "file_path", file, "content", "hello from claude code\n", NULL };
    const char *lines[] = { srv_reply_line(tool_call("Write", params), "\"expect\": \"Create hello.txt\""),
                            srv_reply_line("ok</think>Done: hello.txt is written.", "\"expect\": \"File created\""), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), AGENT_SERVE_FLAGS);
    char *env = test_printf("HOME='%s' XDG_CONFIG_HOME='%s/.config' XDG_CACHE_HOME='%s/.cache' "
                            "ANTHROPIC_BASE_URL=http://127.0.0.1:%d ANTHROPIC_AUTH_TOKEN=sekrit "
                            "ANTHROPIC_MODEL=ds4 ANTHROPIC_DEFAULT_HAIKU_MODEL=ds4 ANTHROPIC_DEFAULT_SONNET_MODEL=ds4 "
                            "ANTHROPIC_DEFAULT_OPUS_MODEL=ds4 CLAUDE_CODE_SUBAGENT_MODEL=ds4 "
                            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 "
                            "DISABLE_ERROR_REPORTING=1 CLAUDE_CODE_MAX_CONTEXT_TOKENS=65536",
                            home, home, home, s.port);
    /* acceptEdits: file edits run without asking, anything else is refused */
    char *out = run_client(&s, work, env, test_printf("'%s' -p 'Create hello.txt' --permission-mode acceptEdits", bin));
    check_file(&s, file, "hello from claude code\n", out);
    CHECK_CONTAINS(out, "Done: hello.txt is written.");
    CHECK_EQ_INT(srv_stop(&s), 0);
    /* its system turn among the messages was taken, not refused */
    char *log = test_read_file(s.log, NULL);
    CHECK_MSG(!strstr(log, "400"), "%s", log);
}

TEST(serve_agents, codex_applies_a_patch_through_serve)
{
    const char *bin = test_printf("%s/node_modules/.bin/codex", srv_agents_dir());
    const char *home = make_dir("cx-home"), *work = make_dir("cx-work");
    /* Codex edits with apply_patch, which its exec_command tool runs
     * itself (the tool list it sends for a model it does not know) */
    const char *params[] = { "cmd",
                             "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch\nEOF\n",
                             NULL };
    const char *lines[] = { srv_reply_line(tool_call("exec_command", params), "\"expect\": \"Create hello.txt\""),
                            srv_reply_line("ok</think>Done: hello.txt is written.", "\"expect\": \"hello.txt\""), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), AGENT_SERVE_FLAGS);
    const char *config = test_printf("model = \"ds4\"\n"
                                     "model_provider = \"ds4cl\"\n"
                                     "check_for_update_on_startup = false\n"
                                     "\n"
                                     "[model_providers.ds4cl]\n"
                                     "name = \"ds4cl\"\n"
                                     "base_url = \"http://127.0.0.1:%d/v1\"\n"
                                     "env_key = \"DS4CL_API_KEY\"\n"
                                     "wire_api = \"responses\"\n"
                                     "\n"
                                     "[analytics]\n"
                                     "enabled = false\n",
                                     s.port);
    test_write_file(test_printf("%s/config.toml", home), config, strlen(config));
    char *env = test_printf("HOME='%s' CODEX_HOME='%s' DS4CL_API_KEY=sekrit", home, home);
    char *out = run_client(&s, work, env,
                           test_printf("'%s' exec --skip-git-repo-check --sandbox workspace-write 'Create hello.txt'", bin));
    check_file(&s, test_printf("%s/hello.txt", work), "hello from codex\n", out);
    CHECK_CONTAINS(out, "Done: hello.txt is written.");
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve_agents, opencode_writes_a_file_through_serve)
{
    const char *bin = test_printf("%s/node_modules/.bin/opencode", srv_agents_dir());
    const char *home = make_dir("oc-home"), *work = make_dir("oc-work");
    const char *file = test_printf("%s/hello.txt", work);
    const char *params[] = { "filePath", file, "content", "hello from opencode\n", NULL };
    /* opencode asks for a title beside the turn, at a moment of its own */
    const char *lines[] = { srv_reply_line("ok</think>Hello file", "\"match\": \"title generator\""),
                            srv_reply_line(tool_call("write", params), "\"expect\": \"Create hello.txt\""),
                            srv_reply_line("ok</think>Done: hello.txt is written.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), AGENT_SERVE_FLAGS);
    make_dir("oc-home/.config/opencode");
    const char *config = test_printf(
        "{\n"
        "  \"$schema\": \"https://opencode.ai/config.json\",\n"
        "  \"autoupdate\": false,\n"
        "  \"share\": \"disabled\",\n"
        "  \"provider\": {\n"
        "    \"ds4cl\": {\n"
        "      \"npm\": \"@ai-sdk/openai-compatible\",\n"
        "      \"name\": \"ds4cl\",\n"
        "      \"options\": { \"baseURL\": \"http://127.0.0.1:%d/v1\", \"apiKey\": \"{env:DS4CL_API_KEY}\" },\n"
        "      \"models\": { \"ds4\": { \"name\": \"DeepSeek V4 Flash (local)\", \"tool_call\": true, \"reasoning\": true,\n"
        "                             \"limit\": { \"context\": 65536, \"output\": 4096 } } }\n"
        "    }\n"
        "  },\n"
        "  \"model\": \"ds4cl/ds4\",\n"
        "  \"small_model\": \"ds4cl/ds4\"\n"
        "}\n",
        s.port);
    test_write_file(test_printf("%s/.config/opencode/opencode.json", home), config, strlen(config));
    char *env = test_printf("HOME='%s' XDG_CONFIG_HOME='%s/.config' XDG_DATA_HOME='%s/.local/share' "
                            "XDG_CACHE_HOME='%s/.cache' XDG_STATE_HOME='%s/.local/state' DS4CL_API_KEY=sekrit "
                            "OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_SHARE=1 "
                            "OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_CLAUDE_CODE=1 "
                            "OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER=1",
                            home, home, home, home, home);
    char *out = run_client(&s, work, env, test_printf("'%s' run 'Create hello.txt'", bin));
    check_file(&s, file, "hello from opencode\n", out);
    CHECK_CONTAINS(out, "Done: hello.txt is written.");
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* The visible text of a streamed reply of any of the three APIs. */
static char *streamed_text(const char *body)
{
    enum { MAX_EVENTS = 256 };
    const char *names[MAX_EVENTS];
    struct json_object *data[MAX_EVENTS];
    bool done;
    int n = srv_sse_events(body, names, data, MAX_EVENTS, &done);
    char *text = test_strdup("");
    for (int i = 0; i < n; i++) {
        const char *type = srv_str(data[i], "type"), *piece = NULL;
        if (type && !strcmp(type, "content_block_delta") && !strcmp(srv_str(data[i], "delta.type"), "text_delta"))
            piece = srv_str(data[i], "delta.text");
        else if (type && !strcmp(type, "response.output_text.delta"))
            piece = srv_str(data[i], "delta");
        else if (!type)
            piece = srv_str(data[i], "choices.0.delta.content");
        if (piece) text = test_printf("%s%s", text, piece);
        json_object_put(data[i]);
    }
    return text;
}

/* What the three clients sent in a tool round (trimmed of nothing but ids
 * and paths): each is answered in its API's stream, from a prompt that
 * holds the tool's result. */
TEST(serve_agents, captured_requests_of_the_three_clients_are_answered)
{
    static const struct {
        const char *file, *path, *expect;
    } cases[] = {
        { "claude-code-2.1.332.messages.json", "/v1/messages?beta=true", "File created successfully" },
        { "codex-0.171.0.responses.json", "/v1/responses", "Success. Updated the following files" },
        { "opencode-1.18.33.chat.json", "/v1/chat/completions", "Wrote file successfully." },
        { "opencode-1.18.33.chat-title.json", "/v1/chat/completions", "Create hello.txt" },
    };
    size_t n = sizeof cases / sizeof *cases;
    const char **lines = test_alloc((n + 1) * sizeof *lines);
    for (size_t i = 0; i < n; i++)
        lines[i] = srv_reply_line("ok</think>Done.", test_printf("\"expect\": \"%s\"", cases[i].expect));
    lines[n] = NULL;
    srv_server s;
    srv_start(&s, srv_script(lines), "--ctx 65536");
    for (size_t i = 0; i < n; i++) {
        const char *path = test_printf("%s/tests/serve/captured/%s", test_root(), cases[i].file);
        char *json = test_read_file(path, NULL);
        CHECK_MSG(json != NULL, "cannot read %s", path);
        char *body;
        int status = srv_http(&s, "POST", cases[i].path, json, NULL, &body);
        CHECK_MSG(status == 200, "%s: status %d: %s", cases[i].file, status, body);
        CHECK_STR_EQ(streamed_text(body), "Done.");
    }
    CHECK_EQ_INT(srv_stop(&s), 0);
}
