/* readable.c — cleaning and rendering what the in-page extractors return.
 * The two extractors are JavaScript kept here as C strings (one source line
 * per literal line); they only read the DOM and return JSON. */
#include "tools/readable.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- in-page extractors ------------------------------------------------------ */

/* Walks the rendered DOM in document order (open shadow roots and slots
 * included, hidden and non-text elements skipped) and returns
 * {title, url, type, status, blocks, links, truncated, chars}; a block is
 * [kind, level, segments, number] where kind is h|p|li|ol|lc|q|tr|pre and a
 * segment is a string or a 1-based index into links. Stops at 1e6
 * characters or 4 s so a monstrous page cannot stall the call. */
const char readable_page_js[] =
    "(() => {\n"
    "  const MAX_CHARS = 1000000, MAX_LINKS = 5000, MAX_MS = 4000;\n"
    "  const started = Date.now();\n"
    "  const blocks = [], links = [], linkNo = new Map();\n"
    "  let total = 0, truncated = false, stop = false, seen = 0;\n"
    "  let cur = null, kind = 'p', level = 0, num = 0, listDepth = 0, inPre = 0, shown = true;\n"
    "  const SKIP = new Set(['script', 'style', 'noscript', 'template', 'head', 'title', 'meta',\n"
    "    'link', 'svg', 'canvas', 'iframe', 'frame', 'frameset', 'object', 'embed', 'video',\n"
    "    'audio', 'select', 'option', 'datalist', 'textarea', 'input', 'dialog']);\n"
    "  const flush = () => {\n"
    "    if (cur && cur[2].some(s => typeof s === 'string' && s.trim())) blocks.push(cur);\n"
    "    cur = null;\n"
    "  };\n"
    "  const text = (s) => {\n"
    "    if (stop || !s) return;\n"
    "    if (!cur) cur = [kind, level, [], num];\n"
    "    const segs = cur[2], last = segs.length - 1;\n"
    "    if (last >= 0 && typeof segs[last] === 'string') segs[last] += s;\n"
    "    else segs.push(s);\n"
    "    total += s.length;\n"
    "    if (total > MAX_CHARS) { truncated = true; stop = true; }\n"
    "  };\n"
    "  const kids = (el) => {\n"
    "    let list = el.childNodes;\n"
    "    if (el.shadowRoot) list = el.shadowRoot.childNodes;\n"
    "    else if (el.localName === 'slot') {\n"
    "      const a = el.assignedNodes({ flatten: true });\n"
    "      if (a.length) list = a;\n"
    "    }\n"
    "    for (const n of list) { if (stop) return; walk(n); }\n"
    "  };\n"
    "  const walk = (node) => {\n"
    "    if (stop) return;\n"
    "    if (++seen % 1000 === 0 && Date.now() - started > MAX_MS) { truncated = true; stop = true; return; }\n"
    "    if (node.nodeType === 3) {\n"
    "      if (shown) text(inPre ? node.data : node.data.replace(/\\s+/g, ' '));\n"
    "      return;\n"
    "    }\n"
    "    if (node.nodeType !== 1) return;\n"
    "    const el = node, tag = el.localName;\n"
    "    if (SKIP.has(tag) || el.hidden || el.getAttribute('aria-hidden') === 'true') return;\n"
    "    const cs = getComputedStyle(el), disp = cs.display;\n"
    "    if (disp === 'none') return;\n"
    "    if (tag === 'br') { text('\\n'); return; }\n"
    "    if (tag === 'hr') { if (!inPre) { flush(); } return; }\n"
    "    const saved = [kind, level, num, shown, listDepth, inPre];\n"
    "    shown = cs.visibility === 'visible';\n"
    "    const cell = disp === 'table-cell' || tag === 'td' || tag === 'th';\n"
    "    const inline = cell || disp.startsWith('inline') || disp === 'contents';\n"
    "    let k = null, lv = level, n = 0;\n"
    "    if (/^h[1-6]$/.test(tag)) { k = 'h'; lv = +tag[1]; }\n"
    "    else if (tag === 'pre') k = 'pre';\n"
    "    else if (tag === 'blockquote') k = 'q';\n"
    "    else if (tag === 'tr') k = 'tr';\n"
    "    else if (tag === 'li' || disp === 'list-item') {\n"
    "      const ol = el.parentElement && el.parentElement.localName === 'ol';\n"
    "      k = ol ? 'ol' : 'li';\n"
    "      lv = Math.max(1, listDepth);\n"
    "      if (ol) {\n"
    "        const start = parseInt(el.parentElement.getAttribute('start') || '1', 10) || 1;\n"
    "        let i = 0;\n"
    "        for (let s = el.previousElementSibling; s; s = s.previousElementSibling) if (s.localName === 'li') i++;\n"
    "        n = start + i;\n"
    "      }\n"
    "    }\n"
    "    if (tag === 'ul' || tag === 'ol') listDepth++;\n"
    "    const block = !inline && !inPre;\n"
    "    if (block) {\n"
    "      flush();\n"
    "      if (k) { kind = k; level = lv; num = n; }\n"
    "      else if (kind === 'li' || kind === 'ol') { kind = 'lc'; }\n"
    "      else if (kind === 'tr' || kind === 'pre') { kind = 'p'; level = 0; }\n"
    "    } else if (inPre && !inline) text('\\n');\n"
    "    if (cell && cur && cur[2].length) text(' | ');\n"
    "    if (k === 'pre') inPre++;\n"
    "    const code = tag === 'code' && !inPre && inline;\n"
    "    if (code) text('`');\n"
    "    let link = 0;\n"
    "    if (tag === 'a' && typeof el.href === 'string' && /^https?:/i.test(el.href)) {\n"
    "      const href = el.href;\n"
    "      link = linkNo.get(href) || 0;\n"
    "      if (!link && links.length < MAX_LINKS) { links.push(href); link = links.length; linkNo.set(href, link); }\n"
    "    }\n"
    "    const before = total;\n"
    "    kids(el);\n"
    "    if (code) {\n"
    "      if (total === before + 1 && cur) { const segs = cur[2]; segs[segs.length - 1] = segs[segs.length - 1].slice(0, -1); total--; }\n"
    "      else text('`');\n"
    "    }\n"
    "    if (link && !stop) {\n"
    "      if (total === before) {\n"
    "        const img = el.querySelector('img[alt]');\n"
    "        const label = (el.getAttribute('aria-label') || el.title || (img && img.alt) || '').trim();\n"
    "        if (label) text(label);\n"
    "      }\n"
    "      if (total > before && cur) cur[2].push(link);\n"
    "    }\n"
    "    [kind, level, num, shown, listDepth, inPre] = saved;\n"
    "    if (block) {\n"
    "      flush();\n"
    "      if (kind === 'li' || kind === 'ol') kind = 'lc';\n"
    "    }\n"
    "  };\n"
    "  walk(document.body || document.documentElement);\n"
    "  flush();\n"
    "  let status = 0;\n"
    "  try {\n"
    "    const nav = performance.getEntriesByType('navigation')[0];\n"
    "    status = (nav && nav.responseStatus) || 0;\n"
    "  } catch (e) { status = 0; }\n"
    "  return { title: document.title || '', url: location.href, type: document.contentType || '',\n"
    "           status, blocks, links, truncated, chars: total };\n"
    "})()\n"
    ;

