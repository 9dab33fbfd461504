/* tok_corpus.c — seeded corpus generators for the differential test. */
#include "tests/tok_corpus.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "tests/test.h"
#include "tests/tok_util.h"

typedef struct {
    tok_corpus *c;
    size_t cap;
    uint64_t rng;
} gen;

static uint64_t rnd(gen *g, uint64_t n) { return n ? tok_rand(&g->rng) % n : 0; }

static void put_cp(strbuf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    sb_append(b, u, n);
}

static void add_text(gen *g, const char *kind, const char *s, size_t len)
{
    tok_corpus *c = g->c;
    if (c->count == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 256;
        char **t = test_alloc(cap * sizeof *t);
        size_t *l = test_alloc(cap * sizeof *l);
        const char **k = test_alloc(cap * sizeof *k);
        if (c->count) {
            memcpy(t, c->texts, c->count * sizeof *t);
            memcpy(l, c->lens, c->count * sizeof *l);
            memcpy(k, c->kinds, c->count * sizeof *k);
        }
        c->texts = t;
        c->lens = l;
        c->kinds = k;
        g->cap = cap;
    }
    char *copy = test_alloc(len);
    memcpy(copy, s, len);
    c->texts[c->count] = copy;
    c->lens[c->count] = len;
    c->kinds[c->count] = kind;
    c->count++;
    c->bytes += len;
}

static void add_sb(gen *g, const char *kind, strbuf *b)
{
    if (b->len) add_text(g, kind, b->s, b->len);
    sb_clear(b);
}

static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char b = s[i];
        size_t len = b < 0x80 ? 1 : b < 0xC2 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF5 ? 4 : 0;
        if (!len || i + len > n) return false;
        uint32_t v = len == 1 ? b : (uint32_t)(b & (0x7F >> len));
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            v = (v << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
            return false;
        i += len;
    }
    return true;
}

/* ---- the repository's own text files ------------------------------------ */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void walk_sources(gen *g, const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[4096];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "build") || !strcmp(e->d_name, "node_modules")) continue;
        names[n++] = test_strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        char *path = test_printf("%s/%s", dir, names[i]);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth < 4) walk_sources(g, path, depth + 1);
            continue;
        }
        if (!S_ISREG(st.st_mode) || st.st_size == 0 || st.st_size > (1 << 20)) continue;
        const char *ext = strrchr(names[i], '.');
        static const char *const exts[] = { ".c", ".h", ".md", ".sh", ".js", ".txt", ".cl", ".1", ".supp", NULL };
        bool ok = !strcmp(names[i], "Makefile");
        for (int k = 0; ext && exts[k]; k++) ok |= !strcmp(ext, exts[k]);
        if (!ok) continue;
        size_t len;
        char *text = test_read_file(path, &len);
        if (text && valid_utf8((const unsigned char *)text, len)) add_text(g, "source", text, len);
    }
}

/* ---- prose ---------------------------------------------------------------- */

static const char *const english[] = {
    "The quick brown fox jumps over the lazy dog, doesn't it?",
    "It was the best of times, it was the worst of times; it was the age of wisdom.",
    "In 1969, Apollo 11 landed on the Moon - an achievement watched by roughly 650 million people.",
    "Please don't forget: the meeting's been moved to 3:45 p.m. (room B-12).",
    "\"Well,\" she said, \"I'd rather we didn't.\" He shrugged... and left.",
    "Compilers translate source code into machine code; interpreters execute it directly.",
    "A tokenizer splits text into pieces, and byte-pair encoding merges frequent pairs.",
    "They've lived here since the '90s, when rents were cheaper and the streets quieter.",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=two#frag.",
    "The committee's report - all 312 pages of it - concluded nothing whatsoever!",
    "Mr. O'Neill's well-known self-help book sold 2,500,000 copies worldwide.",
    "Whatever you do, don't press the red button; I'll explain later, I promise.",
    "HTTP/1.1 200 OK was the answer; the server had recovered after the restart.",
    "Naive, cafe, resume and cooperate lost their diacritics long ago in English.",
};

