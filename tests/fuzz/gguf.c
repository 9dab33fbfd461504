/* Fuzz target: the GGUF reader and the DS4 binding over arbitrary bytes.
 * Whatever opens must be fully readable through the public accessors
 * (every key, every array element, every tensor's bytes) without reading
 * outside the input, and binding must fail cleanly or produce tensor views
 * inside it. Seeds (tests/fuzz/seeds/gguf/) are ds4cl-mkmodel outputs at the
 * smallest DS4 shape with every layer kind, and small generic GGUFs. */
#include <stdint.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/model.h"

static volatile uint64_t sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 61) s += b[i];
    if (n) s += b[n - 1];
    sink += s;
}

static void touch_tensor(const ds4_tensor *t)
{
    if (t->data) touch(t->data, (size_t)t->nbytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ds4_error err;
    gguf_file *f = gguf_open_memory(data, size, &err);
    if (!f) return 0;
    for (size_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        touch(k.ptr, k.len);
        int64_t iv;
        double dv;
        gguf_kv_as_int(f, i, &iv);
        gguf_kv_as_float(f, i, &dv);
        gguf_array a;
        if (gguf_kv_array(f, i, &a))
            for (uint64_t j = 0; j < a.n; j++) {
                gguf_str s = gguf_array_str(&a, j);
                touch(s.ptr, s.len);
                gguf_array_int(&a, j, &iv);
                gguf_array_float(&a, j, &dv);
            }
        char key[256];
        size_t n = k.len < sizeof key - 1 ? k.len : sizeof key - 1;
        memcpy(key, k.ptr, n);
        key[n] = 0;
        sink += (uint64_t)gguf_find_key(f, key);
    }
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        touch(t->data, (size_t)t->nbytes);
        sink += (uint64_t)gguf_find_tensor(f, t->name);
    }
    sink += gguf_identity(f);
    ds4_model *m = model_bind(f, &err);
    if (m) {
        ds4_model_info info;
        model_describe(m, &info);
        sink += model_context_bytes(m, 4096);
        touch_tensor(&m->token_embd);
        touch_tensor(&m->output);
        for (int l = 0; l < m->hp.n_layer; l++) {
            const ds4_layer *L = &m->layers[l];
            touch_tensor(&L->attn_q_b);
            touch_tensor(&L->comp_ape);
            touch_tensor(&L->idx_q_b);
            touch_tensor(&L->tid2eid);
            touch_tensor(&L->exp_probs_b);
            touch_tensor(&L->ffn_down_exps);
            sink += (uint64_t)m->hp.compress_ratio[l] + (uint64_t)m->hp.swiglu_clamp[l];
        }
        model_free(m);
    }
    gguf_close(f);
    return 0;
}