/* Result lists: the layouts of DuckDuckGo's HTML endpoint, Bing and Google
 * first, then a generic guess (outbound links with text, preferring those
 * in headings, each with the text of its smallest own container as the
 * snippet). The engine's own redirect links are unwrapped. */
const char readable_search_js[] =
    "(() => {\n"
    "  const norm = (s) => (s || '').replace(/\\s+/g, ' ').trim();\n"
    "  const here = location.hostname;\n"
    "  const out = [], seen = new Set();\n"
    "  const same = (h) => h === here || h.endsWith('.' + here) || here.endsWith('.' + h);\n"
    "  const target = (a) => {\n"
    "    let u;\n"
    "    try { u = new URL(a.href); } catch (e) { return null; }\n"
    "    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;\n"
    "    if (!same(u.hostname)) return u.href;\n"
    "    for (const k of ['uddg', 'url', 'q', 'u']) {\n"
    "      const v = u.searchParams.get(k);\n"
    "      if (v && /^https?:\\/\\//i.test(v)) return v;\n"
    "    }\n"
    "    return null;\n"
    "  };\n"
    "  const shown = (el) => !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);\n"
    "  const add = (title, url, snippet) => {\n"
    "    title = norm(title);\n"
    "    snippet = norm(snippet);\n"
    "    if (!url || title.length < 2 || seen.has(url) || out.length >= 20) return;\n"
    "    seen.add(url);\n"
    "    if (snippet.startsWith(title)) snippet = snippet.slice(title.length).trim();\n"
    "    out.push([title.slice(0, 300), url, snippet.slice(0, 500)]);\n"
    "  };\n"
    "  const layouts = [\n"
    "    ['.result, .web-result', 'a.result__a, a.result-link', '.result__snippet, .result-snippet'],\n"
    "    ['li.b_algo', 'h2 a', '.b_caption p, .b_lineclamp2, .b_algoSlug'],\n"
    "    ['div.g, div[data-snc]', 'a h3', '.VwiC3b, [data-sncf], .IsZvec'],\n"
    "  ];\n"
    "  for (const [box, tsel, ssel] of layouts) {\n"
    "    for (const c of document.querySelectorAll(box)) {\n"
    "      const t = c.querySelector(tsel);\n"
    "      if (!t) continue;\n"
    "      const a = t.closest('a') || t.querySelector('a');\n"
    "      if (!a) continue;\n"
    "      const sn = c.querySelector(ssel);\n"
    "      add(t.textContent, target(a), sn ? sn.textContent : '');\n"
    "    }\n"
    "    if (out.length) break;\n"
    "  }\n"
    "  if (!out.length) {\n"
    "    let cands = [];\n"
    "    for (const a of document.querySelectorAll('a[href]')) {\n"
    "      const url = target(a);\n"
    "      if (url && shown(a) && norm(a.textContent).length >= 3) cands.push([a, url]);\n"
    "    }\n"
    "    const headed = cands.filter(([a]) => a.closest('h1,h2,h3,h4') || a.querySelector('h1,h2,h3,h4'));\n"
    "    if (headed.length >= 2) cands = headed;\n"
    "    const set = new Set(cands.map((x) => x[0]));\n"
    "    for (const [a, url] of cands) {\n"
    "      const title = norm(a.textContent);\n"
    "      let box = a, best = null;\n"
    "      for (let i = 0; i < 5 && box.parentElement && box.parentElement !== document.body; i++) {\n"
    "        box = box.parentElement;\n"
    "        let other = false;\n"
    "        for (const x of box.querySelectorAll('a[href]')) if (x !== a && set.has(x)) { other = true; break; }\n"
    "        if (other) break;\n"
    "        best = box;\n"
    "        if (norm(box.innerText).length > title.length + 40) break;\n"
    "      }\n"
    "      add(title, url, best ? norm(best.innerText).replace(title, '') : '');\n"
    "    }\n"
    "  }\n"
    "  let status = 0;\n"
    "  try {\n"
    "    const nav = performance.getEntriesByType('navigation')[0];\n"
    "    status = (nav && nav.responseStatus) || 0;\n"
    "  } catch (e) { status = 0; }\n"
    "  return { title: document.title || '', url: location.href, status, results: out,\n"
    "           text: norm(document.body ? document.body.innerText : '').slice(0, 600) };\n"
    "})()\n"
    ;

