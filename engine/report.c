/* report.c — what a model file holds, described for `ds4cl --model-info`
 * from an engine's own binding (ds4.h): a front end reads the file through
 * the engine, never through the GGUF reader or the model binding. */
#include "engine/backend.h"
#include "engine/quant.h"

#include <stdio.h>

static void put_bytes(strbuf *b, uint64_t n)
{
    if (n >= (1ull << 30)) sb_printf(b, "%.2f GiB", (double)n / (double)(1ull << 30));
    else if (n >= (1ull << 20)) sb_printf(b, "%.2f MiB", (double)n / (double)(1ull << 20));
    else if (n >= 1024) sb_printf(b, "%.1f KiB", (double)n / 1024.0);
    else sb_printf(b, "%llu B", (unsigned long long)n);
}

static void put_ratios(strbuf *b, const ds4_hparams *hp)
{
    for (int l = 0; l < hp->n_layer; l++) {
        /* runs of a repeating pattern would be shorter, but the list is exact */
        sb_printf(b, "%s%d", l ? "," : "", hp->compress_ratio[l]);
        if (l == 15 && hp->n_layer > 20) {
            sb_puts(b, ",…");
            break;
        }
    }
}

static void put_expert_types(strbuf *b, const ds4_model *m)
{
    const ds4_layer *L = &m->layers[0];
    bool uniform = true;
    for (int l = 1; l < m->hp.n_layer; l++)
        if (m->layers[l].ffn_gate_exps.type != L->ffn_gate_exps.type ||
            m->layers[l].ffn_down_exps.type != L->ffn_down_exps.type)
            uniform = false;
    sb_printf(b, "gate/up %s, down %s%s", quant_type_name(L->ffn_gate_exps.type), quant_type_name(L->ffn_down_exps.type),
              uniform ? "" : " (layer 0; other layers differ)");
}

static void put_shape(strbuf *b, const ds4_model *m)
{
    const ds4_hparams *hp = &m->hp;
    sb_printf(b, "layers        %d (compress ratios ", hp->n_layer);
    put_ratios(b, hp);
    sb_printf(b, "; hash-routed layers: %d)\n", hp->n_hash_layer);
    sb_printf(b, "embedding     %d, vocabulary %d", hp->n_embd, hp->n_vocab);
    if (hp->n_ctx_train) sb_printf(b, ", trained context %lld", (long long)hp->n_ctx_train);
    sb_puts(b, "\n");
    sb_printf(b, "attention     %d heads x %d (RoPE on the last %d), q-lora %d, output %d groups x %d, window %d\n",
              hp->n_head, hp->head_dim, hp->n_rot, hp->q_lora, hp->n_out_group, hp->o_lora, hp->n_swa);
    sb_printf(b, "indexer       %d heads x %d, top-k %d\n", hp->n_indexer_head, hp->indexer_head_dim, hp->indexer_top_k);
    sb_printf(b, "experts       %d routed (%d per token) + %d shared, width %d; ", hp->n_expert, hp->n_expert_used,
              hp->n_expert_shared, hp->n_ff_exp);
    put_expert_types(b, m);
    sb_puts(b, "\n");
    sb_printf(b, "routing       weights scale %g, %snormalized, SwiGLU clamp %g\n", hp->expert_weights_scale,
              hp->expert_weights_norm ? "" : "not ", hp->swiglu_clamp[0]);
    sb_printf(b, "hyper-conn    %d streams, %d Sinkhorn iterations, epsilon %g\n", hp->n_hc, hp->hc_sinkhorn_iters,
              hp->hc_eps);
    sb_printf(b, "rope          base %g; compressed layers base %g, YaRN factor %g, beta %g/%g, original context %lld\n",
              hp->rope_base, hp->compress_rope_base, hp->yarn_factor, hp->yarn_beta_fast, hp->yarn_beta_slow,
              (long long)hp->yarn_orig_ctx);
    sb_printf(b, "rms epsilon   %g\n", hp->rms_eps);
}

static void put_types(strbuf *b, const gguf_file *f)
{
    sb_puts(b, "\ntensor bytes by type\n");
    uint64_t bytes[64] = { 0 }, count[64] = { 0 }, total = 0;
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->type < 64) {
            bytes[t->type] += t->nbytes;
            count[t->type]++;
        }
        total += t->nbytes;
    }
    for (uint32_t t = 0; t < 64; t++) {
        if (!count[t]) continue;
        sb_printf(b, "  %-8s %6llu tensors  ", quant_type_name(t), (unsigned long long)count[t]);
        put_bytes(b, bytes[t]);
        sb_puts(b, "\n");
    }
    sb_printf(b, "  %-8s %6zu tensors  ", "total", gguf_n_tensors(f));
    put_bytes(b, total);
    sb_puts(b, "\n");
}

int ds4_engine_describe_model(const ds4_engine *e, strbuf *out, ds4_error *err)
{
    const ds4_model *m = e->model;
    const gguf_file *f = e->gguf;
    if (!m) return ds4_error_set(err, "the %s backend binds no model to describe", e->backend->name);
    sb_printf(out, "file          %s\n", e->model_path);
    sb_puts(out, "size          ");
    put_bytes(out, gguf_size(f));
    sb_printf(out, " (GGUF v%u, %zu tensors, %zu metadata keys, alignment %u)\n", gguf_version(f), gguf_n_tensors(f),
              gguf_n_kv(f), gguf_alignment(f));
    sb_printf(out, "name          %s\n", m->name[0] ? m->name : "(none)");
    sb_printf(out, "identity      %016llx\n", (unsigned long long)gguf_identity(f));
    put_shape(out, m);
    put_types(out, f);
    return 0;
}

uint64_t ds4_model_context_bytes(const ds4_engine *e, int n_ctx)
{
    return e->model ? model_context_bytes(e->model, n_ctx) : 0;
}

int ds4_engine_tensors_over(const ds4_engine *e, uint64_t max_alloc)
{
    int n = 0;
    for (size_t i = 0; i < gguf_n_tensors(e->gguf); i++) n += gguf_tensor_at(e->gguf, i)->nbytes > max_alloc;
    return n;
}
