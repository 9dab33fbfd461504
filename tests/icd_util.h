/* icd_util.h — OpenCL drivers chosen per test. The ICD loader (ocl-icd)
 * reads the drivers to load from $OCL_ICD_VENDORS once, at a process's
 * first OpenCL call; each test runs in its own process, so a test that
 * points it at a private directory of .icd files sees exactly those
 * drivers, and the system-wide /etc/OpenCL/vendors stays what every other
 * test uses.
 *
 * Drivers: PoCL (the system's, /etc/OpenCL/vendors/pocl.icd) and Mesa's
 * two (rusticl and clover, unpacked by build-aux/deps.sh into a private
 * directory, or installed system-wide by mesa-opencl-icd). */
#ifndef DS4CL_TESTS_ICD_UTIL_H
#define DS4CL_TESTS_ICD_UTIL_H

/* Driver library paths, or NULL where that driver is not on this machine. */
const char *icd_pocl_lib(void);
const char *icd_rusticl_lib(void);
const char *icd_clover_lib(void);

/* A new directory in the test's temp dir with one .icd file per library;
 * its path. The loader decides the platforms' order, not the files'. */
const char *icd_vendors_dir(const char *const *libs, int n);

/* Makes this process (and the programs it starts) see only rusticl, on
 * its llvmpipe device (RUSTICL_ENABLE), with the tests' program cache and
 * a Mesa shader cache of the test's own (cold: every kernel compiled where
 * Mesa's warnings show); skips with the reason where rusticl is not
 * installed. */
void icd_use_rusticl(void);

#endif
