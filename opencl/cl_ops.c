/* cl_ops.c — the OpenCL ops context: device weights, scratch, the memory
 * ops, and the ds4_ops table (compute ops live in their own files). */
#include "opencl/cl_ops_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/quant.h"

/* ---- errors and helpers ----------------------------------------------------- */

int clo_fail(clo_ctx *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return clrt_fail(c->rt, "%s", msg);
}

int clo_range(clo_ctx *c, const char *op, const ds4_buf *b, size_t off, size_t n)
{
    if (!b) return clo_fail(c, "%s: missing buffer", op);
    if (off > b->n || n > b->n - off)
        return clo_fail(c, "%s: access [%zu, +%zu) outside a buffer of %zu bytes", op, off, n, b->n);
    return 0;
}

static const char *last_error(void *ctx) { return clrt_error(((clo_ctx *)ctx)->rt); }

size_t clo_group(const clo_ctx *c, cl_kernel k, size_t want)
{
    size_t max = clrt_kernel_max_group(c->rt, k), g = 1;
    while (g * 2 <= want && g * 2 <= max) g *= 2;
    return g;
}

bool clo_is_cpu(const clo_ctx *c) { return c->cpu_shaped; }

void clo_arg_buf(clrt_call *call, const ds4_buf *b, size_t elem)
{
    cl_mem m = b ? b->mem : NULL;
    size_t off = b ? b->off : 0;
    if (off % elem && call->err == CL_SUCCESS) {
        call->err = CL_MISALIGNED_SUB_BUFFER_OFFSET;
        call->err_arg = call->n;
    }
    clrt_arg_mem(call, m);
    clrt_arg_ulong(call, off / elem);
}

const clo_piece *clo_weight(const clo_ctx *c, const void *p, size_t bytes)
{
    const uint8_t *q = p;
    size_t lo = 0, hi = c->n_w; /* first piece with data > q */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->w[mid].data <= q) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    const clo_piece *w = &c->w[lo - 1];
    if ((size_t)(q - w->data) > w->bytes || bytes > w->bytes - (size_t)(q - w->data)) return NULL;
    return w;
}

int clo_arg_weight(clo_ctx *c, clrt_call *call, const ds4_tensor *t, size_t offset, size_t bytes, size_t elem)
{
    const uint8_t *p = (const uint8_t *)t->data + offset;
    const clo_piece *w = t->data ? clo_weight(c, p, bytes) : NULL;
    if (!w)
        return clo_fail(c, "tensor %s: bytes [%zu, +%zu) are not in one OpenCL buffer", t->name ? t->name : "?", offset,
                        bytes);
    size_t at = w->off + (size_t)(p - w->data);
    if (at % elem) return clo_fail(c, "tensor %s: offset %zu is not a multiple of %zu", t->name ? t->name : "?", at, elem);
    clrt_arg_mem(call, w->mem);
    clrt_arg_ulong(call, at / elem);
    return 0;
}

static void use_changed(clo_ctx *c)
{
    uint64_t now = c->use.buffers + c->use.scratch;
    if (now > c->use.peak) c->use.peak = now;
}

cl_mem clo_scratch(clo_ctx *c, int slot, size_t bytes)
{
    if (bytes == 0) bytes = 4;
    if (c->scr_n[slot] >= bytes) return c->scr[slot];
    if (c->scr[slot]) clReleaseMemObject(c->scr[slot]);
    c->use.scratch -= c->scr_n[slot];
    c->scr[slot] = NULL;
    c->scr_n[slot] = 0;
    /* grow in steps so a slowly growing need does not reallocate every call */
    size_t want = CLO_SCRATCH_SLACK(bytes);
    if (want > c->max_alloc) want = bytes;
    cl_int rc;
    c->scr[slot] = clCreateBuffer(clrt_context(c->rt), CL_MEM_READ_WRITE, want, NULL, &rc);
    if (!c->scr[slot]) {
        clrt_fail_cl(c->rt, rc, "OpenCL scratch buffer");
        return NULL;
    }
    c->scr_n[slot] = want;
    c->use.scratch += want;
    use_changed(c);
    return c->scr[slot];
}

/* ---- weights ------------------------------------------------------------------ */

