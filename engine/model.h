/* model.h — the DS4 model bound to a GGUF: every hyper-parameter read from
 * deepseek4.* metadata and every tensor bound by name with its shape and
 * type checked. */
#ifndef DS4CL_MODEL_H
#define DS4CL_MODEL_H

#include "engine/ds4.h"
#include "engine/gguf.h"

typedef struct ds4_model ds4_model;

ds4_model *model_bind(const gguf_file *f, ds4_error *err);
void model_free(ds4_model *m);

/* Fills the shape fields, name and weights_bytes of info. */
void model_describe(const ds4_model *m, ds4_model_info *info);

#endif
