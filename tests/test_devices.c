/* test_devices.c — the engine's list of backends and their devices: what
 * the command line shows without reaching into a backend. */
#include <stdlib.h>
#include <string.h>

#include "engine/ds4.h"
#include "opencl/cl_runtime.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

TEST(devices, backends_are_listed_by_name)
{
    int n;
    const ds4_backend *b = ds4_backends(&n);
    CHECK_EQ_INT(n, 3);
    CHECK_STR_EQ(ds4_backend_name(b[0]), "cpu");
    CHECK_STR_EQ(ds4_backend_name(b[1]), "opencl");
    CHECK_STR_EQ(ds4_backend_name(b[2]), "script");
}

/* The CPU backend runs on the host: one device sharing host memory. */
TEST(devices, the_cpu_backend_lists_the_host)
{
    ds4_device *d;
    int n, sel;
    ds4_error err = { "" };
    CHECK_EQ_INT(ds4_backend_devices(DS4_BACKEND_CPU, NULL, &d, &n, &sel, &err), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(sel, 0);
    CHECK_EQ_INT(d[0].kind, DS4_DEVICE_CPU);
    CHECK(d[0].shares_host_memory && d[0].memory > 0 && d[0].max_alloc > 0 && d[0].compute_units > 0);
    CHECK_CONTAINS(d[0].name, "host CPU");
    free(d);
    CHECK_EQ_INT(ds4_backend_devices(DS4_BACKEND_SCRIPT, NULL, &d, &n, &sel, &err), -1);
    CHECK_CONTAINS(err.msg, "script backend runs on no device");
    CHECK(d == NULL && n == 0 && sel == -1);
}

/* The OpenCL devices as the runtime enumerates them, with its selection
 * rule; a selection that matches nothing is named in the error. */
TEST(devices, the_opencl_backend_lists_what_the_runtime_sees)
{
    oclt_require_device();
    clrt_device *cd;
    int cn;
    ds4_error cerr = { "" };
    CHECK_EQ_INT(clrt_devices(&cd, &cn, &cerr), 0);
    ds4_device *d;
    int n, sel;
    ds4_error err = { "" };
    CHECK_EQ_INT(ds4_backend_devices(DS4_BACKEND_OPENCL, "0", &d, &n, &sel, &err), 0);
    CHECK_EQ_INT(n, cn);
    CHECK_EQ_INT(sel, 0);
    for (int i = 0; i < n; i++) {
        CHECK_EQ_INT(d[i].index, cd[i].index);
        CHECK_STR_EQ(d[i].name, cd[i].name);
        CHECK_STR_EQ(d[i].platform, cd[i].platform_name);
        CHECK_STR_EQ(ds4_device_kind_name(d[i].kind), clrt_type_name(cd[i].type));
        CHECK(d[i].memory == cd[i].global_mem && d[i].max_alloc == cd[i].max_alloc);
        CHECK_EQ_INT(d[i].shares_host_memory, cd[i].unified);
    }
    free(d);
    CHECK_EQ_INT(ds4_backend_devices(DS4_BACKEND_OPENCL, "no-such-device-xyz", &d, &n, &sel, &err), 0);
    CHECK_EQ_INT(sel, -1);
    CHECK_CONTAINS(err.msg, "no-such-device-xyz");
    free(d);
    free(cd);
}