static const char *const italian[] = {
    "Nel mezzo del cammin di nostra vita mi ritrovai per una selva oscura.",
    "Perché non me l'hai detto prima? Sarei venuto subito, lo sai.",
    "L'università di Bologna, fondata nel 1088, è la più antica del mondo occidentale.",
    "Ciò che più conta è la qualità: né troppo, né troppo poco, dicevano.",
    "Rispondi in italiano con una frase: chi era Ada Lovelace?",
    "Dall'alba al tramonto, gli abitanti dell'isola lavoravano nei campi di grano.",
    "È già mezzogiorno e non abbiamo ancora deciso dove andare a pranzo.",
    "Quest'anno l'inverno è stato mite; a febbraio sembrava già primavera.",
    "Un po' di pazienza: il treno per Milano partirà alle 18:25 dal binario 7.",
    "Più tardi, però, si accorsero che la chiave non c'era più.",
    "Gl'italiani amano il caffè: un espresso, un cappuccino, un macchiato.",
    "«Andiamo», disse lui, «prima che faccia buio», e si avviò verso casa.",
};

static const char *const words_en[] = {
    "time", "person", "year", "way", "day", "thing", "man", "world", "life", "hand", "part", "child",
    "eye", "woman", "place", "work", "week", "case", "point", "government", "company", "number", "group",
    "problem", "fact", "be", "have", "do", "say", "get", "make", "go", "know", "take", "see", "come",
    "think", "look", "want", "give", "use", "find", "tell", "ask", "seem", "feel", "try", "leave", "call",
    "good", "new", "first", "last", "long", "great", "little", "own", "other", "old", "right", "big",
    "high", "different", "small", "large", "next", "early", "young", "important", "few", "public",
    "the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
    "with", "his", "they", "I", "at", "be", "this", "from", "or", "one", "had", "by", "word", "but",
    "internationalization", "antidisestablishmentarianism", "incomprehensibilities", "Mississippi",
};

static const char *const words_it[] = {
    "casa", "tempo", "anno", "giorno", "uomo", "donna", "città", "perché", "però", "così", "più",
    "già", "è", "né", "caffè", "università", "libertà", "virtù", "verità", "essere", "avere", "fare",
    "dire", "potere", "volere", "sapere", "stare", "dovere", "vedere", "andare", "venire", "dare",
    "parlare", "trovare", "sentire", "lasciare", "prendere", "guardare", "mettere", "pensare",
    "il", "lo", "la", "gli", "le", "un", "una", "di", "a", "da", "in", "con", "su", "per", "tra", "fra",
    "dell'acqua", "l'amico", "all'improvviso", "nell'anima", "sull'orlo", "quell'uomo", "precipitevolissimevolmente",
};

static void gen_prose(gen *g, size_t target)
{
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    while (g->c->bytes - start < target) {
        bool it = rnd(g, 2);
        size_t paragraphs = 1 + rnd(g, 6);
        for (size_t p = 0; p < paragraphs; p++) {
            size_t sentences = 1 + rnd(g, 8);
            for (size_t s = 0; s < sentences; s++) {
                if (rnd(g, 3) == 0) {
                    const char *const *set = it ? italian : english;
                    size_t n = it ? sizeof italian / sizeof *italian : sizeof english / sizeof *english;
                    sb_puts(&b, set[rnd(g, n)]);
                } else {
                    const char *const *set = it ? words_it : words_en;
                    size_t n = it ? sizeof words_it / sizeof *words_it : sizeof words_en / sizeof *words_en;
                    size_t nw = 3 + rnd(g, 18);
                    for (size_t w = 0; w < nw; w++) {
                        const char *word = set[rnd(g, n)];
                        if (w == 0) {
                            char first[64];
                            snprintf(first, sizeof first, "%s", word);
                            if (first[0] >= 'a' && first[0] <= 'z') first[0] = (char)(first[0] - 32);
                            sb_puts(&b, first);
                        } else {
                            sb_puts(&b, word);
                        }
                        static const char *const seps[] = { " ", " ", " ", " ", " ", ", ", "; ", " - ", ": ", " (" };
                        if (w + 1 < nw) sb_puts(&b, seps[rnd(g, sizeof seps / sizeof *seps)]);
                        if (rnd(g, 25) == 0) sb_printf(&b, " %llu ", (unsigned long long)rnd(g, 100000));
                    }
                    static const char *const ends[] = { ".", ".", ".", "!", "?", "...", "?!", "." };
                    sb_puts(&b, ends[rnd(g, sizeof ends / sizeof *ends)]);
                }
                sb_puts(&b, rnd(g, 10) ? " " : "  ");
            }
            static const char *const breaks[] = { "\n\n", "\n", "\r\n\r\n", "\n\n\n", "\n \n" };
            sb_puts(&b, breaks[rnd(g, sizeof breaks / sizeof *breaks)]);
        }
        add_sb(g, "prose", &b);
    }
    sb_free(&b);
}

/* ---- CJK and Japanese ------------------------------------------------------ */

