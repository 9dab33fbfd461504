/* cpu_kernels_scalar.c — the CPU kernels in portable C: eight lanes held
 * in a struct, multiply then add. Every build has them; they are the
 * scalar level's and the reference the vector levels are tested against.
 * Built, like the vector levels, for the baseline of its architecture. */
#include "cpu/cpu_kernels_impl.h"

#define CK_WIDTH 0
#define CK_VBMI 0
#define CK_TGT
#define CK_NAME cpu_kernels_scalar
#include "cpu/cpu_kernels_x.h"