/* ---- cleaning ------------------------------------------------------------------ */

static bool dropped_codepoint(uint32_t cp)
{
    if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) return true;
    if (cp == 0x200b || cp == 0xfeff || cp == 0x180e) return true;     /* zero-width */
    if (cp >= 0x202a && cp <= 0x202e) return true;                     /* bidi embed/override */
    if (cp >= 0x2066 && cp <= 0x2069) return true;                     /* bidi isolates */
    if (cp >= 0x2060 && cp <= 0x2064) return true;                     /* invisible operators */
    if (cp >= 0xfff9 && cp <= 0xfffb) return true;                     /* interlinear annotation */
    if ((cp & 0xfffe) == 0xfffe || (cp >= 0xfdd0 && cp <= 0xfdef)) return true; /* noncharacters */
    if (cp >= 0xe0000 && cp <= 0xe007f) return true;                   /* tag characters */
    if (cp >= 0xe0100 && cp <= 0xe01ef) return true;                   /* variation selectors 17+ */
    return false;
}

static void put_utf8(strbuf *out, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xc0 | cp >> 6); b[1] = (char)(0x80 | (cp & 0x3f)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | cp >> 12);
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | cp >> 18);
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    sb_append(out, b, n);
}

/* Decodes one code point at s[0..len); returns its length, or 0 for an
 * invalid sequence (overlong, surrogate, out of range, truncated). */