static const char *const cjk_text[] = {
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "北京是中华人民共和国的首都，人口超过两千万。",
    "毕老师说：“学而时习之，不亦说乎？”",
    "日本語の文章は、ひらがな、カタカナ、そして漢字で書かれます。",
    "東京タワーは１９５８年に完成しました。高さは３３３メートルです。",
    "こんにちは！お元気ですか？私はコーヒーが大好きです。",
    "プログラミング言語のＣは、１９７２年にデニス・リッチーによって開発された。",
    "한국어는 한글로 쓰며, 서울은 대한민국의 수도입니다.",
    "龘靐齉爩（罕见字）与𠀀𠀁𪚥等扩展区汉字。",
    "「吾輩は猫である。名前はまだ無い。」と夏目漱石は書いた。",
    "ｶﾀｶﾅの半角とカタカナの全角、ーと〜と・の記号。",
};

static void gen_cjk(gen *g, size_t target)
{
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    static const char *const punct[] = { "，", "。", "、", "！", "？", "：", "；", "「", "」", "（", "）", "《", "》", "…", "・", " ", "\n", "ー" };
    while (g->c->bytes - start < target) {
        size_t n = 1 + rnd(g, 12);
        for (size_t i = 0; i < n; i++) {
            switch (rnd(g, 6)) {
            case 0: case 1: sb_puts(&b, cjk_text[rnd(g, sizeof cjk_text / sizeof *cjk_text)]); break;
            case 2: /* random ideographs */
                for (size_t k = 1 + rnd(g, 20); k; k--) put_cp(&b, 0x4E00 + (uint32_t)rnd(g, 0x9FFF - 0x4E00));
                break;
            case 3: /* kana */
                for (size_t k = 1 + rnd(g, 20); k; k--) put_cp(&b, 0x3041 + (uint32_t)rnd(g, 0x30FF - 0x3041));
                break;
            case 4: sb_puts(&b, punct[rnd(g, sizeof punct / sizeof *punct)]); break;
            default: { /* mixed with Latin and digits */
                static const char *const mix[] = { "Hello", " world", "ABC", "123", " 2024年", "GPU", "x86", " OK" };
                sb_puts(&b, mix[rnd(g, sizeof mix / sizeof *mix)]);
            }
            }
        }
        add_sb(g, "cjk", &b);
    }
    sb_free(&b);
}

/* ---- emoji ------------------------------------------------------------------ */

static void gen_emoji(gen *g, size_t target)
{
    static const char *const seqs[] = {
        "👨\u200d👩\u200d👧\u200d👦", "👩🏽\u200d💻", "🏳️\u200d🌈", "🏴\u200d☠️", "👍🏻", "👍🏿", "🤝🏾",
        "🇮🇹", "🇯🇵", "🇺🇸🇬🇧", "1️⃣", "#️⃣", "❤️", "☺️", "✌🏼", "🧑\u200d🤝\u200d🧑", "😀", "😂🤣",
        "🙈🙉🙊", "🚀", "🌍", "🍕", "🎉", "💯", "🔥", "✨", "👀", "🥲", "🫠", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    };
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    while (g->c->bytes - start < target) {
        for (size_t n = 1 + rnd(g, 30); n; n--) {
            switch (rnd(g, 5)) {
            case 0: sb_puts(&b, " "); break;
            case 1: sb_puts(&b, rnd(g, 2) ? "wow" : " nice"); break;
            default: sb_puts(&b, seqs[rnd(g, sizeof seqs / sizeof *seqs)]);
            }
            if (rnd(g, 8) == 0) put_cp(&b, 0x1F300 + (uint32_t)rnd(g, 0x1FAFF - 0x1F300));
            if (rnd(g, 10) == 0) put_cp(&b, 0x1F1E6 + (uint32_t)rnd(g, 26));
            if (rnd(g, 10) == 0) put_cp(&b, 0x1F3FB + (uint32_t)rnd(g, 5));
        }
        add_sb(g, "emoji", &b);
    }
    sb_free(&b);
}

/* ---- digits, punctuation, whitespace, controls ---------------------------- */

static const uint32_t digit_starts[] = { '0', 0x0660, 0x06F0, 0x0966, 0x09E6, 0x0E50, 0xFF10, 0x1D7CE, 0x104A0 };