static int add_piece(clo_ctx *c, const uint8_t *data, size_t bytes, cl_mem mem, size_t off)
{
    if (c->n_w == c->cap_w) {
        size_t cap = c->cap_w ? 2 * c->cap_w : 256;
        clo_piece *nw = realloc(c->w, cap * sizeof *nw);
        if (!nw) return -1;
        c->w = nw;
        c->cap_w = cap;
    }
    /* keep sorted: tensors are registered mostly in file order */
    size_t i = c->n_w;
    while (i > 0 && c->w[i - 1].data > data) {
        c->w[i] = c->w[i - 1];
        i--;
    }
    c->w[i] = (clo_piece){ data, bytes, mem, off };
    c->n_w++;
    return 0;
}

typedef struct {
    const char *name;
    const uint8_t *data;
    uint64_t bytes, unit; /* split only at multiples of unit */
} weight_src;

static int place(clo_ctx *c, const weight_src *t, const clo_options *o, uint64_t *done, uint64_t total,
                 ds4_error *err)
{
    const clrt_device *d = clrt_dev(c->rt);
    uint64_t align = d->base_align;
    uint64_t limit = c->zero_copy ? (c->max_alloc > align ? c->max_alloc - align : 0) : c->max_alloc;
    uint64_t per = t->bytes <= limit ? t->bytes : limit / t->unit * t->unit;
    if (per == 0)
        return ds4_error_set(err,
                             "tensor %s: one %s of %llu bytes is larger than the largest buffer %s allows (%llu bytes)",
                             t->name, t->unit == t->bytes ? "tensor" : "slice", (unsigned long long)t->unit, d->name,
                             (unsigned long long)c->max_alloc);
    if (per < t->bytes) c->winfo.split++;
    for (uint64_t at = 0; at < t->bytes; at += per) {
        uint64_t n = t->bytes - at < per ? t->bytes - at : per;
        const uint8_t *p = t->data + at;
        cl_int rc;
        cl_mem m;
        size_t off = 0;
        if (c->zero_copy) {
            off = (size_t)((uintptr_t)p % align);
            m = clCreateBuffer(clrt_context(c->rt), CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, (size_t)n + off,
                               (void *)(uintptr_t)(p - off), &rc);
        } else {
            m = clCreateBuffer(clrt_context(c->rt), CL_MEM_READ_ONLY, (size_t)n, NULL, &rc);
            if (m) {
                rc = clEnqueueWriteBuffer(clrt_queue(c->rt), m, CL_TRUE, 0, (size_t)n, p, 0, NULL, NULL);
                if (rc != CL_SUCCESS) {
                    clReleaseMemObject(m);
                    m = NULL;
                }
            }
        }
        if (!m) {
            char need[32];
            return ds4_error_set(err, "OpenCL device %s: cannot hold tensor %s (%s, %llu bytes; the weights need %s): %s",
                                 d->name, t->name, c->zero_copy ? "zero-copy mapping" : "upload",
                                 (unsigned long long)n, format_bytes(need, sizeof need, total), clrt_strerror(rc));
        }
        if (add_piece(c, p, (size_t)n, m, off)) {
            clReleaseMemObject(m);
            return ds4_error_set(err, "out of memory");
        }
        c->winfo.buffers++;
        if (!c->zero_copy) {
            c->winfo.uploaded += n;
            *done += n;
            if (o && o->progress && total) o->progress(o->progress_ud, (double)*done / (double)total, "uploading weights");
        }
    }
    c->winfo.bytes += t->bytes;
    return 0;
}

static uint64_t unit_of(uint32_t n_dims, const uint64_t *ne, uint64_t row_bytes, uint64_t bytes)
{
    if (n_dims >= 3 && ne[2] > 1) return ne[1] * row_bytes; /* one expert */
    if (n_dims >= 2 && ne[1] > 1) return row_bytes;
    return bytes;
}

