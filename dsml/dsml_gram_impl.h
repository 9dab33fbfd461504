/* dsml_gram_impl.h — the DSML byte automaton shared by the parser (dsml.c) and
 * the structural mask (dsml_mask.c); internal to dsml/.
 *
 * The state is plain data of fixed size so the mask can copy it and try a
 * token's bytes on the copy. The parser runs it lenient (strict = 0) but it
 * keeps the strict bookkeeping (candidate name ranges, used parameters)
 * all the same, so a strict copy can start from any point; when the
 * lenient input leaves the strict language, `dev` is set and the mask
 * stands aside until the next invoke.
 */
#ifndef DS4CL_DSML_GRAM_IMPL_H
#define DS4CL_DSML_GRAM_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dsml/dsml.h"

#define DSML_D "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c" /* ｜DSML｜ */
#define DSML_D_LEN 10
#define DSML_BAR "\xef\xbd\x9c"

/* Parameter types as far as the grammar cares. UNKNOWN: no type in the
 * schema; MIXED: string or something else (sent as a string); JSON:
 * arrays, objects and other non-string unions (value not checked). */
typedef enum { PT_UNKNOWN = 0, PT_STRING, PT_MIXED, PT_JSON, PT_INT, PT_NUM, PT_BOOL } dsml_ptype;
#define PT_IS_STRINGY(t) ((t) == PT_STRING || (t) == PT_MIXED)
#define PT_IS_JSON(t) ((t) >= PT_JSON)

typedef struct {
    char *name;
    size_t len;
    uint8_t type;
    bool required;
} dsml_sparam;

typedef struct {
    char *name;
    size_t len;
    dsml_sparam *params; /* sorted by name */
    size_t n_params;
    uint64_t required;   /* bit i: params[i] is required */
} dsml_stool;

struct dsml_schema {
    dsml_stool *tools;   /* sorted by name */
    size_t n_tools;
};

/* Index of the tool / parameter called name, or -1. */
int dsml_schema_tool(const dsml_schema *s, const char *name);
int dsml_schema_param(const dsml_schema *s, int tool, const char *name);

enum {
    G_THINK = 0, G_TEXT, G_CAND_DELIM,
    G_WS, G_LT, G_D, G_TAGNAME, G_TAGEND, G_CLOSE_TAIL,
    G_ATTR_SEP, G_ATTR_KEY, G_ATTR_EQ, G_ATTR_Q, G_ATTR_VAL,
    G_VALUE, G_DONE, G_ERROR,
};

enum { TAG_NONE = 0, TAG_TOOL_CALLS, TAG_INVOKE, TAG_PARAM };
enum { KEY_NONE = 0, KEY_NAME, KEY_STRING, KEY_OTHER };

enum {
    GE_NONE = 0, GE_STRAY, GE_TAG, GE_TEXT, GE_NONAME_INVOKE, GE_NONAME_PARAM,
    GE_ATTR, GE_DUP_ATTR, GE_IN_THINK, GE_EMPTY, GE_INCOMPLETE, GE_TOO_LONG,
};

/* What one byte did. */
typedef enum {
    EV_CONTENT = 0,  /* the byte is reasoning / text / value content (see hold) */
    EV_STRUCT,       /* markup */
    EV_NAME_BEGIN,   /* the opening quote of a name attribute */
    EV_ATTRV,        /* a byte of an attribute value (key in g->key) */
    EV_THINK_END,
    EV_BLOCK,        /* block opened (g->implicit tells how) */
    EV_INVOKE_OPEN,
    EV_PARAM_OPEN,
    EV_PARAM_CLOSE,
    EV_INVOKE_CLOSE,
    EV_DONE,
    EV_ERROR,        /* lenient error: g->err */
    EV_REJECT,       /* strict copy: the byte leaves the strict language */
} gram_ev;

typedef struct {
    uint8_t st;
    uint8_t strict;
    uint8_t dev;       /* the lenient input left the strict language */
    uint8_t level;     /* 0: inside tool_calls, 1: inside invoke */
    uint8_t tag;       /* open tag being read, or close tag name */
    uint8_t close;     /* the tag being read is a close tag */
    uint8_t implicit;  /* block opened by a bare invoke */
    uint8_t lits;      /* text: viable opener candidates */
    uint8_t key;
    uint8_t keylen;
    char keybuf[8];
    uint8_t have;      /* HAVE_* */
    uint8_t svlen;
    char sval[6];
    uint8_t err;
    uint8_t sep;       /* separators in ATTR_SEP; bar done in close tails */
    uint8_t bpos;      /* bytes of a tolerated bar in a close tail */
    uint8_t vk;        /* value checked as a JSON scalar: PT_INT/NUM/BOOL, 0 free */
    uint8_t vs, vn, ve; /* scalar sub-state, length, exponent digits */
    uint16_t pos;      /* literal / candidate position */
    uint16_t hold;     /* trailing content bytes that may still be markup */
    uint16_t ws;
    int16_t tool;      /* strict: tool of the open invoke (-1 unknown) */
    int16_t cur;       /* strict: parameter being opened (-1 unknown) */
    int16_t lo, hi;    /* strict: candidate names [lo, hi) */
    uint16_t nlen;
    uint16_t ncalls;
    uint64_t used;     /* strict: parameters given in the open invoke */
    uint64_t win;      /* reasoning: the last bytes, for marker detection */
} dsml_gram;

#define HAVE_NAME 1
#define HAVE_STRING 2
#define STRING_TRUE 4

void gram_init(dsml_gram *g, bool thinking);
gram_ev gram_step(dsml_gram *g, const dsml_schema *s, unsigned char c);
/* End of stream: EV_DONE (an implicit block closed), EV_ERROR
 * (incomplete), EV_REJECT (strict: EOS not allowed here) or EV_CONTENT
 * (nothing pending). */
gram_ev gram_eos(dsml_gram *g);

bool gram_constrained(const dsml_gram *g);
bool gram_greedy(const dsml_gram *g);
const char *gram_error_text(int err);

/* The parser's automaton (read-only), for the mask. */
const dsml_gram *dsml_parser_gram(const dsml_parser *p);

#endif
