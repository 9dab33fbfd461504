/* main_bench.c — entry point of `ds4cl-bench`: logits dumps and speed
 * benchmarks of the engine. */
#include <stdio.h>
#include <string.h>

#include "bench/bench_attn.h"
#include "bench/bench_batch.h"
#include "bench/bench_engine.h"
#include "bench/bench_hybrid.h"
#include "bench/bench_mpi.h"
#include "bench/bench_opencl.h"
#include "bench/bench_open.h"
#include "bench/bench_quant.h"
#include "bench/bench_replay.h"
#include "bench/bench_search.h"
#include "bench/bench_serve.h"
#include "bench/bench_stream.h"
#include "bench/bench_tokenizer.h"

#ifdef DS4CL_MPI
#include "mpi/dmpi.h"
#endif

static void help(void)
{
    fputs("ds4cl-bench " DS4CL_VERSION " — engine benchmarks and logits dumps\n"
          "\n"
          "usage: ds4cl-bench --logits OUT.f32 -m MODEL --token-ids 1,2,3 (--decode N | --feed 7,8,9)\n"
          "                   [--backend cpu|opencl] [--threads T] [--quant-sim full|f16kv|none] [--chunk N]\n"
          "                   [--load-session F] [--save-session F]\n"
          "                   raw f32 logits rows (golden layout); argmax of each row on stdout\n"
          "       ds4cl-bench -m MODEL --prompt-file F --ctx-start A --ctx-max B --step S\n"
          "                   --gen-tokens G [--backend cpu|opencl] [--threads T] [--quant-sim …]\n"
          "                   CSV: prefill and decode speed per context frontier, decode GB/s\n"
          "                   against a streaming-read ceiling\n"
          "       ds4cl-bench --quant-bench [--mb M] [--n N] [--threads T] [--reps R] [--types LIST]\n"
          "                   matvec GB/s per weight format vs a streaming-read ceiling\n"
          "       ds4cl-bench --cl-bench [--device D] [--reps R] [--prefill-t T] [--only NAME] …\n"
          "                   CSV: OpenCL matmul/moe kernels at Flash shapes, GB/s and GFLOP/s\n"
          "                   vs an OpenCL streaming-read roof and FMA peak\n"
          "       ds4cl-bench --tokenizer-bench FILE -m MODEL [--runs N]\n"
          "                   tokenizer MB/s against the npm reference tokenizer\n"
          "       ds4cl-bench --open-bench -m MODEL [--runs N]\n"
          "                   seconds to open the model, stage by stage, cold and warm\n"
          "       ds4cl-bench --serve-bench -m MODEL --prompt-file F [--prompt-bytes N] [--gen-tokens G] [--runs R]\n"
          "                   CSV: time to first token and decode tokens/s through ds4cl serve vs in process\n"
          "       ds4cl-bench --replay-bench -m MODEL [--engine script|cpu] [--parallel 1,4]\n"
          "                   [--header changing,constant,none] [--turns N] [--subagents N] …\n"
          "                   CSV: a coding agent's traffic through ds4cl serve, prompt tokens read and\n"
          "                   taken from the sessions and the snapshot cache, per request\n"
          "       ds4cl-bench --hybrid-bench -m MODEL [--prefill N] [--gen-tokens G] [--rounds R] [--device D]\n"
          "                   [--split-devices D,D]\n"
          "                   CSV: OpenCL with routed experts in host memory (CPU), or the layers split\n"
          "                   over several devices, vs all on one device\n"
          "       ds4cl-bench --batch-bench -m MODEL [--batches 1,2,4,8] [--prompt-tokens P] [--gen-tokens G]\n"
          "                   [--rounds R] [--threads T] [--backend cpu|opencl]\n"
          "                   CSV: aggregate decode tokens/s of B sessions stepped together, per B\n"
          "       ds4cl-bench --stream-bench -m MODEL [-m MODEL …] [--budgets 10,25,50,100]\n"
          "                   [--prompt-tokens P] [--warm-tokens W] [--gen-tokens G] [--threads T]\n"
          "                   CSV: decode with the routed experts read through an expert cache\n"
          "                   per budget (% of the experts), against the mapped file cold and\n"
          "                   resident; hit rate, disk bytes per token, read rates\n"
          "       ds4cl-bench --attn-bench [--backend cpu|opencl|both] [--rows LIST] [--ctx LIST] [--f32]\n"
          "                   attention and indexer cost per decode step at long context\n"
          "       mpirun -np N ds4cl-bench --mpi-bench -m MODEL [--prompt-tokens P] [--gen-tokens G] [--reps R]\n"
          "                   CSV: decode on rank 0 alone vs split over the N ranks, bytes per token and\n"
          "                   cost per hop (needs an MPI build: make MPI=1)\n"
          "       ds4cl-bench --search-bench DIR [--runs N] [--query [literal:|icase:|regex:]TEXT]...\n"
          "                   CSV: the agent's search tool against grep -rn on the same tree\n"
          "\n"
          "  -h, --help     this text\n"
          "      --version  print the version\n", stdout);
}

int main(int argc, char **argv)
{
#ifdef DS4CL_MPI
    /* under mpirun, every rank but 0 runs a layer range of rank 0's model */
    int rank = dmpi_start(&argc, &argv);
    if (rank < 0) return 1;
    if (rank > 0) return dmpi_serve();
#endif
    if (argc > 1 && !strcmp(argv[1], "--quant-bench")) return bench_quant(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "--cl-bench")) return bench_opencl(argc - 2, argv + 2);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--tokenizer-bench")) return bench_tokenizer_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--search-bench")) return bench_search_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--open-bench")) return bench_open_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--serve-bench")) return bench_serve_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--replay-bench")) return bench_replay_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--hybrid-bench")) return bench_hybrid_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--batch-bench")) return bench_batch_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--stream-bench")) return bench_stream_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--logits")) return bench_logits_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--mpi-bench")) return bench_mpi_main(argc, argv);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--prompt-file")) return bench_speed_main(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "--attn-bench")) return bench_attn(argc - 2, argv + 2);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(); return 0; }
        if (!strcmp(argv[i], "--version")) { printf("ds4cl-bench %s\n", DS4CL_VERSION); return 0; }
        fprintf(stderr, "ds4cl-bench: unknown option '%s'\nTry 'ds4cl-bench --help'.\n", argv[i]);
        return 2;
    }
    help();
    return 2;
}
