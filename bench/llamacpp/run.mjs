// run.mjs MODEL PROMPT_FILE THREADS PREFILL GEN — llama.cpp's speed on a
// GGUF through node-llama-cpp's prebuilt CPU binaries (the yardstick of
// `make bench`, bench/README.md). Prints one CSV line on stdout:
//   prefill_tps,decode_tps,cpu_variant (the libggml-cpu-*.so ggml picked)
// prefill_tps: the first PREFILL tokens of the file's text (repeated as
// needed) evaluated in one call (batches of PREFILL); decode_tps: GEN
// greedy tokens after it, one evaluation each. The model file is read
// once before loading so that neither figure includes the disk.
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [model, promptFile, threadsArg, prefillArg, genArg] = process.argv.slice(2);
if (!genArg) {
    console.error("usage: node run.mjs MODEL PROMPT_FILE THREADS PREFILL GEN");
    process.exit(2);
}
const threads = Number(threadsArg), prefill = Number(prefillArg), gen = Number(genArg);

function warm(path) {
    const fd = fs.openSync(path, "r");
    const buf = Buffer.allocUnsafe(1 << 24);
    while (fs.readSync(fd, buf, 0, buf.length, null) > 0);
    fs.closeSync(fd);
}

warm(model);
const llama = await getLlama({ gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error });
const loaded = await llama.loadModel({ modelPath: model, gpuLayers: 0, useMmap: true });
const context = await loaded.createContext({
    contextSize: prefill + gen + 16,
    batchSize: prefill,
    threads: { ideal: threads, min: threads },
});
const seq = context.getSequence();
const text = fs.readFileSync(promptFile, "utf8");
let ids = loaded.tokenize(text);
while (ids.length < prefill) ids = ids.concat(ids);
ids = ids.slice(0, prefill);

let t0 = performance.now();
await seq.evaluateWithoutGeneratingNewTokens(ids);
const prefillS = (performance.now() - t0) / 1000;

// greedy: temperature 0; each yielded token costs one single-token evaluation
let n = 0;
t0 = performance.now();
for await (const tok of seq.evaluate([ids[ids.length - 1]], { temperature: 0 })) {
    void tok;
    if (++n >= gen) break;
}
const decodeS = (performance.now() - t0) / 1000;
// ggml loads the best CPU variant this machine runs (libggml-cpu-<name>.so)
const maps = fs.readFileSync("/proc/self/maps", "utf8").match(/libggml-cpu-([a-z0-9_]+)\.so/);
const variant = maps ? maps[1] : "unknown";
console.log(`${(prefill / prefillS).toFixed(2)},${(n / decodeS).toFixed(2)},${variant}`);
await context.dispose();
await loaded.dispose();
await llama.dispose();
