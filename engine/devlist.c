/* devlist.c — the one reading of each placement argument: device lists
 * ("0,1"), shares ("3,1") and the layer ranges shares give (ds4.h). */
#include "engine/backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ds4_parse_devices(const char *list, const char *src, char (*pieces)[DS4_DEVICE_PIECE_MAX], ds4_error *err)
{
    if (!list || !*list) return 0;
    int n = 0;
    for (const char *p = list;;) {
        size_t k = strcspn(p, ",");
        if (n == DS4_MAX_DEVICES) return ds4_error_set(err, "%s %s: at most %d devices", src, list, DS4_MAX_DEVICES);
        if (k == 0 || k >= DS4_DEVICE_PIECE_MAX)
            return ds4_error_set(err, "%s %s: an empty or overlong device in the list", src, list);
        memcpy(pieces[n], p, k);
        pieces[n++][k] = 0;
        if (!p[k]) break;
        p += k + 1;
    }
    return n;
}

int ds4_parse_shares(const char *s, int n, double *out, const char *what, const char *unit, ds4_error *err)
{
    int k = 0;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !(v > 0) || v > 1e9 || (*end && *end != ',') || k >= n)
            return ds4_error_set(err, "%s: expected %d positive numbers separated by commas, one per %s (e.g. 3,1)", what,
                                 n, unit);
        out[k++] = v;
        p = *end ? end + 1 : end;
    }
    if (k != n) return ds4_error_set(err, "%s: expected %d numbers, one per %s, not %d", what, n, unit, k);
    return 0;
}

int ds4_split_layers(int n_layer, int n, const double *w, const char *unit, int *bound, ds4_error *err)
{
    if (n < 1 || n > n_layer)
        return ds4_error_set(err, "%d %ss need at least as many layers; the model has %d", n, unit, n_layer);
    double total = 0;
    for (int k = 0; k < n; k++) {
        if (!(w[k] > 0)) return ds4_error_set(err, "%s %d has no share of the layers", unit, k);
        total += w[k];
    }
    double cum = 0;
    bound[0] = 0;
    for (int k = 1; k < n; k++) {
        cum += w[k - 1];
        int b = (int)(cum / total * n_layer + 0.5);
        /* at least one layer each, and one left for every later part */
        if (b < bound[k - 1] + 1) b = bound[k - 1] + 1;
        if (b > n_layer - (n - k)) b = n_layer - (n - k);
        bound[k] = b;
    }
    bound[n] = n_layer;
    return 0;
}

int engine_device_pieces(const char *want, char (*pieces)[DS4_DEVICE_PIECE_MAX], const char **src, ds4_error *err)
{
    *src = "--device";
    if (!want || !*want) {
        want = getenv("DS4CL_DEVICE");
        *src = "DS4CL_DEVICE";
    }
    return ds4_parse_devices(want, *src, pieces, err);
}