static void gen_digits(gen *g, size_t target)
{
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    static const uint32_t other_n[] = { 0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0x2160, 0x216B, 0x2460, 0x3007, 0x2070, 0x2155 };
    while (g->c->bytes - start < target) {
        for (size_t n = 1 + rnd(g, 20); n; n--) {
            size_t len = 1 + rnd(g, rnd(g, 4) ? 8 : 40);
            uint32_t base = rnd(g, 3) ? '0' : digit_starts[rnd(g, sizeof digit_starts / sizeof *digit_starts)];
            for (size_t k = 0; k < len; k++) {
                if (rnd(g, 15) == 0) put_cp(&b, other_n[rnd(g, sizeof other_n / sizeof *other_n)]);
                else put_cp(&b, base + (uint32_t)rnd(g, 10));
            }
            static const char *const seps[] = { " ", ",", ".", "-", " + ", "\n", "x", "e", "%", "", " $", "€" };
            sb_puts(&b, seps[rnd(g, sizeof seps / sizeof *seps)]);
        }
        add_sb(g, "digits", &b);
    }
    sb_free(&b);
}

static void gen_punct(gen *g, size_t target)
{
    static const char *const marks[] = {
        "!", "\"", "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-", ".", "/", ":", ";", "<", "=", ">",
        "?", "@", "[", "\\", "]", "^", "_", "`", "{", "|", "}", "~", "“", "”", "‘", "’", "«", "»", "—", "–",
        "…", "・", "、", "。", "，", "！", "？", "【", "】", "《", "》", "€", "£", "¥", "©", "®", "™", "±", "×",
        "÷", "→", "⇒", "∀", "∑", "≠", "≤", "≥", "♥", "★", "§", "¶", "†", "‡", "•", "‰", "′", "″", "¿", "¡",
        "\n", "\r\n", " ", "a", "Z", "s", "\t",
    };
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    while (g->c->bytes - start < target) {
        for (size_t n = 1 + rnd(g, 200); n; n--) sb_puts(&b, marks[rnd(g, sizeof marks / sizeof *marks)]);
        add_sb(g, "punct", &b);
    }
    sb_free(&b);
}

static const uint32_t spaces[] = {
    ' ', ' ', ' ', '\t', '\n', '\r', 0x0B, 0x0C, 0xA0, 0x1680, 0x2000, 0x2003, 0x2009, 0x200A, 0x2028,
    0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF, 0x85, 0x180E, 0x200B, 0x1C, 0x1D, 0x1E, 0x1F,
};

static void gen_whitespace(gen *g, size_t target)
{
    static const char *const words[] = { "x", "int", "foo", "->", "{", "}", ";", "(", "if", "élan", "数", "7", "\u0301", "ä" };
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    while (g->c->bytes - start < target) {
        for (size_t n = 1 + rnd(g, 60); n; n--) {
            for (size_t k = rnd(g, 6); k; k--) put_cp(&b, spaces[rnd(g, sizeof spaces / sizeof *spaces)]);
            if (rnd(g, 4) == 0) sb_puts(&b, "\r\n");
            sb_puts(&b, words[rnd(g, sizeof words / sizeof *words)]);
        }
        add_sb(g, "whitespace", &b);
    }
    sb_free(&b);
}

static void gen_controls(gen *g, size_t target)
{
    static const char *const words[] = { "abc", " def", "1", "!", " ", "  ", "\n", "é", "中", "::" };
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    while (g->c->bytes - start < target) {
        for (size_t n = 1 + rnd(g, 60); n; n--) {
            uint32_t cp;
            switch (rnd(g, 4)) {
            case 0: cp = (uint32_t)rnd(g, 0x20); break;
            case 1: cp = 0x7F + (uint32_t)rnd(g, 0x21); break;
            case 2: cp = 0x200B + (uint32_t)rnd(g, 5); break; /* ZW space/joiners, marks */
            default: cp = 0xE000 + (uint32_t)rnd(g, 0x1900); /* private use */
            }
            put_cp(&b, cp);
            if (rnd(g, 2)) sb_puts(&b, words[rnd(g, sizeof words / sizeof *words)]);
        }
        add_sb(g, "controls", &b);
    }
    sb_free(&b);
}

/* ---- random code points over all planes ---------------------------------- */

static uint32_t random_cp(gen *g)
{
    for (;;) {
        uint32_t cp;
        switch (rnd(g, 10)) {
        case 0: case 1: case 2: cp = (uint32_t)rnd(g, 0x80); break;
        case 3: cp = 0x80 + (uint32_t)rnd(g, 0x780); break;
        case 4: case 5: case 6: cp = (uint32_t)rnd(g, 0x10000); break;
        case 7: case 8: cp = 0x10000 + (uint32_t)rnd(g, 0x20000); break;
        default: cp = (uint32_t)rnd(g, 0x110000); break;
        }
        if (cp < 0xD800 || cp > 0xDFFF) return cp;
    }
}

