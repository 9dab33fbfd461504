/* place.h — the engine's placement of a model over the devices of a
 * backend with a device table (backend.h, ds4_device_ops): open, close
 * and the session bytes the placement implies. The plan's arithmetic is
 * plan.h's; what a placement promises the user is ds4_placement's
 * (ds4.h). */
#ifndef DS4CL_PLACE_H
#define DS4CL_PLACE_H

#include "engine/backend.h"

/* Opens the devices e->opt.device names, plans the placement over them
 * (e->place, e->placed) and has each hold its weights (none when only
 * planning). Sets e->impl (a forward engine over the devices and, when
 * the plan keeps parts in host memory, the host backend). 0, or -1 with
 * err: a device that cannot open, a plan that does not fit (unless only
 * planning: the numbers are then in e->place). */
int place_open(ds4_engine *e, ds4_error *err);
void place_close(ds4_engine *e);

/* What a session of n_ctx tokens takes on the devices under the
 * placement in force. */
uint64_t place_session_bytes(const ds4_engine *e, int n_ctx);

#endif
