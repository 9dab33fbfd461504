/* preflight.h — every check of the command line that needs no model,
 * done before the model is opened: a typo in a flag should cost a second,
 * not the minutes of reading 80 GB of weights first.
 *
 * Checked: $DS4CL_MEM_AVAILABLE and $DS4CL_DEVICE_MEM, when set, are
 * memory sizes; the script of --engine script:FILE is readable; --device (or
 * $DS4CL_DEVICE) names an OpenCL device, and --device is not given to the
 * CPU backend; the permission rules files (--rules, the user's and the
 * workspace's) read and parse. Each message names the flag or variable at
 * fault. The context size needs the model's tokenizer and is checked by
 * model_open before any weight is read (agent_setup_check_ctx). */
#ifndef DS4CL_PREFLIGHT_H
#define DS4CL_PREFLIGHT_H

#include "cli/options.h"

/* 0 (EXIT_DONE) when everything checked is usable; else the exit status
 * (EXIT_USAGE or EXIT_ERROR) after printing why on stderr, and its text in
 * why (may be NULL). ws is the resolved workspace. */
int preflight_check(const ds4cl_options *o, const char *ws, ds4_error *why);
/* The same for a command without a workspace (the server): the engine
 * and device flags only. */
int preflight_check_engine(const ds4cl_options *o, ds4_error *why);

#endif
