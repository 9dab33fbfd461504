/* commands.h — the modes of `ds4cl`, one function each, implemented in
 * cli/cmd_*.c. Each returns the process exit status:
 * 0 done, 1 error, 2 usage, 3 interrupted, 4 context exhausted, 5 the
 * session could not be saved (the turn stopped there). */
#ifndef DS4CL_COMMANDS_H
#define DS4CL_COMMANDS_H

#include "cli/options.h"

enum {
    EXIT_DONE = 0,
    EXIT_ERROR = 1,
    EXIT_USAGE = 2,
    EXIT_INTERRUPTED = 3,
    EXIT_CONTEXT_FULL = 4,
    EXIT_NOT_SAVED = 5,
};

int cmd_interactive(const ds4cl_options *o);
int cmd_prompt(const ds4cl_options *o);
int cmd_model_info(const ds4cl_options *o);
int cmd_dump_tokens(const ds4cl_options *o);
int cmd_list_devices(const ds4cl_options *o);
int cmd_download(const ds4cl_options *o);
/* `ds4cl serve …` (argv[0] is "serve"). */
int cmd_serve(int argc, char **argv);

#endif
