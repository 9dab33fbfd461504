/* cmd_dump_tokens.c — `ds4cl --dump-tokens`: the token ids of a text as a
 * JSON array, from the model's tokenizer alone (the weights stay unread).
 * With --raw the text is tokenized as untrusted plain text; otherwise it is
 * rendered as one non-thinking user turn:
 * BOS <｜User｜> text <｜Assistant｜> </think>. Without -m the default model
 * is used. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/commands.h"
#include "cli/model_path.h"

static char *read_stream(FILE *f, size_t *len)
{
    strbuf b = { 0 };
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sb_append(&b, buf, n);
    if (ferror(f)) {
        sb_free(&b);
        return NULL;
    }
    *len = b.len;
    return sb_take(&b);
}

int cmd_dump_tokens(const ds4cl_options *o)
{
    char path_buf[4096];
    const char *model = model_path_resolve(o->model_path, path_buf, sizeof path_buf);
    if (!model) return EXIT_ERROR; /* the reason is on stderr */
    size_t len = 0;
    char *text;
    if (o->prompt_file) {
        text = file_read_all(o->prompt_file, &len);
        if (!text) {
            fprintf(stderr, "ds4cl: cannot read %s: %s\n", o->prompt_file, strerror(errno));
            return EXIT_ERROR;
        }
    } else if (o->prompt && !strcmp(o->prompt, "-")) {
        text = read_stream(stdin, &len);
        if (!text) {
            fprintf(stderr, "ds4cl: cannot read the standard input: %s\n", strerror(errno));
            return EXIT_ERROR;
        }
    } else {
        text = strdup(o->prompt ? o->prompt : "");
        len = strlen(text);
    }

    ds4_error err = { { 0 } };
    ds4_tokenizer *t = ds4_tokenizer_open(model, &err);
    if (!t) {
        fprintf(stderr, "ds4cl: %s\n", err.msg);
        free(text);
        return EXIT_ERROR;
    }
    ds4_tokens ids = { 0 };
    if (o->raw) {
        ds4_tokenize(t, text, len, &ids);
    } else {
        /* The chat helpers take C strings; a NUL inside the text would cut
         * it short, so the user text is tokenized with its length. */
        ds4_chat_begin(t, &ids, DS4_THINK_NONE);
        ds4_tokens_push(&ids, ds4_token_special(t, DS4_TOK_USER));
        ds4_tokenize(t, text, len, &ids);
        ds4_chat_assistant_prefix(t, &ids, DS4_THINK_NONE);
    }
    strbuf out = { 0 };
    sb_putc(&out, '[');
    for (size_t i = 0; i < ids.n; i++) sb_printf(&out, i ? ", %d" : "%d", ids.ids[i]);
    sb_puts(&out, "]\n");
    bool ok = fwrite(out.s, 1, out.len, stdout) == out.len && fflush(stdout) == 0;
    sb_free(&out);
    ds4_tokens_free(&ids);
    ds4_tokenizer_free(t);
    free(text);
    if (!ok) {
        fprintf(stderr, "ds4cl: cannot write the token ids: %s\n", strerror(errno));
        return EXIT_ERROR;
    }
    return EXIT_DONE;
}
