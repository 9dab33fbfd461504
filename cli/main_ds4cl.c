/* main_ds4cl.c — entry point of `ds4cl`: parse the command line, run the
 * selected mode. */
#include "cli/commands.h"
#include "engine/ds4.h"

#include <string.h>

int main(int argc, char **argv)
{
    /* under mpirun, every rank but 0 runs a layer range of rank 0's model */
    int rank = ds4_job_start(&argc, &argv);
    if (rank < 0) return 1;
    if (rank > 0) return ds4_job_serve();
    /* `ds4cl serve` has flags of its own and parses them itself */
    if (argc > 1 && !strcmp(argv[1], "serve")) return cmd_serve(argc - 1, argv + 1);
    ds4cl_options o;
    int rc = options_parse(argc, argv, &o);
    if (rc == 1) return EXIT_DONE;
    if (rc != 0) return EXIT_USAGE;

    switch (o.mode) {
    case MODE_INTERACTIVE: return cmd_interactive(&o);
    case MODE_PROMPT: return cmd_prompt(&o);
    case MODE_MODEL_INFO: return cmd_model_info(&o);
    case MODE_DUMP_TOKENS: return cmd_dump_tokens(&o);
    case MODE_LIST_DEVICES: return cmd_list_devices(&o);
    case MODE_DOWNLOAD: return cmd_download(&o);
    }
    return EXIT_USAGE;
}
