/* prompt.c — the system prompt and the compaction request.
 *
 * Layout, most stable first so the cached prefix survives: BOS, [Think Max
 * prefix], the tool block (trusted: its DSML examples become the DSML
 * token), our instructions (prompts/system.txt) — up to here nothing
 * depends on the workspace, and this shared prefix is what the prompt
 * cache keeps, for every project alike — then the workspace's part: its
 * path (prompts/workspace.txt), its AGENTS.md, the --system text. That
 * part is tokenized on its own after the prefix, so the prefix's tokens
 * never depend on what follows it. Everything after the tool block is
 * plain text: a directory name, a project file or a user flag can never
 * produce a control token.
 */
#include "agent/agent_impl.h"
#include "prompts/prompts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AGENTS_MD_MAX (32u << 10)

/* Replaces every {key} in text with value. */
static void substitute(strbuf *out, const char *text, const char *key, const char *value)
{
    size_t kl = strlen(key);
    for (const char *p = text; *p;) {
        const char *hit = strstr(p, key);
        if (!hit) {
            sb_puts(out, p);
            break;
        }
        sb_append(out, p, (size_t)(hit - p));
        sb_puts(out, value);
        p = hit + kl;
    }
}

static char *read_agents_md(const char *workspace, size_t *len)
{
    strbuf path = { 0 };
    sb_printf(&path, "%s/AGENTS.md", workspace);
    char *text = file_read_all(sb_str(&path), len);
    sb_free(&path);
    if (!text) return NULL;
    if (*len > AGENTS_MD_MAX) {
        /* cut on a UTF-8 boundary */
        size_t n = AGENTS_MD_MAX;
        while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80) n--;
        text[n] = 0;
        *len = n;
    }
    return text;
}

void agent_render_system(agent *a, ds4_tokens *out)
{
    out->n = 0;
    ds4_chat_begin(a->tok, out, a->think);
    if (a->n_schemas) {
        char *block = ds4_chat_tools_block((const char *const *)a->schemas, a->n_schemas);
        ds4_chat_system(a->tok, out, block, true);
        free(block);
    }
    strbuf text = { 0 };
    const char *sys = prompt_text("system", NULL);
    if (a->n_schemas) sb_puts(&text, "\n\n");
    sb_puts(&text, sys ? sys : "");
    sb_puts(&text, "\n");
    ds4_chat_system(a->tok, out, sb_str(&text), false);
    a->sys_shared = out->n;

    sb_clear(&text);
    const char *ws = prompt_text("workspace", NULL);
    substitute(&text, ws ? ws : "The workspace is {workspace}.\n", "{workspace}", a->workspace);
    if (!a->cfg.no_agents_md) {
        size_t len;
        char *md = read_agents_md(a->workspace, &len);
        if (md && len) {
            sb_puts(&text, "\n# Project instructions (AGENTS.md in the workspace)\n\n");
            sb_append(&text, md, len);
        }
        free(md);
    }
    if (a->system_extra && *a->system_extra) {
        sb_puts(&text, "\n\n");
        sb_puts(&text, a->system_extra);
    }
    /* plain text, not a continuation of the prefix's run (see above) */
    ds4_tokenize(a->tok, sb_str(&text), text.len, out);
    sb_free(&text);
}

char *agent_compact_request(const char *reason)
{
    const char *req = prompt_text("compact", NULL);
    strbuf b = { 0 };
    substitute(&b, req ? req : "Summarize the task state ({reason}).", "{reason}", reason);
    return sb_take(&b);
}
