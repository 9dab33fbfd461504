/* options.h — the command line of `ds4cl`, parsed once into one struct.
 *
 * Every flag of every mode is one entry of the parser's table in
 * options.c and one field of the struct below. The help text is written
 * by hand beside the table (its grouping and wording are for people); a
 * test (cli.help_names_every_option) checks that it names every option the
 * parser accepts, through options_long_name. Modes (model info, token
 * dump, device list, download, non-interactive prompt, interactive UI) are
 * separate commands in cli/cmd_*.c that receive the parsed options.
 */
#ifndef DS4CL_OPTIONS_H
#define DS4CL_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/ds4.h"

typedef enum {
    MODE_INTERACTIVE = 0, /* the ncurses agent */
    MODE_PROMPT,          /* -p/--prompt: non-interactive agent run */
    MODE_MODEL_INFO,      /* --model-info */
    MODE_DUMP_TOKENS,     /* --dump-tokens */
    MODE_LIST_DEVICES,    /* --list-devices */
    MODE_DOWNLOAD,        /* `ds4cl download …` */
} ds4cl_mode;

typedef enum { OUTPUT_TEXT = 0, OUTPUT_STREAM_JSON, OUTPUT_JSON } output_format;

#define OPT_MAX_ALLOW 64

typedef struct {
    ds4cl_mode mode;

    /* model and engine */
    const char *model_path;     /* -m; NULL = default model path */
    int ctx;                    /* --ctx N; 0 = default; -1 = auto */
    ds4_backend backend;        /* --backend cpu|opencl, --engine script:FILE */
    const char *script_path;
    const char *device;         /* --device */
    int threads;                /* --threads */
    int host_expert_layers;     /* --cpu-moe / --n-cpu-moe (ds4_engine_options) */
    const char *split;          /* --split (ds4_engine_options) */
    int stream_experts;         /* --stream-experts (ds4_engine_options) */
    const char *expert_cache;   /* --expert-cache SIZE|auto|off; NULL: $DS4CL_EXPERT_CACHE, else auto */
    ds4_quant_sim quant_sim;    /* --quant-sim */

    /* text input */
    const char *prompt;         /* -p/--prompt TEXT ("-" = stdin) */
    const char *prompt_file;    /* --prompt-file F */
    bool raw;                   /* --raw (dump-tokens: no chat rendering) */

    /* generation */
    int max_tokens;             /* -n/--max-tokens; 0 = until the context ends */
    ds4_sampling sampling;      /* --temp --top-k --top-p --min-p --seed */
    bool seed_given;
    ds4_think think;            /* --think (default) / --nothink / --think-max */
    output_format output;       /* --output-format text|stream-json */

    /* agent */
    const char *workspace;      /* -C/--cwd DIR; NULL = current directory */
    const char *system_extra;   /* --system TEXT appended to the system prompt */
    bool yes;                   /* --yes */
    const char *allow[OPT_MAX_ALLOW + 1]; /* --allow TOOL (repeatable, NULL-terminated) */
    int n_allow;
    const char *rules_path;     /* --rules FILE */
    bool no_sandbox;            /* --no-sandbox */
    const char *trace_path;     /* --trace FILE */
    int max_tool_rounds;        /* --max-tool-rounds N; 0 = default */

    /* sessions */
    bool resume;                /* --resume [ID] */
    const char *resume_id;
    bool continue_last;         /* --continue */
    const char *session_id;     /* --session ID */
    bool no_prompt_cache;       /* --no-prompt-cache */

    /* browser */
    const char *cdp_url;        /* --cdp-url URL */
    const char *browser_path;   /* --browser PATH */
    const char *search_url;     /* --search-url TEMPLATE */

    /* download (positional after `download`) */
    const char *download_what;  /* q2|q4|q2-imatrix|q4-imatrix|URL */
    const char *download_dir;   /* --dir D */
    const char *token;          /* --token T (else $HF_TOKEN) */

    bool no_color;              /* --no-color (or NO_COLOR set) */
} ds4cl_options;

/* Parses argv. Returns 0 on success; 1 when --help/--version was printed
 * (exit 0); 2 on a usage error (message already printed to stderr). */
int options_parse(int argc, char **argv, ds4cl_options *o);

void options_print_help(void);

/* The i-th long option the parser accepts ("model", "ctx", …, without the
 * dashes); NULL past the last. */
const char *options_long_name(size_t i);

#endif