static int place_file(clo_ctx *c, const clo_options *o, ds4_error *err)
{
    const gguf_file *f = c->m->file;
    size_t nt = gguf_n_tensors(f);
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < nt; i++) total += gguf_tensor_at(f, i)->nbytes;
    const clrt_device *d = clrt_dev(c->rt);
    if (!c->zero_copy && total > c->device_mem) {
        char need[32], have[32];
        return ds4_error_set(err,
                             "the model's weights need %s of device memory, but the OpenCL device %s has %s; "
                             "use a device with more memory or --backend cpu",
                             format_bytes(need, sizeof need, total), d->name, format_bytes(have, sizeof have, c->device_mem));
    }
    for (size_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (!t->nbytes) continue;
        weight_src s = { t->name, t->data, t->nbytes, unit_of(t->n_dims, t->ne, t->row_bytes, t->nbytes) };
        if (place(c, &s, o, &done, total, err)) return -1;
    }
    if (o && o->progress && !c->zero_copy) o->progress(o->progress_ud, 1.0, "weights on the device");
    return 0;
}

int clo_add_tensor(void *ctx, const ds4_tensor *t, ds4_error *err)
{
    clo_ctx *c = ctx;
    if (!t->data || !t->nbytes) return 0;
    if (clo_weight(c, t->data, (size_t)t->nbytes)) return 0; /* already there */
    uint64_t ne[3] = { (uint64_t)t->ne[0], (uint64_t)t->ne[1], (uint64_t)t->ne[2] };
    weight_src s = { t->name ? t->name : "?", t->data, t->nbytes, unit_of((uint32_t)t->n_dims, ne, t->row_bytes, t->nbytes) };
    uint64_t done = 0;
    return place(c, &s, NULL, &done, t->nbytes, err);
}

int clo_hold_tensors(void *ctx, const ds4_tensor *const *ts, size_t n, const clo_options *o, ds4_error *err)
{
    clo_ctx *c = ctx;
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < n; i++) total += ts[i]->nbytes;
    for (size_t i = 0; i < n; i++) {
        const ds4_tensor *t = ts[i];
        if (!t->data || !t->nbytes || clo_weight(c, t->data, (size_t)t->nbytes)) continue;
        uint64_t ne[3] = { (uint64_t)t->ne[0], (uint64_t)t->ne[1], (uint64_t)t->ne[2] };
        weight_src s = { t->name ? t->name : "?", t->data, t->nbytes,
                         unit_of((uint32_t)t->n_dims, ne, t->row_bytes, t->nbytes) };
        if (place(c, &s, o, &done, total, err)) return -1;
    }
    if (o && o->progress && !c->zero_copy && total) o->progress(o->progress_ud, 1.0, "weights on the device");
    return 0;
}

bool clo_zero_copy(void *ctx) { return ((clo_ctx *)ctx)->zero_copy; }

/* Ends a loan: its pieces leave the weight table (the buffers stay for
 * the next loan). */
static void end_loan(clo_ctx *c)
{
    if (!c->lent) return;
    size_t k = 0;
    for (size_t i = 0; i < c->n_w; i++) {
        bool lent = false;
        for (int j = 0; j < CLO_LEND_SLOTS; j++) lent |= c->lend_mem[j] && c->w[i].mem == c->lend_mem[j];
        if (!lent) c->w[k++] = c->w[i];
    }
    c->n_w = k;
    c->lent = false;
}

/* The copies are queued behind the work already queued, so a buffer is
 * rewritten only once the ops that read the previous loan are done; the
 * source is the mapped file, valid for the context's lifetime. */