static void gen_random(gen *g, size_t target)
{
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    while (g->c->bytes - start < target) {
        for (size_t n = 1 + rnd(g, 2000); n; n--) put_cp(&b, random_cp(g));
        add_sb(g, "random", &b);
    }
    sb_free(&b);
}

/* Small atoms that sit on the pre-tokenizer's rule boundaries, shuffled. */
static void gen_soup(gen *g, size_t target)
{
    static const char *const atoms[] = {
        " ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "a", "Z", "word", " word", "'s", "'", "(", "(buf",
        ".", ".com", "_init", "->", "::", "1", "22", "333", "4444", "中", "文字", "か", "カ", "\u00a0", "\u3000",
        "\u2028", "\ufeff", "\xc2\x85", "\u0301", "e\u0301", "\u200d", "\x01", "\x1c", "\x7f", "😀", "👍🏽", "\ufe0f",
        "é", "ß", "Ω", "ж", "ا", "ע", "ก", "한", "“", "”", "—", "…", "€", "$", "١", "²", "½", "Ⅻ", ">;\n", "x  ->",
        "    int", "a\n\n  b", "<", "</", ">", "\\", "|", "｜", "▁", "<think>", "</think>", "DSML", "&lt;",
        /* edges of the CJK/kana ranges of the second split */
        "\u303f", "\u3040", "\u3097", "\u3099", "\u309b", "\u309f", "\u30a0", "\u30fb", "\u30fc", "\u30ff",
        "\u3100", "\u4dff", "\u4e00", "\u9fa5", "\u9fa6", "\uff65", "\u3005", "\u3007",
    };
    strbuf b = { 0 };
    size_t start = g->c->bytes;
    while (g->c->bytes - start < target) {
        for (size_t n = 1 + rnd(g, 400); n; n--) sb_puts(&b, atoms[rnd(g, sizeof atoms / sizeof *atoms)]);
        add_sb(g, "soup", &b);
    }
    sb_free(&b);
}

/* Long pieces: BPE on thousands of symbols at once. */
static void gen_long(gen *g)
{
    strbuf b = { 0 };
    for (int i = 0; i < 3000; i++) sb_putc(&b, (char)('a' + rnd(g, 26)));
    add_sb(g, "long", &b);
    for (int i = 0; i < 4000; i++) sb_putc(&b, 'a');
    add_sb(g, "long", &b);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 20000; i++) sb_putc(&b, b64[rnd(g, 64)]);
    add_sb(g, "long", &b);
    for (int i = 0; i < 3000; i++) sb_puts(&b, "=");
    add_sb(g, "long", &b);
    for (int i = 0; i < 2000; i++) sb_puts(&b, " ");
    sb_puts(&b, "x");
    add_sb(g, "long", &b);
    for (int i = 0; i < 2000; i++) put_cp(&b, 0x4E00 + (uint32_t)rnd(g, 0x51A5));
    add_sb(g, "long", &b);
    for (int i = 0; i < 1500; i++) put_cp(&b, 0x0400 + (uint32_t)rnd(g, 0x50));
    add_sb(g, "long", &b);
    for (int i = 0; i < 1000; i++) sb_puts(&b, "ab");
    add_sb(g, "long", &b);
    for (int i = 0; i < 600; i++) sb_puts(&b, "\xc3\xa9\xc3\xa8");
    add_sb(g, "long", &b);
    for (int i = 0; i < 2000; i++) sb_puts(&b, rnd(g, 2) ? "\n" : "\r\n");
    add_sb(g, "long", &b);
    sb_free(&b);
}

tok_corpus tok_corpus_build(uint64_t seed, size_t min_bytes)
{
    tok_corpus c = { 0 };
    gen g = { &c, 0, seed };
    walk_sources(&g, test_root(), 0);
    size_t have = c.bytes;
    size_t rest = min_bytes > have ? min_bytes - have : 0;
    if (rest < min_bytes / 2) rest = min_bytes / 2;
    gen_long(&g);
    gen_prose(&g, rest * 22 / 100);
    gen_cjk(&g, rest * 10 / 100);
    gen_emoji(&g, rest * 6 / 100);
    gen_digits(&g, rest * 6 / 100);
    gen_punct(&g, rest * 6 / 100);
    gen_whitespace(&g, rest * 8 / 100);
    gen_controls(&g, rest * 6 / 100);
    gen_random(&g, rest * 16 / 100);
    gen_soup(&g, rest * 14 / 100);
    while (c.bytes < min_bytes) gen_soup(&g, min_bytes - c.bytes);
    return c;
}
