/* main_ds4cl.c — entry point of `ds4cl`: parse the command line, run the
 * selected mode. */
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    /* `ds4cl serve` has flags of its own and parses them itself */
    if (argc > 1 && !strcmp(argv[1], "serve")) return cmd_serve(argc - 1, argv + 1);
    ds4cl_options o;
    int rc = options_parse(argc, argv, &o);
    if (rc == 1) return EXIT_DONE;
    if (rc != 0) return EXIT_USAGE;

    int (*cmd)(const ds4cl_options *) = NULL;
    const char *what = "";
    switch (o.mode) {
    case MODE_INTERACTIVE: cmd = cmd_interactive; what = "the interactive agent"; break;
    case MODE_PROMPT: cmd = cmd_prompt; what = "--prompt"; break;
    case MODE_MODEL_INFO: cmd = cmd_model_info; what = "--model-info"; break;
    case MODE_DUMP_TOKENS: cmd = cmd_dump_tokens; what = "--dump-tokens"; break;
    case MODE_LIST_DEVICES: cmd = cmd_list_devices; what = "--list-devices"; break;
    case MODE_DOWNLOAD: cmd = cmd_download; what = "download"; break;
    }
    if (!cmd) {
        fprintf(stderr, "ds4cl: %s is not part of this build\n", what);
        return EXIT_ERROR;
    }
    return cmd(&o);
}