static int clo_lend(void *ctx, const ds4_tensor *const *ts, int n)
{
    clo_ctx *c = ctx;
    end_loan(c);
    if (n > CLO_LEND_SLOTS) return clo_fail(c, "lend: %d tensors at once, at most %d", n, CLO_LEND_SLOTS);
    for (int j = 0; j < n; j++) {
        const ds4_tensor *t = ts[j];
        if (!t->data || !t->nbytes) continue;
        if (t->nbytes > c->max_alloc)
            return clo_fail(c, "lend: tensor %s (%llu bytes) is larger than the device's largest buffer",
                            t->name ? t->name : "?", (unsigned long long)t->nbytes);
        if (c->lend_cap[j] < t->nbytes) {
            if (c->lend_mem[j]) clReleaseMemObject(c->lend_mem[j]);
            c->use.scratch -= c->lend_cap[j];
            c->lend_cap[j] = 0;
            cl_int rc;
            c->lend_mem[j] = clCreateBuffer(clrt_context(c->rt), CL_MEM_READ_ONLY, (size_t)t->nbytes, NULL, &rc);
            if (!c->lend_mem[j]) return clrt_fail_cl(c->rt, rc, "OpenCL buffer for streamed weights");
            c->lend_cap[j] = (size_t)t->nbytes;
            c->use.scratch += c->lend_cap[j];
            use_changed(c);
        }
        cl_int rc = clEnqueueWriteBuffer(clrt_queue(c->rt), c->lend_mem[j], CL_FALSE, 0, (size_t)t->nbytes, t->data, 0,
                                         NULL, NULL);
        if (rc != CL_SUCCESS) return clrt_fail_cl(c->rt, rc, "streaming weights to the device");
        if (add_piece(c, t->data, (size_t)t->nbytes, c->lend_mem[j], 0)) return clo_fail(c, "out of memory");
        c->lent = true;
    }
    return 0;
}

void clo_weights(void *ctx, clo_weight_info *out) { *out = ((clo_ctx *)ctx)->winfo; }

/* ---- context ------------------------------------------------------------------ */

/* The programs of the op files (cl_ops_impl.h lists which op is where). */
/* matmul.cl is built in the parts the model's weight types use
 * (clo_build_products). */
static const char *const op_programs[] = { "basic", "hc", "rope", "attn", "attn_comp", "attn_index", "router" };
#define N_OP_PROGRAMS (sizeof op_programs / sizeof op_programs[0])

/* At load the kernels are compiled, or read from the binary cache, so
 * that the first token does not pay for it and a load reports it. */
static int build_programs(clo_ctx *c, const clo_options *o, ds4_error *err)
{
    for (size_t i = 0; i < N_OP_PROGRAMS; i++) {
        if (o->progress) o->progress(o->progress_ud, (double)i / (double)N_OP_PROGRAMS, "building OpenCL programs");
        if (clrt_build(c->rt, op_programs[i])) return ds4_error_set(err, "%s", clrt_error(c->rt));
    }
    if (o->progress) o->progress(o->progress_ud, 0.9, "building OpenCL programs");
    if (clo_build_products(c, c->m->file)) return ds4_error_set(err, "%s", clrt_error(c->rt));
    if (o->progress) o->progress(o->progress_ud, 1.0, "OpenCL programs ready");
    return 0;
}

void *clo_new(const ds4_model *m, const clo_options *o, ds4_error *err)
{
    clrt_options ro = { .device = o ? o->device : NULL, .cache_dir = o ? o->cache_dir : NULL };
    clrt *rt = clrt_open(&ro, err);
    if (!rt) return NULL;
    clo_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        clrt_close(rt);
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    c->m = m;
    c->hp = &m->hp;
    c->rt = rt;
    const clrt_device *d = clrt_dev(rt);
    c->max_alloc = d->max_alloc;
    if (o && o->max_alloc && o->max_alloc < c->max_alloc) c->max_alloc = o->max_alloc;
    c->device_mem = d->global_mem;
    if (o && o->device_mem && o->device_mem < c->device_mem) c->device_mem = o->device_mem;
    c->zero_copy = d->unified && !(o && o->copy_weights);
    clo_kernel_shape shape = o ? o->shape : CLO_SHAPE_AUTO;
    c->cpu_shaped = shape == CLO_SHAPE_AUTO ? (d->type & CL_DEVICE_TYPE_CPU) != 0 : shape == CLO_SHAPE_CPU;
    clrt_set_cpu_loops(rt, c->cpu_shaped); /* no program is built yet */
    if ((m->file && !(o && o->no_weights) && place_file(c, o, err)) || (o && o->build_all && build_programs(c, o, err))) {
        clo_free(c);
        return NULL;
    }
    return c;
}

