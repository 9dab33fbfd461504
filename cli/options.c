/* options.c — ds4cl's flag table, parser and help text. */
#include "cli/options.h"

#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "tools/tools.h"

enum {
    OPT_HELP = 1000, OPT_VERSION, OPT_CTX, OPT_MODEL_INFO, OPT_DUMP_TOKENS, OPT_RAW,
    OPT_PROMPT_FILE, OPT_LIST_DEVICES, OPT_DEVICE, OPT_BACKEND, OPT_THREADS,
    OPT_ENGINE, OPT_QUANT_SIM, OPT_OUTPUT_FORMAT, OPT_TEMP, OPT_TOP_P, OPT_TOP_K,
    OPT_MIN_P, OPT_SEED, OPT_THINK, OPT_NOTHINK, OPT_THINK_MAX, OPT_YES, OPT_ALLOW,
    OPT_RULES, OPT_NO_SANDBOX, OPT_NO_PROMPT_CACHE, OPT_TRACE, OPT_RESUME, OPT_CONTINUE, OPT_SESSION,
    OPT_CDP_URL, OPT_BROWSER, OPT_SEARCH_URL, OPT_SYSTEM, OPT_DIR, OPT_TOKEN,
    OPT_NO_COLOR, OPT_MAX_TOOL_ROUNDS, OPT_CPU_MOE, OPT_N_CPU_MOE, OPT_SPLIT, OPT_STREAM_EXPERTS,
    OPT_EXPERT_CACHE,
};

static const struct option long_opts[] = {
    { "help", no_argument, 0, OPT_HELP },
    { "version", no_argument, 0, OPT_VERSION },
    { "model", required_argument, 0, 'm' },
    { "ctx", required_argument, 0, OPT_CTX },
    { "model-info", no_argument, 0, OPT_MODEL_INFO },
    { "dump-tokens", no_argument, 0, OPT_DUMP_TOKENS },
    { "raw", no_argument, 0, OPT_RAW },
    { "prompt", required_argument, 0, 'p' },
    { "prompt-file", required_argument, 0, OPT_PROMPT_FILE },
    { "list-devices", no_argument, 0, OPT_LIST_DEVICES },
    { "device", required_argument, 0, OPT_DEVICE },
    { "backend", required_argument, 0, OPT_BACKEND },
    { "threads", required_argument, 0, OPT_THREADS },
    { "cpu-moe", no_argument, 0, OPT_CPU_MOE },
    { "split", required_argument, 0, OPT_SPLIT },
    { "stream-experts", required_argument, 0, OPT_STREAM_EXPERTS },
    { "expert-cache", required_argument, 0, OPT_EXPERT_CACHE },
    { "n-cpu-moe", required_argument, 0, OPT_N_CPU_MOE },
    { "engine", required_argument, 0, OPT_ENGINE },
    { "quant-sim", required_argument, 0, OPT_QUANT_SIM },
    { "output-format", required_argument, 0, OPT_OUTPUT_FORMAT },
    { "max-tokens", required_argument, 0, 'n' },
    { "temp", required_argument, 0, OPT_TEMP },
    { "top-p", required_argument, 0, OPT_TOP_P },
    { "top-k", required_argument, 0, OPT_TOP_K },
    { "min-p", required_argument, 0, OPT_MIN_P },
    { "seed", required_argument, 0, OPT_SEED },
    { "think", no_argument, 0, OPT_THINK },
    { "nothink", no_argument, 0, OPT_NOTHINK },
    { "think-max", no_argument, 0, OPT_THINK_MAX },
    { "cwd", required_argument, 0, 'C' },
    { "system", required_argument, 0, OPT_SYSTEM },
    { "yes", no_argument, 0, OPT_YES },
    { "allow", required_argument, 0, OPT_ALLOW },
    { "rules", required_argument, 0, OPT_RULES },
    { "no-sandbox", no_argument, 0, OPT_NO_SANDBOX },
    { "trace", required_argument, 0, OPT_TRACE },
    { "max-tool-rounds", required_argument, 0, OPT_MAX_TOOL_ROUNDS },
    { "resume", no_argument, 0, OPT_RESUME },
    { "continue", no_argument, 0, OPT_CONTINUE },
    { "session", required_argument, 0, OPT_SESSION },
    { "no-prompt-cache", no_argument, 0, OPT_NO_PROMPT_CACHE },
    { "cdp-url", required_argument, 0, OPT_CDP_URL },
    { "browser", required_argument, 0, OPT_BROWSER },
    { "search-url", required_argument, 0, OPT_SEARCH_URL },
    { "dir", required_argument, 0, OPT_DIR },
    { "token", required_argument, 0, OPT_TOKEN },
    { "no-color", no_argument, 0, OPT_NO_COLOR },
    { 0, 0, 0, 0 },
};