static size_t decode_utf8(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t n;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) { n = 2; v = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { n = 3; v = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (len < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return n;
}

void readable_clean(strbuf *out, const char *s, size_t len, bool keep_layout)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = decode_utf8(p + i, len - i, &cp);
        if (!n) {
            put_utf8(out, 0xfffd);
            i++;
            continue;
        }
        i += n;
        if (cp == '\n' || cp == 0x2028 || cp == 0x2029) {
            sb_putc(out, keep_layout ? '\n' : ' ');
        } else if (cp == '\t') {
            sb_putc(out, keep_layout ? '\t' : ' ');
        } else if (cp == 0xa0) {
            sb_putc(out, ' ');
        } else if (!dropped_codepoint(cp)) {
            if (n == 1) sb_putc(out, (char)cp);
            else sb_append(out, (const char *)p + i - n, n);
        }
    }
}

/* One line of cleaned text without runs of spaces, trimmed. */
static char *clean_line(const char *s, size_t len, size_t cap)
{
    strbuf raw = {0}, out = {0};
    readable_clean(&raw, s, len, false);
    bool space = false;
    for (size_t i = 0; i < raw.len; i++) {
        char c = raw.s[i];
        if (c == ' ') {
            space = out.len > 0;
            continue;
        }
        if (space) sb_putc(&out, ' ');
        space = false;
        sb_putc(&out, c);
    }
    sb_free(&raw);
    if (out.len > cap) {
        size_t cut = cap;
        while (cut > 0 && ((unsigned char)out.s[cut] & 0xc0) == 0x80) cut--;
        out.s[cut] = 0;
        out.len = cut;
        sb_puts(&out, "…");
    }
    return sb_take(&out);
}

/* ---- rendered page ------------------------------------------------------------- */

typedef struct {
    size_t start, end; /* of "[n]" in text */
    int n;
} link_ref;

struct readable_doc {
    char *title, *url, *type;
    int status;
    bool truncated;
    strbuf text;
    char **links;
    size_t nlinks;
    link_ref *refs;
    size_t nrefs, caprefs;
    size_t cursor;
    size_t prev_start, prev_end; /* the previous block, to drop repeats */
    unsigned *listed;            /* per link: the footer round that listed it */
    unsigned round;
};

/* JSON strings may hold NUL characters; lengths come from json-c, never
 * from strlen, so a NUL cannot cut off what follows it. */
