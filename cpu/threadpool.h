/* threadpool.h — a fixed set of worker threads that run one parallel loop
 * at a time, for the CPU backend.
 *
 * tp_run splits tasks 0 … n−1 statically: worker i (the caller is worker 0)
 * runs the contiguous range [i·n/N, (i+1)·n/N). The split depends only on
 * n and the thread count, so a computation whose every output is produced
 * by exactly one task gives the same bits for any thread count. Workers
 * spin briefly after a loop (decode issues many short loops) and then
 * sleep on a condition variable.
 *
 * One pool is driven by one thread at a time; tp_run must not be called
 * from inside a task.
 */
#ifndef DS4CL_THREADPOOL_H
#define DS4CL_THREADPOOL_H

#include <stdint.h>

typedef struct threadpool threadpool;

/* fn(arg, task, worker): worker is in [0, n_threads) and identifies a
 * per-thread scratch area. */
typedef void (*tp_task_fn)(void *arg, int64_t task, int worker);

/* n_threads ≥ 1 (1 = run everything on the caller). NULL on failure. */
threadpool *tp_new(int n_threads);
void tp_free(threadpool *tp);
int tp_threads(const threadpool *tp);

void tp_run(threadpool *tp, int64_t n_tasks, tp_task_fn fn, void *arg);

/* Online CPUs (≥ 1). */
int tp_cpu_count(void);

#endif