const char *options_long_name(size_t i)
{
    return i < sizeof long_opts / sizeof long_opts[0] ? long_opts[i].name : NULL;
}

void options_print_help(void)
{
    fputs(
"ds4cl " DS4CL_VERSION " — a local coding agent with its own DeepSeek V4 Flash engine\n"
"\n"
"usage: ds4cl [options]                 interactive agent in this directory\n"
"       ds4cl -p TEXT [options]         run one task non-interactively\n"
"       ds4cl --model-info [-m FILE]    describe a DS4 GGUF (default: the downloaded model)\n"
"       ds4cl --dump-tokens -m FILE (-p TEXT | --prompt-file F) [--raw]\n"
"       ds4cl --list-devices            list OpenCL devices\n"
"       ds4cl download [q2|q4|q2-imatrix|q4-imatrix|URL] [--dir D] [--token T]\n"
"       ds4cl serve [--host H] [--port N] [--api-key K] [options]  HTTP APIs (serve --help)\n"
"\n"
"model and engine:\n"
"  -m, --model FILE        DS4 GGUF (default: the downloaded model)\n"
"      --ctx N|auto        context size in tokens (auto: largest that fits); the agent\n"
"                          needs its system prompt and a turn, a few thousand tokens\n"
"      --backend cpu|opencl  compute backend (default: cpu)\n"
"      --device D[,D…]     OpenCL device index or name (or $DS4CL_DEVICE); several split\n"
"                          the layers between them\n"
"      --split A,B…        the share of the layers each device takes (default: by memory)\n"
"      --threads N         CPU threads (default: all cores)\n"
"      --cpu-moe           OpenCL: every layer's routed experts in host memory, on the CPU\n"
"      --n-cpu-moe N       OpenCL: the first N layers' routed experts on the CPU (0: none;\n"
"                          default: as many as the device cannot hold)\n"
"      --stream-experts N  OpenCL: prefill chunks of N tokens or more compute those experts\n"
"                          on the device, copying each layer's there (default 0: never)\n"
"      --expert-cache SIZE|auto|off  CPU: read the routed experts from the file through\n"
"                          a cache of SIZE (e.g. 12G) in memory; auto (default, or\n"
"                          $DS4CL_EXPERT_CACHE): only when the file does not fit\n"
"      --engine script:FILE  scripted test engine (JSON Lines replies)\n"
"      --quant-sim full|f16kv|none  rounding simulations (diagnostics; f16kv and none\n"
"                          multiply the routed experts exactly, full uses 8-bit\n"
"                          activations unless DS4CL_EXPERTS=f32)\n"
"\n"
"generation:\n"
"  -p, --prompt TEXT       the task (\"-\" reads it from stdin)\n"
"      --prompt-file F     the task from a file\n"
"  -n, --max-tokens N      limit per assistant reply\n"
"      --temp T  --top-k K  --top-p P  --min-p P  --seed S\n"
"      --think | --nothink | --think-max\n"
"      --output-format text|json|stream-json\n"
"\n"
"agent:\n"
"  -C, --cwd DIR           workspace root (default: current directory)\n"
"      --system TEXT       extra system prompt text\n"
"      --yes               allow every tool call without asking\n"
"      --allow TOOL,…      allow these tools without asking (repeatable)\n"
"      --rules FILE        permission rules file\n"
"      --no-sandbox        run bash without the Landlock sandbox\n"
"      --trace FILE        timestamped trace of tokens, tools and states\n"
"      --max-tool-rounds N tool rounds per user turn\n"
"\n"
"sessions:\n"
"      --resume [ID]       resume a session (default: pick from the list)\n"
"      --continue          resume the latest session of this directory\n"
"      --session ID        open or create the session ID\n"
"      --no-prompt-cache   neither use nor write the cached system prompt state\n"
"\n"
"browser:\n"
"      --cdp-url URL       attach to a running Chrome DevTools endpoint\n"
"      --browser PATH      Chromium/Chrome executable\n"
"      --search-url T      web search URL template with {query}\n"
"\n"
"      --no-color          no colours (also when NO_COLOR is set)\n"
"  -h, --help              this text\n"
"      --version           print the version\n", stdout);
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("ds4cl: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nTry 'ds4cl --help'.\n", stderr);
    return 2;
}

