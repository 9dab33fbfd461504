/* icd_util.c — private OpenCL vendor directories for tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/icd_util.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

#ifndef ICD_TRIPLET
#define ICD_TRIPLET "x86_64-linux-gnu"
#endif

/* The first readable of: the private unpacked copy (deps.sh), the
 * system-wide package's. */
static const char *mesa_lib(const char *name)
{
    const char *dir = getenv("DS4CL_MESA_CL_DIR");
    const char *roots[] = { dir && *dir ? dir : "/usr/local/lib/ds4cl/mesa-opencl-icd", "" };
    for (size_t i = 0; i < sizeof roots / sizeof *roots; i++) {
        char *p = test_printf("%s/usr/lib/" ICD_TRIPLET "/%s", roots[i], name);
        if (access(p, R_OK) == 0) return p;
    }
    return NULL;
}

const char *icd_rusticl_lib(void) { return mesa_lib("libRusticlOpenCL.so.1"); }
const char *icd_clover_lib(void) { return mesa_lib("libMesaOpenCL.so.1"); }

const char *icd_pocl_lib(void)
{
    size_t len;
    char *s = test_read_file("/etc/OpenCL/vendors/pocl.icd", &len);
    if (!s) return NULL;
    s[strcspn(s, "\r\n")] = 0;
    return *s ? s : NULL;
}

const char *icd_vendors_dir(const char *const *libs, int n)
{
    static int made;
    const char *dir = test_tmp_path("vendors%d", made++);
    CHECK_MSG(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    for (int i = 0; i < n; i++) {
        const char *base = strrchr(libs[i], '/');
        char *text = test_printf("%s\n", libs[i]);
        test_write_file(test_printf("%s/%s.icd", dir, base ? base + 1 : libs[i]), text, strlen(text));
    }
    return dir;
}

void icd_use_rusticl(void)
{
    const char *lib = icd_rusticl_lib();
    if (!lib) SKIP("rusticl (mesa-opencl-icd) is not installed: make deps");
    setenv("OCL_ICD_VENDORS", icd_vendors_dir(&lib, 1), 1);
    setenv("RUSTICL_ENABLE", "llvmpipe", 1);
    /* Mesa's shader cache a test's own, set before the platform starts:
     * Mesa says what it thinks of a kernel only while compiling it, so a
     * cache shared across runs made every run after the first quiet
     * whatever the kernels (llvmpipe compiles at a kernel's first launch;
     * with the cache off it compiles again at every launch, seconds each).
     * Ours stays in the tests' cache. */
    setenv("MESA_SHADER_CACHE_DIR", test_tmp_path("mesa-cache"), 1);
    setenv("XDG_CACHE_HOME", oclt_cache_dir(), 1);
    oclt_require_device();
}
