/* bench_engine.h — the engine modes of ds4cl-bench: logits dumps in the
 * golden layout (--logits) and the prefill/decode speed sweep (CSV). */
#ifndef DS4CL_BENCH_ENGINE_H
#define DS4CL_BENCH_ENGINE_H

/* `ds4cl-bench --logits OUT.f32 -m MODEL --token-ids … (--decode N |
 * --feed …)`: whole argv; returns the exit status. */
int bench_logits_main(int argc, char **argv);

/* `ds4cl-bench -m MODEL --prompt-file F --ctx-start A --ctx-max B
 * --step S --gen-tokens G`: whole argv; returns the exit status. */
int bench_speed_main(int argc, char **argv);

#endif