/* The least --ctx for the commands without the agent (serve, model-info):
 * a smaller context holds no exchange worth having. */
#define MIN_CTX 16

/* A --ctx refusal: the message names the number and the limit. */
static int ctx_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ctx_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ds4cl: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'ds4cl --help'.\n", stderr);
    return 2;
}

/* A --ctx that is a whole number, only too large (so the message names
 * the limit rather than the syntax). */
static bool beyond_ctx_limit(const char *s)
{
    size_t digits = strspn(s, "0123456789");
    return digits && !s[digits] && strspn(s, "0") < digits;
}

int options_parse(int argc, char **argv, ds4cl_options *o)
{
    memset(o, 0, sizeof *o);
    o->backend = DS4_BACKEND_CPU;
    o->quant_sim = DS4_QSIM_FULL;
    o->think = DS4_THINK_HIGH;
    o->sampling.temperature = 0.6f;
    o->sampling.top_p = 0.95f;
    o->sampling.top_k = 0;
    o->sampling.min_p = 0.0f;
    o->device = NULL;
    bool backend_given = false;
    const char *nc = getenv("NO_COLOR");
    if (nc && *nc) o->no_color = true;

    int c;
    long iv;
    double fv;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:p:n:C:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'h':
        case OPT_HELP: options_print_help(); return 1;
        case OPT_VERSION: printf("ds4cl %s\n", DS4CL_VERSION); return 1;
        case 'm': o->model_path = optarg; break;
        case OPT_CTX:
            if (!strcmp(optarg, "auto")) o->ctx = -1;
            else if (!num_parse_long(optarg, 1, DS4_MAX_CTX, &iv, NULL)) o->ctx = (int)iv; /* the least: below */
            else if (beyond_ctx_limit(optarg))
                return ctx_error("--ctx %s is beyond the model's limit: ds4cl takes at most %d tokens", optarg,
                                 DS4_MAX_CTX);
            else return usage_error("--ctx wants a number of tokens or 'auto', not '%s'", optarg);
            break;
        case OPT_MODEL_INFO: o->mode = MODE_MODEL_INFO; break;
        case OPT_DUMP_TOKENS: o->mode = MODE_DUMP_TOKENS; break;
        case OPT_RAW: o->raw = true; break;
        case 'p': o->prompt = optarg; break;
        case OPT_PROMPT_FILE: o->prompt_file = optarg; break;
        case OPT_LIST_DEVICES: o->mode = MODE_LIST_DEVICES; break;
        case OPT_DEVICE: o->device = optarg; break;
        case OPT_BACKEND:
            backend_given = true;
            if (!strcmp(optarg, "cpu")) o->backend = DS4_BACKEND_CPU;
            else if (!strcmp(optarg, "opencl")) o->backend = DS4_BACKEND_OPENCL;
            else return usage_error("--backend wants cpu or opencl, not '%s'", optarg);
            break;
        case OPT_CPU_MOE: o->host_expert_layers = INT_MAX; break;
        case OPT_SPLIT: o->split = optarg; break;
        case OPT_STREAM_EXPERTS:
            if (num_parse_long(optarg, 0, 1 << 20, &iv, NULL)) return usage_error("--stream-experts wants a token count ≥ 0, not '%s'", optarg);
            o->stream_experts = (int)iv;
            break;
        case OPT_EXPERT_CACHE: {
            uint64_t v;
            if (strcmp(optarg, "auto") && strcmp(optarg, "off") && (num_parse_size(optarg, &v, NULL) != 0 || !v))
                return usage_error("--expert-cache wants a size such as 12G, auto or off, not '%s'", optarg);
            o->expert_cache = optarg;
            break;
        }
        case OPT_N_CPU_MOE:
            if (num_parse_long(optarg, 0, INT_MAX, &iv, NULL)) return usage_error("--n-cpu-moe wants a number ≥ 0, not '%s'", optarg);
            o->host_expert_layers = iv == 0 ? DS4_EXPERTS_ON_DEVICE : (int)iv;
            break;
        case OPT_THREADS:
            if (num_parse_long(optarg, 1, 1024, &iv, NULL)) return usage_error("--threads wants 1..1024, not '%s'", optarg);
            o->threads = (int)iv;
            break;
        case OPT_ENGINE:
            if (!strncmp(optarg, "script:", 7) && optarg[7]) {
                o->backend = DS4_BACKEND_SCRIPT;
                o->script_path = optarg + 7;
                backend_given = true;
            } else if (!strcmp(optarg, "cpu") || !strcmp(optarg, "opencl")) {
                o->backend = optarg[0] == 'c' ? DS4_BACKEND_CPU : DS4_BACKEND_OPENCL;
                backend_given = true;
            } else {
                return usage_error("--engine wants script:FILE, cpu or opencl, not '%s'", optarg);
            }
            break;
        case OPT_QUANT_SIM:
            if (!strcmp(optarg, "full")) o->quant_sim = DS4_QSIM_FULL;
            else if (!strcmp(optarg, "f16kv")) o->quant_sim = DS4_QSIM_F16KV;
            else if (!strcmp(optarg, "none")) o->quant_sim = DS4_QSIM_NONE;
            else return usage_error("--quant-sim wants full, f16kv or none, not '%s'", optarg);
            break;
        case OPT_OUTPUT_FORMAT:
            if (!strcmp(optarg, "text")) o->output = OUTPUT_TEXT;
            else if (!strcmp(optarg, "stream-json")) o->output = OUTPUT_STREAM_JSON;
            else if (!strcmp(optarg, "json")) o->output = OUTPUT_JSON;
            else return usage_error("--output-format wants text, json or stream-json, not '%s'", optarg);
            break;
        case 'n':
            if (num_parse_long(optarg, 1, INT_MAX, &iv, NULL)) return usage_error("--max-tokens wants a positive number, not '%s'", optarg);
            o->max_tokens = (int)iv;
            break;
        case OPT_TEMP:
            if (num_parse_double(optarg, 0, 100, &fv, NULL)) return usage_error("--temp wants 0..100, not '%s'", optarg);
            o->sampling.temperature = (float)fv;
            break;
        case OPT_TOP_P:
            if (num_parse_double(optarg, 0, 1, &fv, NULL)) return usage_error("--top-p wants 0..1, not '%s'", optarg);
            o->sampling.top_p = (float)fv;
            break;
        case OPT_TOP_K:
            if (num_parse_long(optarg, 0, INT_MAX, &iv, NULL)) return usage_error("--top-k wants a number ≥ 0, not '%s'", optarg);
            o->sampling.top_k = (int)iv;
            break;
        case OPT_MIN_P:
            if (num_parse_double(optarg, 0, 1, &fv, NULL)) return usage_error("--min-p wants 0..1, not '%s'", optarg);
            o->sampling.min_p = (float)fv;
            break;
        case OPT_SEED: {
            uint64_t s;
            if (num_parse_u64(optarg, 0, UINT64_MAX, &s, NULL))
                return usage_error("--seed wants a number 0..18446744073709551615, not '%s'", optarg);
            o->sampling.seed = s;
            o->seed_given = true;
            break;
        }
        case OPT_THINK: o->think = DS4_THINK_HIGH; break;
        case OPT_NOTHINK: o->think = DS4_THINK_NONE; break;
        case OPT_THINK_MAX: o->think = DS4_THINK_MAX; break;
        case 'C': o->workspace = optarg; break;
        case OPT_SYSTEM: o->system_extra = optarg; break;
        case OPT_YES: o->yes = true; break;
        case OPT_ALLOW: {
            if (o->n_allow >= OPT_MAX_ALLOW) return usage_error("too many --allow flags%s", "");
            /* one tool or a list: "read,edit" */
            for (const char *p = optarg; *p;) {
                p += strspn(p, ", \t");
                size_t len = strcspn(p, ", \t");
                if (!len) break;
                char name[64];
                snprintf(name, sizeof name, "%.*s", (int)len, p);
                if (!tools_find(name)) return usage_error("--allow: there is no tool named '%s'", name);
                p += len;
            }
            o->allow[o->n_allow++] = optarg;
            break;
        }
        case OPT_RULES: o->rules_path = optarg; break;
        case OPT_NO_SANDBOX: o->no_sandbox = true; break;
        case OPT_TRACE: o->trace_path = optarg; break;
        case OPT_MAX_TOOL_ROUNDS:
            if (num_parse_long(optarg, 1, 100000, &iv, NULL)) return usage_error("--max-tool-rounds wants a positive number, not '%s'", optarg);
            o->max_tool_rounds = (int)iv;
            break;
        case OPT_RESUME:
            o->resume = true;
            /* Optional value as a separate word: `--resume ID`. */
            if (optind < argc && argv[optind][0] != '-' && strcmp(argv[optind], "download") != 0)
                o->resume_id = argv[optind++];
            break;
        case OPT_CONTINUE: o->continue_last = true; break;
        case OPT_SESSION: o->session_id = optarg; break;
        case OPT_NO_PROMPT_CACHE: o->no_prompt_cache = true; break;
        case OPT_CDP_URL: o->cdp_url = optarg; break;
        case OPT_BROWSER: o->browser_path = optarg; break;
        case OPT_SEARCH_URL: o->search_url = optarg; break;
        case OPT_DIR: o->download_dir = optarg; break;
        case OPT_TOKEN: o->token = optarg; break;
        case OPT_NO_COLOR: o->no_color = true; break;
        case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
        case '?':
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    for (int i = optind; i < argc; i++) {
        if (i == optind && !strcmp(argv[i], "download") && o->mode == MODE_INTERACTIVE) {
            o->mode = MODE_DOWNLOAD;
        } else if (o->mode == MODE_DOWNLOAD && !o->download_what) {
            o->download_what = argv[i];
        } else {
            return usage_error("unexpected argument '%s'", argv[i]);
        }
    }
    if (o->mode == MODE_INTERACTIVE && (o->prompt || o->prompt_file)) o->mode = MODE_PROMPT;
    if (o->prompt && o->prompt_file) return usage_error("give either -p or --prompt-file%s", ", not both");
    if (o->mode == MODE_DUMP_TOKENS && !o->prompt && !o->prompt_file)
        return usage_error("--dump-tokens needs -p TEXT or --prompt-file F%s", "");
    bool agent_mode = o->mode == MODE_PROMPT || o->mode == MODE_INTERACTIVE;
    /* The agent's exact least depends on the model's tokenizer (checked
     * when the model is opened, before its weights are read); below
     * AGENT_MIN_CTX no model can do. */
    if (agent_mode && o->ctx > 0 && o->ctx < AGENT_MIN_CTX)
        return ctx_error("--ctx %d is too small: the agent takes at least %d tokens, and its system prompt needs more "
                         "(the model's tokenizer counts them: the exact least is named once the model is found)",
                         o->ctx, AGENT_MIN_CTX);
    if (!agent_mode && o->ctx > 0 && o->ctx < MIN_CTX)
        return ctx_error("--ctx %d is too small: the engine takes at least %d tokens", o->ctx, MIN_CTX);
    if (o->mode == MODE_DOWNLOAD && o->n_allow) return usage_error("--allow makes no sense with download%s", "");
    (void)backend_given;
    return 0;
}