static const char *json_get_str(json_object *o, const char *key, size_t *len)
{
    json_object *v;
    if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)) {
        *len = (size_t)json_object_get_string_len(v);
        return json_object_get_string(v);
    }
    *len = 0;
    return "";
}

static void add_ref(readable_doc *d, size_t start, size_t end, int n)
{
    if (d->nrefs == d->caprefs) {
        d->caprefs = d->caprefs ? d->caprefs * 2 : 64;
        d->refs = xrealloc(d->refs, d->caprefs * sizeof *d->refs);
    }
    d->refs[d->nrefs++] = (link_ref){ start, end, n };
}

/* Appends cleaned inline text, collapsing spaces; a newline becomes a
 * continuation line with prefix cont, written only once text follows. */
typedef struct {
    readable_doc *d;
    const char *cont;
    bool space, newline, any;
} para;

static void para_text(para *pa, const char *s, size_t len)
{
    strbuf raw = {0};
    readable_clean(&raw, s, len, true);
    strbuf *t = &pa->d->text;
    for (size_t i = 0; i < raw.len; i++) {
        char c = raw.s[i];
        if (c == ' ' || c == '\t') {
            pa->space = pa->any && !pa->newline;
        } else if (c == '\n') {
            pa->newline = pa->any;
            pa->space = false;
        } else {
            if (pa->newline) {
                sb_putc(t, '\n');
                sb_puts(t, pa->cont);
            } else if (pa->space) {
                sb_putc(t, ' ');
            }
            pa->space = pa->newline = false;
            pa->any = true;
            sb_putc(t, c);
        }
    }
    sb_free(&raw);
}

/* " [n]" after the link's text, on the line that text ended. */
static void para_link(para *pa, int n)
{
    if (!pa->any) return;
    strbuf *t = &pa->d->text;
    sb_putc(t, ' ');
    size_t start = t->len;
    sb_printf(t, "[%d]", n);
    add_ref(pa->d, start, t->len, n);
    pa->space = false;
}

static void render_pre(readable_doc *d, json_object *segs)
{
    strbuf body = {0};
    size_t n = json_object_array_length(segs);
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(segs, i);
        if (json_object_is_type(s, json_type_string))
            readable_clean(&body, json_object_get_string(s), (size_t)json_object_get_string_len(s), true);
    }
    size_t a = 0, b = body.len;
    while (a < b && body.s[a] == '\n') a++;
    while (b > a && (body.s[b - 1] == '\n' || body.s[b - 1] == ' ' || body.s[b - 1] == '\t')) b--;
    if (a < b) {
        int run = 0, longest = 0;
        for (size_t i = a; i < b; i++) {
            run = body.s[i] == '`' ? run + 1 : 0;
            if (run > longest) longest = run;
        }
        int fence = longest >= 3 ? longest + 1 : 3;
        for (int i = 0; i < fence; i++) sb_putc(&d->text, '`');
        sb_putc(&d->text, '\n');
        sb_append(&d->text, body.s + a, b - a);
        sb_putc(&d->text, '\n');
        for (int i = 0; i < fence; i++) sb_putc(&d->text, '`');
    }
    sb_free(&body);
}