void clo_free(void *ctx)
{
    clo_ctx *c = ctx;
    if (!c) return;
    if (c->rt) clFinish(clrt_queue(c->rt));
    end_loan(c);
    for (int j = 0; j < CLO_LEND_SLOTS; j++)
        if (c->lend_mem[j]) clReleaseMemObject(c->lend_mem[j]);
    for (size_t i = 0; i < c->n_w; i++) clReleaseMemObject(c->w[i].mem);
    for (int i = 0; i < CLO_SCR_SLOTS; i++)
        if (c->scr[i]) clReleaseMemObject(c->scr[i]);
    if (c->iq2_grid) clReleaseMemObject(c->iq2_grid);
    if (c->iq2_signs) clReleaseMemObject(c->iq2_signs);
    free(c->w);
    clrt_close(c->rt);
    free(c);
}

clrt *clo_runtime(void *ctx) { return ((clo_ctx *)ctx)->rt; }

bool clo_cpu_shaped(void *ctx) { return ((clo_ctx *)ctx)->cpu_shaped; }

uint64_t clo_scratch_estimate(void *ctx, int T, int n_ctx, bool experts)
{
    clo_ctx *c = ctx;
    uint64_t need[CLO_SCR_SLOTS] = { 0 };
    clo_hc_scratch_need(c, T, need);
    clo_attn_scratch_need(c, T, n_ctx, need);
    /* the MoE's slots are known only as a sum: counted beside the others */
    uint64_t total = 0;
    for (int s = 0; s < CLO_SCR_SLOTS; s++) total += CLO_SCRATCH_SLACK(need[s] > 4 ? need[s] : 4);
    return total + (experts ? CLO_SCRATCH_SLACK(clo_moe_scratch_bytes(c->hp, T)) : 0) + CLO_SCR_SLOTS;
}

void clo_device_usage(void *ctx, clo_device_use *out) { *out = ((clo_ctx *)ctx)->use; }

/* ---- memory ops ------------------------------------------------------------------- */

static ds4_buf *clo_alloc(void *ctx, size_t bytes)
{
    clo_ctx *c = ctx;
    if (bytes > c->max_alloc) {
        clo_fail(c, "a buffer of %zu bytes is larger than the OpenCL device allows (%llu)", bytes,
                 (unsigned long long)c->max_alloc);
        return NULL;
    }
    ds4_buf *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    cl_int rc;
    size_t n = bytes ? bytes : 4;
    b->mem = clCreateBuffer(clrt_context(c->rt), CL_MEM_READ_WRITE, n, NULL, &rc);
    if (!b->mem) {
        clrt_fail_cl(c->rt, rc, "allocating an OpenCL buffer");
        free(b);
        return NULL;
    }
    const cl_uchar zero = 0;
    rc = clEnqueueFillBuffer(clrt_queue(c->rt), b->mem, &zero, 1, 0, n, 0, NULL, NULL);
    if (rc != CL_SUCCESS) {
        clrt_fail_cl(c->rt, rc, "clearing an OpenCL buffer");
        clReleaseMemObject(b->mem);
        free(b);
        return NULL;
    }
    b->n = bytes;
    c->use.buffers += n;
    use_changed(c);
    return b;
}

static ds4_buf *clo_view(void *ctx, ds4_buf *base, size_t off, size_t bytes)
{
    clo_ctx *c = ctx;
    if (clo_range(c, "view", base, off, bytes)) return NULL;
    ds4_buf *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    clRetainMemObject(base->mem);
    b->mem = base->mem;
    b->off = base->off + off;
    b->n = bytes;
    b->is_view = true;
    return b;
}

static void clo_release(void *ctx, ds4_buf *b)
{
    clo_ctx *c = ctx;
    if (!b) return;
    if (!b->is_view) c->use.buffers -= b->n ? b->n : 4;
    clReleaseMemObject(b->mem);
    free(b);
}

static void CL_CALLBACK free_staging(cl_event ev, cl_int status, void *p)
{
    (void)ev;
    (void)status;
    free(p);
}

/* Small writes are staged in a copy so the caller's memory is free at once
 * and nothing waits; large ones (session restore) block. */
#define STAGED_WRITE_MAX (1u << 20)

