/* expert_setup.h — the front end of the expert cache's set-up before
 * loading: which setting is in force and what is said about it; the
 * decision itself is the engine's (engine/ds4.h, ds4_expert_setup_plan).
 *
 * --expert-cache SIZE|auto|off, else $DS4CL_EXPERT_CACHE, else auto:
 * SIZE streams through a cache of SIZE whatever the memory; auto streams
 * when the file and the smallest session do not fit in the usable memory;
 * off never streams and keeps the plain refusal of a file that does not
 * fit (ds4_memory_precheck_file). Other backends: never (OpenCL keeps its
 * own placement).
 */
#ifndef DS4CL_EXPERT_SETUP_H
#define DS4CL_EXPERT_SETUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/options.h"
#include "engine/ds4.h"

/* 0 with out->plan (streaming or not), or -1 after printing why nothing
 * fits. A session of --ctx N, else of the planner's smallest context,
 * must fit beside the cache; want_ctx: the context the automatic budget
 * leaves room for where it can (0: the smallest). quiet: no line about
 * the cache. A file that cannot be read is left to the loader. */
int expert_setup(const ds4cl_options *o, const char *path, int want_ctx, bool quiet, ds4_expert_setup *out);

/* Before loading without an expert cache: ds4_memory_precheck_file, its
 * refusal printed on stderr. 0, or -1 when the weights cannot fit. */
int expert_setup_precheck(const char *path, ds4_backend backend);

/* Where the experts' popularity of the model file `model` is kept between
 * runs ($XDG_CACHE_HOME/ds4cl/expert-popularity/NAME.pop); NULL when there
 * is no cache directory. */
const char *expert_stats_path(const char *model, char *buf, size_t size);

#endif