static void render_block(readable_doc *d, json_object *blk)
{
    if (!json_object_is_type(blk, json_type_array) || json_object_array_length(blk) < 3) return;
    const char *kind = json_object_get_string(json_object_array_get_idx(blk, 0));
    int level = json_object_get_int(json_object_array_get_idx(blk, 1));
    json_object *segs = json_object_array_get_idx(blk, 2);
    int num = json_object_array_length(blk) > 3 ? json_object_get_int(json_object_array_get_idx(blk, 3)) : 0;
    if (!kind || !json_object_is_type(segs, json_type_array)) return;
    if (level < 0) level = 0;
    if (level > 8) level = 8;

    strbuf *t = &d->text;
    size_t rollback = t->len, refs_before = d->nrefs;
    if (t->len) {
        sb_putc(t, '\n');
        if (!strcmp(kind, "h")) sb_putc(t, '\n');
    }
    size_t start = t->len;
    char cont[40] = "";
    int indent = level > 0 ? 2 * (level - 1) : 0;
    if (!strcmp(kind, "pre")) {
        render_pre(d, segs);
    } else {
        if (!strcmp(kind, "h")) {
            for (int i = 0; i < (level >= 1 && level <= 6 ? level : 2); i++) sb_putc(t, '#');
            sb_putc(t, ' ');
        } else if (!strcmp(kind, "li")) {
            sb_printf(t, "%*s- ", indent, "");
            snprintf(cont, sizeof cont, "%*s", indent + 2, "");
        } else if (!strcmp(kind, "ol")) {
            sb_printf(t, "%*s%d. ", indent, "", num);
            snprintf(cont, sizeof cont, "%*s", indent + 3, "");
        } else if (!strcmp(kind, "lc")) {
            sb_printf(t, "%*s", indent + 2, "");
            snprintf(cont, sizeof cont, "%*s", indent + 2, "");
        } else if (!strcmp(kind, "q")) {
            sb_puts(t, "> ");
            snprintf(cont, sizeof cont, "> ");
        } else if (!strcmp(kind, "tr")) {
            sb_puts(t, "| ");
        }
        para pa = { d, cont, false, false, false };
        size_t n = json_object_array_length(segs);
        for (size_t i = 0; i < n; i++) {
            json_object *s = json_object_array_get_idx(segs, i);
            if (json_object_is_type(s, json_type_string)) {
                para_text(&pa, json_object_get_string(s), (size_t)json_object_get_string_len(s));
            } else if (json_object_is_type(s, json_type_int)) {
                int link = json_object_get_int(s);
                if (link >= 1 && (size_t)link <= d->nlinks) para_link(&pa, link);
            }
        }
        if (!pa.any) {
            t->len = start; /* nothing visible: drop the prefix too */
            if (t->s) t->s[t->len] = 0;
        } else if (!strcmp(kind, "tr")) {
            sb_puts(t, " |");
        }
    }
    size_t len = t->len - start;
    bool empty = len == 0;
    bool repeat = !empty && len == d->prev_end - d->prev_start &&
                  !memcmp(t->s + start, t->s + d->prev_start, len);
    if (empty || repeat) {
        t->len = rollback;
        if (t->s) t->s[t->len] = 0;
        d->nrefs = refs_before;
        return;
    }
    d->prev_start = start;
    d->prev_end = t->len;
}

readable_doc *readable_doc_new(json_object *value, ds4_error *err)
{
    json_object *blocks, *links;
    if (!value || !json_object_is_type(value, json_type_object) ||
        !json_object_object_get_ex(value, "blocks", &blocks) ||
        !json_object_is_type(blocks, json_type_array) ||
        !json_object_object_get_ex(value, "links", &links) ||
        !json_object_is_type(links, json_type_array)) {
        ds4_error_set(err, "the page extractor returned something unexpected");
        return NULL;
    }
    readable_doc *d = xcalloc(1, sizeof *d);
    size_t tl, ul, yl;
    const char *title = json_get_str(value, "title", &tl), *url = json_get_str(value, "url", &ul);
    const char *type = json_get_str(value, "type", &yl);
    d->title = clean_line(title, tl, 300);
    d->url = clean_line(url, ul, 4000);
    d->type = clean_line(type, yl, 100);
    json_object *v;
    if (json_object_object_get_ex(value, "status", &v)) d->status = json_object_get_int(v);
    if (json_object_object_get_ex(value, "truncated", &v)) d->truncated = json_object_get_boolean(v);

    d->nlinks = json_object_array_length(links);
    d->links = xcalloc(d->nlinks + 1, sizeof *d->links);
    d->listed = xcalloc(d->nlinks + 1, sizeof *d->listed);
    for (size_t i = 0; i < d->nlinks; i++) {
        json_object *l = json_object_array_get_idx(links, i);
        bool is_str = json_object_is_type(l, json_type_string);
        d->links[i] = clean_line(is_str ? json_object_get_string(l) : "",
                                 is_str ? (size_t)json_object_get_string_len(l) : 0, 100000);
    }
    size_t n = json_object_array_length(blocks);
    for (size_t i = 0; i < n; i++) render_block(d, json_object_array_get_idx(blocks, i));
    if (d->text.len) sb_putc(&d->text, '\n');
    return d;
}

