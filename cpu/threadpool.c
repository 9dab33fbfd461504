/* threadpool.c — static-split parallel loops over a persistent pthread
 * set. A loop is published under the mutex with a new generation number;
 * workers notice it by spinning on the generation (cheap wake-up for the
 * many short loops of a decode step) or, after a while, by sleeping on
 * the condition variable. The caller runs its own share, then waits for
 * the others the same way. */
#include "cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spin budget before sleeping; the spin yields now and then so that an
 * oversubscribed machine still makes progress. */
enum { SPIN_ROUNDS = 1 << 10, YIELD_EVERY = 1 << 6 };

struct threadpool {
    int n;
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    /* the current loop (written before gen is bumped, read after) */
    tp_task_fn fn;
    void *arg;
    int64_t n_tasks;
    atomic_uint gen;
    atomic_int pending; /* workers (other than the caller) still running */
    atomic_bool stop;
};

typedef struct {
    threadpool *tp;
    int index;
} worker_arg;

static void run_share(threadpool *tp, int w)
{
    int64_t n = tp->n_tasks;
    int64_t a = n * w / tp->n, b = n * (w + 1) / tp->n;
    for (int64_t i = a; i < b; i++) tp->fn(tp->arg, i, w);
}

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    threadpool *tp = wa->tp;
    int w = wa->index;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN_ROUNDS && !atomic_load(&tp->stop); i++) {
            if (i % YIELD_EVERY == YIELD_EVERY - 1) sched_yield();
            else CPU_RELAX();
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            while ((g = atomic_load(&tp->gen)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->wake, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        run_share(tp, w);
        if (atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

threadpool *tp_new(int n_threads)
{
    if (n_threads < 1) n_threads = 1;
    threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->stop, false);
    tp->tids = calloc((size_t)n_threads, sizeof *tp->tids);
    if (!tp->tids) {
        tp_free(tp);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            tp->n = i;
            tp_free(tp);
            return NULL;
        }
        wa->tp = tp;
        wa->index = i;
        if (pthread_create(&tp->tids[i], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n = i;
            tp_free(tp);
            return NULL;
        }
    }
    return tp;
}

void tp_free(threadpool *tp)
{
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->tids[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    free(tp->tids);
    free(tp);
}

int tp_threads(const threadpool *tp) { return tp->n; }

void tp_run(threadpool *tp, int64_t n_tasks, tp_task_fn fn, void *arg)
{
    if (n_tasks <= 0) return;
    if (tp->n == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->arg = arg;
    tp->n_tasks = n_tasks;
    atomic_store_explicit(&tp->pending, tp->n - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);

    run_share(tp, 0);

    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load_explicit(&tp->pending, memory_order_acquire) == 0) return;
        if (i % YIELD_EVERY == YIELD_EVERY - 1) sched_yield();
        else CPU_RELAX();
    }
    pthread_mutex_lock(&tp->mu);
    while (atomic_load_explicit(&tp->pending, memory_order_acquire) != 0) pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}

int tp_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}
