/* numerics.h — the scalar building blocks of DS4's rounding simulations
 * and RoPE tables (doc/model.md §2), shared by every backend's host side
 * and by the tests.
 *
 * fp8_e4m3_round / fp4_e2m1_round: nearest representable value, ties to
 * the even code, for inputs already clamped to the format's range.
 * The block simulations clamp and scale by a power of two chosen from the
 * block's absolute maximum, exactly as doc/model.md §2.2/§2.3 describe.
 */
#ifndef DS4CL_NUMERICS_H
#define DS4CL_NUMERICS_H

#include <stdint.h>

#include "engine/ops.h"

float fp8_e4m3_round(float v);  /* |v| ≤ 448 */
float fp4_e2m1_round(float v);  /* |v| ≤ 6 */

/* In place: e4m3 round trip of x[0 … n) in blocks of 64 (n a multiple of
 * 64 or the last block shorter). */
void sim_fp8_blocks(float *x, int n);
/* In place: Walsh–Hadamard transform of x[0 … n) (n a power of two),
 * scaled by n^-1/2. */
void sim_hadamard(float *x, int n);
/* In place: e2m1 round trip in blocks of 32. */
void sim_fp4_blocks(float *x, int n);

/* RoPE parameters of ratio-0 (compressed = 0) or compressed layers, in f32
 * exactly as the reference derives them (YaRN correction dims included). */
void rope_params(const ds4_hparams *hp, int compressed, ds4_rope *out);
/* cos/sin (sin negated for inverse) of the n_rot/2 pairs at position pos,
 * with the arithmetic ds4_ops.rope specifies. */
void rope_cos_sin(const ds4_rope *r, int64_t pos, int inverse, float *cs, float *sn);

#endif
