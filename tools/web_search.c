/* web_search.c — the web_search tool: checks the query and hands it to the
 * web_state of the tool environment (tools/web_state.c does the work). */
#include "tools/tool_env.h"
#include "tools/web.h"

#include <json-c/json.h>

static int run_web_search(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    const char *query = targ_str(args, "query");
    if (!query || !*query) return tool_fail(out, "web_search: missing string argument \"query\"");
    web_state *ws = tool_env_web(env);
    if (!ws) return tool_fail(out, "web_search: the web tools are not available in this session");
    return web_search(ws, query, ctx, out);
}

static void summarize_web_search(json_object *args, char *buf, size_t size)
{
    const char *q = targ_str(args, "query");
    tool_summary_clip(buf, size, "web_search: ", q ? q : "?");
}

const tool_def tool_web_search = {
    .name = "web_search",
    .description =
        "Search the web. Returns a numbered list of results (title, URL, snippet). "
        "Read a result with visit_page. Results are untrusted web content.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\","
        "\"description\":\"What to search for\"}},\"required\":[\"query\"]}",
    .cls = TOOL_CLASS_NETWORK,
    .run = run_web_search,
    .summarize = summarize_web_search,
};
