/* test_devices.c — the engine's list of backends and their devices: what
 * the command line shows without reaching into a backend; and OpenCL
 * devices over several drivers at once. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/ds4.h"
#include "opencl/cl_runtime.h"
#include "tests/icd_util.h"
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

/* The registry keeps the backends in id order whatever order they
 * register in (each test runs in a process of its own, so the tables
 * added here go with it). */
TEST(devices, backends_registered_later_are_listed_by_id)
{
    static const ds4_backend_ops late = { .id = (ds4_backend)7, .name = "late" };
    static const ds4_backend_ops early = { .id = (ds4_backend)5, .name = "early" };
    ds4_backend_register(&late);
    ds4_backend_register(&early);
    int n;
    const ds4_backend *b = ds4_backends(&n);
    CHECK_EQ_INT(n, 5);
    static const char *const names[] = { "cpu", "opencl", "script", "early", "late" };
    for (int i = 0; i < n && i < 5; i++) CHECK_STR_EQ(ds4_backend_name(b[i]), names[i]);
    CHECK_STR_EQ(ds4_backend_name((ds4_backend)6), "?");
    /* the host backend is still the first with host ops */
    CHECK_STR_EQ(engine_host_backend()->name, "cpu");
}

/* Two tables with one id are a broken build: the program stops before it
 * could pick either, and says which. */
TEST(devices, a_second_backend_with_one_id_stops_the_program)
{
    const char *log = test_tmp_path("register.log");
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (!freopen(log, "w", stderr)) _exit(3);
        static const ds4_backend_ops again = { .id = DS4_BACKEND_OPENCL, .name = "opencl-again" };
        ds4_backend_register(&again);
        _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "the second table was taken (status %d)", st);
    char *text = test_read_file(log, NULL);
    CHECK(text != NULL);
    CHECK_CONTAINS(text, "two backends registered with one id: opencl-again");
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

/* Several drivers registered together, as on a machine with Mesa beside
 * a vendor's driver: clover (a platform without a device where no AMD GPU
 * is), PoCL and rusticl. The empty platform is passed over, the indexes
 * count the devices of the others in the loader's order, names and
 * indexes select across platforms, and without a choice (no GPU among
 * them) device 0 is the default. Both CPU drivers then run a kernel in
 * one process. */
TEST(devices, several_platforms_one_of_them_empty)
{
    const char *libs[3] = { icd_clover_lib(), icd_pocl_lib(), icd_rusticl_lib() };
    if (!libs[0] || !libs[1] || !libs[2]) SKIP("needs clover, PoCL and rusticl (make deps)");
    const char *vendors = icd_vendors_dir(libs, 3);
    setenv("OCL_ICD_VENDORS", vendors, 1);
    setenv("RUSTICL_ENABLE", "llvmpipe", 1);
    setenv("XDG_CACHE_HOME", oclt_cache_dir(), 1);
    unsetenv("DS4CL_DEVICE");
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(0, NULL, &np) == CL_SUCCESS);
    CHECK_EQ_INT((int)np, 3);
    clrt_device *d;
    int n;
    ds4_error err = { "" };
    CHECK_MSG(clrt_devices(&d, &n, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(n, 2);
    int pocl = -1, rusticl = -1;
    for (int i = 0; i < n; i++) {
        CHECK_EQ_INT(d[i].index, i);
        CHECK_MSG(!strstr(d[i].platform_name, "Clover"), "clover offers a device: %s", d[i].name);
        if (strstr(d[i].platform_name, "Portable Computing Language")) pocl = i;
        if (strstr(d[i].platform_name, "rusticl")) rusticl = i;
    }
    CHECK(pocl >= 0 && rusticl >= 0);
    CHECK_EQ_INT(clrt_pick(d, n, NULL, &err), 0);
    CHECK_EQ_INT(clrt_pick(d, n, "LLVMPIPE", &err), rusticl);
    CHECK_EQ_INT(clrt_pick(d, n, test_printf("%d", pocl), &err), pocl);
    CHECK_EQ_INT(clrt_pick(d, n, "2", &err), -1);
    CHECK_CONTAINS(err.msg, "there are 2");

    char *out;
    int rc = test_runf(&out, "%s/ds4cl --list-devices", test_bindir());
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "Platform: Portable Computing Language");
    CHECK_CONTAINS(out, "Platform: rusticl");
    CHECK(!strstr(out, "Clover"));
    CHECK_CONTAINS(out, test_printf("[0] (default) %s", d[0].name));
    rc = test_runf(&out, "%s/ds4cl --list-devices --device llvmpipe", test_bindir());
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, test_printf("[%d] (selected) %s", rusticl, d[rusticl].name));
    rc = test_runf(&out, "DS4CL_DEVICE=%d %s/ds4cl --list-devices", pocl, test_bindir());
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, test_printf("[%d] (selected) %s", pocl, d[pocl].name));
    rc = test_runf(&out, "%s/ds4cl --list-devices --device 2", test_bindir());
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "no OpenCL device has index 2");

    /* a kernel on each driver, both loaded in this process */
    for (int i = 0; i < n; i++) {
        clrt *rt = clrt_open(&(clrt_options){ .device = test_printf("%d", i), .cache_dir = oclt_cache_dir() }, &err);
        CHECK_MSG(rt != NULL, "%s", err.msg);
        CHECK_STR_EQ(clrt_dev(rt)->name, d[i].name);
        cl_int rc2;
        float x = 1.25f;
        cl_mem mx = clCreateBuffer(clrt_context(rt), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof x, &x, &rc2);
        clrt_call call = clrt_begin(rt, clrt_kernel(rt, "basic", "add_f32"));
        clrt_arg_mem(&call, mx);
        clrt_arg_ulong(&call, 0);
        clrt_arg_mem(&call, mx);
        clrt_arg_ulong(&call, 0);
        clrt_arg_mem(&call, mx);
        clrt_arg_ulong(&call, 0);
        clrt_arg_ulong(&call, 1);
        size_t g = 1;
        CHECK_MSG(clrt_enqueue(&call, 1, &g, NULL) == 0, "%s", clrt_error(rt));
        CHECK(clEnqueueReadBuffer(clrt_queue(rt), mx, CL_TRUE, 0, sizeof x, &x, 0, NULL, NULL) == CL_SUCCESS);
        CHECK(x == 2.5f);
        clReleaseMemObject(mx);
        clrt_close(rt);
    }
    free(d);
}