void readable_doc_free(readable_doc *d)
{
    if (!d) return;
    free(d->title);
    free(d->url);
    free(d->type);
    for (size_t i = 0; i < d->nlinks; i++) free(d->links[i]);
    free(d->links);
    free(d->refs);
    free(d->listed);
    sb_free(&d->text);
    free(d);
}

const char *readable_doc_title(const readable_doc *d) { return d->title; }
const char *readable_doc_url(const readable_doc *d) { return d->url; }
const char *readable_doc_type(const readable_doc *d) { return d->type; }
int readable_doc_status(const readable_doc *d) { return d->status; }
bool readable_doc_truncated(const readable_doc *d) { return d->truncated; }
size_t readable_doc_size(const readable_doc *d) { return d->text.len; }
size_t readable_doc_offset(const readable_doc *d) { return d->cursor; }
size_t readable_doc_link_count(const readable_doc *d) { return d->nlinks; }
const char *readable_doc_text(const readable_doc *d) { return sb_str(&d->text); }

/* Longest URL listed verbatim; a longer one is useless to retype anyway. */
#define MAX_LISTED_URL 2000

static size_t link_line_len(const readable_doc *d, int n, size_t max_url)
{
    size_t ulen = strlen(d->links[n - 1]);
    char num[24];
    int k = snprintf(num, sizeof num, "[%d] ", n);
    return (size_t)k + (ulen > max_url ? 40 : ulen) + 1;
}

/* Index of the first ref starting at or after pos (refs are in text order). */
static size_t first_ref_at(const readable_doc *d, size_t pos)
{
    size_t lo = 0, hi = d->nrefs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->refs[mid].start < pos) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The "Links:" block for the refs within [a, b), into out when not NULL;
 * returns its length. Each number is listed once, in order of appearance. */
static size_t links_footer(readable_doc *d, size_t a, size_t b, size_t max_url, strbuf *out)
{
    size_t total = 0;
    bool any = false;
    if (++d->round == 0) {
        memset(d->listed, 0, (d->nlinks + 1) * sizeof *d->listed);
        d->round = 1;
    }
    for (size_t i = first_ref_at(d, a); i < d->nrefs && d->refs[i].start < b; i++) {
        const link_ref *r = &d->refs[i];
        if (r->end > b || d->listed[r->n] == d->round) continue;
        d->listed[r->n] = d->round;
        if (!any) {
            total += 7; /* "Links:\n" */
            if (out) sb_puts(out, "Links:\n");
            any = true;
        }
        total += link_line_len(d, r->n, max_url);
        if (out) {
            const char *u = d->links[r->n - 1];
            if (strlen(u) > max_url)
                sb_printf(out, "[%d] (URL of %zu bytes left out)\n", r->n, strlen(u));
            else
                sb_printf(out, "[%d] %s\n", r->n, u);
        }
    }
    return total;
}

/* A cut point at or before limit: after a newline if one is in the later
 * half, else at a space, else at a UTF-8 boundary; never inside a "[n]". */