static int clo_write(void *ctx, ds4_buf *dst, size_t off, const void *src, size_t n)
{
    clo_ctx *c = ctx;
    if (clo_range(c, "write", dst, off, n)) return -1;
    if (!n) return 0;
    cl_command_queue q = clrt_queue(c->rt);
    cl_int rc;
    if (n <= STAGED_WRITE_MAX) {
        void *copy = malloc(n);
        if (!copy) return clo_fail(c, "out of memory");
        memcpy(copy, src, n);
        cl_event ev;
        rc = clEnqueueWriteBuffer(q, dst->mem, CL_FALSE, dst->off + off, n, copy, 0, NULL, &ev);
        if (rc != CL_SUCCESS) {
            free(copy);
            return clrt_fail_cl(c->rt, rc, "writing an OpenCL buffer");
        }
        rc = clSetEventCallback(ev, CL_COMPLETE, free_staging, copy);
        clReleaseEvent(ev);
        if (rc != CL_SUCCESS) {
            /* cannot hand the copy over: wait for it instead */
            clrt_count_wait(c->rt);
            clFinish(q);
            free(copy);
        }
        return 0;
    }
    clrt_count_wait(c->rt);
    rc = clEnqueueWriteBuffer(q, dst->mem, CL_TRUE, dst->off + off, n, src, 0, NULL, NULL);
    return rc == CL_SUCCESS ? 0 : clrt_fail_cl(c->rt, rc, "writing an OpenCL buffer");
}

static int clo_read(void *ctx, ds4_buf *src, size_t off, void *dst, size_t n)
{
    clo_ctx *c = ctx;
    if (clo_range(c, "read", src, off, n)) return -1;
    if (!n) return clrt_finish(c->rt);
    clrt_count_wait(c->rt);
    cl_int rc = clEnqueueReadBuffer(clrt_queue(c->rt), src->mem, CL_TRUE, src->off + off, n, dst, 0, NULL, NULL);
    return rc == CL_SUCCESS ? 0 : clrt_fail_cl(c->rt, rc, "reading an OpenCL buffer (or work queued before it)");
}

static int clo_finish(void *ctx)
{
    clo_ctx *c = ctx;
    clrt_count_wait(c->rt);
    return clrt_finish(c->rt);
}

static int clo_copy(void *ctx, ds4_buf *dst, size_t doff, ds4_buf *src, size_t soff, size_t n)
{
    clo_ctx *c = ctx;
    if (clo_range(c, "copy", dst, doff, n) || clo_range(c, "copy", src, soff, n)) return -1;
    if (!n) return 0;
    cl_command_queue q = clrt_queue(c->rt);
    size_t d = dst->off + doff, s = src->off + soff;
    cl_int rc;
    if (dst->mem == src->mem && d < s + n && s < d + n) {
        if (d == s) return 0;
        /* overlapping ranges of one buffer: through a temporary (memmove) */
        cl_mem tmp = clo_scratch(c, CLO_SCR_D, n);
        if (!tmp) return -1;
        rc = clEnqueueCopyBuffer(q, src->mem, tmp, s, 0, n, 0, NULL, NULL);
        if (rc == CL_SUCCESS) rc = clEnqueueCopyBuffer(q, tmp, dst->mem, 0, d, n, 0, NULL, NULL);
    } else {
        rc = clEnqueueCopyBuffer(q, src->mem, dst->mem, s, d, n, 0, NULL, NULL);
    }
    return rc == CL_SUCCESS ? 0 : clrt_fail_cl(c->rt, rc, "copying between OpenCL buffers");
}

/* ---- the table ---------------------------------------------------------------------- */

const ds4_ops clo_ops = {
    .name = "opencl",
    .last_error = last_error,
    .alloc = clo_alloc,
    .view = clo_view,
    .release = clo_release,
    .write = clo_write,
    .read = clo_read,
    .finish = clo_finish,
    .copy = clo_copy,
    .embed = clo_embed,
    .hc_pre = clo_hc_pre,
    .hc_post = clo_hc_post,
    .hc_head = clo_hc_head,
    .rmsnorm = clo_rmsnorm,
    .matmul = clo_matmul,
    .swiglu = clo_swiglu,
    .add = clo_add,
    .rope = clo_rope,
    .sim = clo_sim,
    .store_rows = clo_store_rows,
    .compress = clo_compress,
    .indexer = clo_indexer,
    .attention = clo_attention,
    .router = clo_router,
    .moe = clo_moe,
    .argmax = clo_argmax,
    .lend = clo_lend,
};
