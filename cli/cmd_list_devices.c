/* cmd_list_devices.c — `ds4cl --list-devices`: every OpenCL device with
 * its index (for --device / $DS4CL_DEVICE), what it is, its memory limits,
 * and which one the engine would pick. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "base/progress.h"

int cmd_list_devices(const ds4cl_options *o)
{
    ds4_device *devs;
    int n, pick;
    ds4_error err = { "" };
    if (ds4_backend_devices(DS4_BACKEND_OPENCL, o->device, &devs, &n, &pick, &err) != 0) {
        fprintf(stderr, "ds4cl: %s\n", err.msg);
        return EXIT_ERROR;
    }
    const char *env = getenv("DS4CL_DEVICE");
    const char *mark = (o->device && *o->device) || (env && *env) ? " (selected)" : " (default)";
    const char *platform = NULL;
    for (int i = 0; i < n; i++) {
        const ds4_device *d = &devs[i];
        if (!platform || strcmp(platform, d->platform)) {
            platform = d->platform;
            printf("%sPlatform: %s (%s)\n", i ? "\n" : "", d->platform, d->platform_version);
        }
        char gm[32], ma[32];
        printf("  [%d]%s %s\n", d->index, i == pick ? mark : "", d->name);
        printf("      type %s, %u compute units, %s\n", ds4_device_kind_name(d->kind), d->compute_units, d->version);
        printf("      global memory %s%s, max allocation %s\n", format_bytes(gm, sizeof gm, d->memory),
               d->shares_host_memory ? " (shared with the host)" : "", format_bytes(ma, sizeof ma, d->max_alloc));
        printf("      driver %s, vendor %s\n", d->driver, d->vendor);
        if (d->limits[0]) printf("      %s\n", d->limits);
    }
    free(devs);
    if (pick < 0) {
        fprintf(stderr, "ds4cl: %s\n", err.msg);
        return EXIT_ERROR;
    }
    printf("\nSelect with --device INDEX|NAME or DS4CL_DEVICE; without either the first GPU is used, else device 0.\n");
    return EXIT_DONE;
}
