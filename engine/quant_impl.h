/* quant_impl.h — what the quant modules share internally: the block
 * decoders' helpers, for the reference code here and the CPU backend's
 * vector kernels (cpu/quant_f32*.c, cpu/qk*). */
#ifndef DS4CL_QUANT_IMPL_H
#define DS4CL_QUANT_IMPL_H

#include <stdbool.h>
#include <string.h>

#include "engine/quant.h"

static inline uint16_t quant_rd16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline uint32_t quant_rd32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Q4_K: 6-bit scale and min of sub-block j (0..7). */
static inline void quant_q4k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

#endif