static size_t cut_point(const readable_doc *d, size_t a, size_t limit)
{
    const char *s = d->text.s;
    if (limit >= d->text.len) return d->text.len;
    size_t b = limit;
    size_t floor = a + (limit - a) / 2;
    while (b > floor && s[b - 1] != '\n') b--;
    if (b <= floor) {
        b = limit;
        while (b > floor && s[b - 1] != ' ') b--;
        if (b <= floor) {
            b = limit;
            while (b > a + 1 && ((unsigned char)s[b] & 0xc0) == 0x80) b--;
        }
    }
    size_t i = first_ref_at(d, b);
    if (i > 0 && d->refs[i - 1].end > b && d->refs[i - 1].start > a) b = d->refs[i - 1].start;
    if (b <= a) {
        /* a single character at least, so every call makes progress */
        b = a + 1;
        while (b < d->text.len && ((unsigned char)s[b] & 0xc0) == 0x80) b++;
    }
    return b;
}

size_t readable_doc_next(readable_doc *d, size_t max_bytes, strbuf *out)
{
    size_t a = d->cursor;
    if (a >= d->text.len) return 0;
    /* a URL may take a quarter of the part at most */
    size_t max_url = max_bytes / 4 < MAX_LISTED_URL ? max_bytes / 4 : MAX_LISTED_URL;
    /* The part grows with its cut and so does its links list: find the
     * furthest cut whose text and list fit, by bisection. */
    size_t lo = a + 1, hi = a + max_bytes, best = 0;
    while (lo <= hi) {
        size_t mid = lo + (hi - lo) / 2;
        size_t b = cut_point(d, a, mid);
        if (b - a + links_footer(d, a, b, max_url, NULL) <= max_bytes) {
            best = b;
            if (b >= d->text.len) break;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    size_t b = best ? best : cut_point(d, a, a + 1);
    sb_append(out, d->text.s + a, b - a);
    if (out->len && out->s[out->len - 1] != '\n') sb_putc(out, '\n');
    links_footer(d, a, b, max_url, out);
    d->cursor = b;
    return b - a;
}

/* ---- search results -------------------------------------------------------------- */

void readable_search_format(json_object *value, size_t max_bytes, strbuf *out, int *count,
                            int *found, strbuf *page_text)
{
    *count = 0;
    *found = 0;
    json_object *results;
    if (page_text && value && json_object_is_type(value, json_type_object)) {
        size_t tl, xl;
        const char *title = json_get_str(value, "title", &tl), *text = json_get_str(value, "text", &xl);
        char *t = clean_line(title, tl, 200), *x = clean_line(text, xl, 600);
        sb_printf(page_text, "%s%s%s", t, *t && *x ? " — " : "", x);
        free(t);
        free(x);
    }
    if (!value || !json_object_is_type(value, json_type_object) ||
        !json_object_object_get_ex(value, "results", &results) ||
        !json_object_is_type(results, json_type_array))
        return;
    size_t n = json_object_array_length(results);
    *found = (int)n;
    strbuf item = {0};
    for (size_t i = 0; i < n; i++) {
        json_object *r = json_object_array_get_idx(results, i);
        if (!json_object_is_type(r, json_type_array) || json_object_array_length(r) < 3) continue;
        const char *f[3];
        size_t fl[3];
        for (int k = 0; k < 3; k++) {
            json_object *s = json_object_array_get_idx(r, (size_t)k);
            bool is_str = json_object_is_type(s, json_type_string);
            f[k] = is_str ? json_object_get_string(s) : "";
            fl[k] = is_str ? (size_t)json_object_get_string_len(s) : 0;
        }
        char *title = clean_line(f[0], fl[0], 300);
        char *url = clean_line(f[1], fl[1], MAX_LISTED_URL);
        char *snippet = clean_line(f[2], fl[2], 500);
        sb_clear(&item);
        sb_printf(&item, "%d. %s\n   %s\n", *count + 1, title, url);
        if (*snippet) sb_printf(&item, "   %s\n", snippet);
        free(title);
        free(url);
        free(snippet);
        if (out->len + item.len > max_bytes) break;
        sb_append(out, item.s, item.len);
        (*count)++;
    }
    sb_free(&item);
}
