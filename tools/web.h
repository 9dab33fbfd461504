/* web.h — the web tools: web_search(query) and visit_page(url), run in a
 * real headless Chromium/Chrome over the DevTools protocol.
 *
 * A web_state holds what the tools keep between calls: the browser (started
 * on first use with a throwaway profile, or attached to with --cdp-url),
 * and the unread rest of the last page. Freeing it closes the browser and
 * every process it started.
 *
 * visit_page accepts http and https URLs only (a bare "example.com/x" means
 * https). file:// is refused on purpose: local files go through `read`,
 * whose workspace rules a browser would bypass; javascript:, data:,
 * chrome: and the like are refused too.
 *
 * Results are plain untrusted text: valid UTF-8, control and invisible
 * formatting characters removed, capped to the call's max_result_bytes
 * (24 KiB by default). A header says that what follows is page content and
 * not instructions, and the content ends at a marker line carrying a random
 * tag the page cannot predict. The rest of a long page stays here for the
 * `more` tool (web_take_remainder).
 *
 * Every wait polls ctx->cancelled (a cancelled call returns within 100 ms)
 * and has a time limit: browser start, DevTools connection, navigation,
 * load, script evaluation. A page that never finishes loading is read as
 * far as it got, with a note saying so.
 *
 * A web_state is used by one thread at a time; separate ones are
 * independent.
 */
#ifndef DS4CL_WEB_H
#define DS4CL_WEB_H

#include <stdbool.h>
#include <stddef.h>

#include "tools/tools.h"

typedef struct web_state web_state;

extern const tool_def tool_web_search;
extern const tool_def tool_visit_page;

/* Uses cfg->state_dir (browser profile below it; NULL = temp dir),
 * cfg->cdp_url, cfg->browser_path and cfg->search_url. Starts nothing. */
web_state *web_state_new(const tool_env_config *cfg);
void web_state_free(web_state *ws);

/* The tool_env's web_state; provided by the tool environment. */
web_state *tool_env_web(tool_env *env);

/* The two tools, callable without a tool_env. Return 0, or -1 when
 * out->text is an error ("Tool error: …"). */
int web_visit_page(web_state *ws, const char *url, const tool_call_ctx *ctx, tool_result *out);
int web_search(web_state *ws, const char *query, const tool_call_ctx *ctx, tool_result *out);

/* Paging of the last visited page (a later visit replaces it). The next part,
 * with the same header and end marker as the first, at most max_bytes
 * (0 = the default cap); malloc'd, NULL when nothing is left. */
bool web_has_remainder(const web_state *ws);
char *web_take_remainder(web_state *ws, size_t max_bytes);

/* Time limits in milliseconds; 0 leaves a limit unchanged. */
typedef struct {
    int start_ms;    /* browser start until its DevTools endpoint answers (20 s) */
    int connect_ms;  /* one DevTools HTTP request or WebSocket connect (5 s) */
    int navigate_ms; /* until the server answers and the page commits (20 s) */
    int load_ms;     /* from commit until the load event (10 s); then read what is there */
    int settle_ms;   /* after load, waiting for the network to go quiet (1.5 s) */
    int eval_ms;     /* running the extractor (10 s) */
} web_limits;

void web_set_limits(web_state *ws, const web_limits *limits);

/* Where the time of the last call went, in milliseconds. */
typedef struct {
    bool started_browser;
    double browser_ms;   /* starting (or reaching) the browser */
    double tab_ms;       /* new tab + DevTools connection */
    double navigate_ms;  /* navigate until commit */
    double load_ms;      /* commit until loaded and settled */
    double extract_ms;   /* extractor + formatting */
    double total_ms;
} web_timing;

void web_last_timing(const web_state *ws, web_timing *t);

/* The http(s) URL visit_page would open (malloc'd), or NULL with the reason. */
char *web_normalize_url(const char *url, ds4_error *err);

/* The search template with {query} replaced by the URL-encoded query. */
char *web_search_url(const char *tmpl, const char *query, ds4_error *err);

#define WEB_DEFAULT_SEARCH_URL "https://html.duckduckgo.com/html/?q={query}"
#define WEB_DEFAULT_RESULT_BYTES (24u * 1024u)

#endif
