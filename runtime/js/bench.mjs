#!/usr/bin/env node
// ms per generated token of greedy decoding, batch 1:
//
//   node runtime/js/bench.mjs PACKAGE [--backends node] [--variant fp32[,int8-dynamic,...]] [--threads 2]
//                            [--wasm-threads 1] [--input 16] [--new 32] [--rounds 10] [--spinning 0|1]
//
// A fixed input of --input ids (a source ending in EOS, or a prompt), --new tokens generated with
// EOS ignored. After one warm-up call each, the setups (each variant; node: cache "inplace" and
// "refeed"; wasm: "refeed") take turns, --rounds calls each, so that a busy machine slows all alike.
// Prints one JSON line per setup: the median ms/token (wall time of the whole call, encoder or
// prefill included, divided by the new tokens). --threads: onnxruntime-node's intra-op threads;
// --wasm-threads: onnxruntime-web's. Measure one backend per process (--backends node, then
// --backends wasm): once an onnxruntime-web session has run, onnxruntime-node's calls in the same
// process were 2.5-4x slower here.
import { loadPackage } from "./index.mjs";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const pkg = args[0];
if (!pkg || pkg.startsWith("--")) {
  console.log(
    "usage: node bench.mjs PACKAGE [--backends node|wasm] [--variant V] [--threads N] " +
      "[--wasm-threads N] [--input N] [--new N] [--rounds N]",
  );
  process.exit(2);
}
const backends = flag("--backends", "node").split(",");
const variants = flag("--variant", "fp32").split(","); // several: measured in turns, one process
const threads = { node: Number(flag("--threads", "2")), wasm: Number(flag("--wasm-threads", "1")) };
const inputLength = Number(flag("--input", "16"));
const maxNewTokens = Number(flag("--new", "32"));
const rounds = Number(flag("--rounds", "10"));
const spin = flag("--spinning", null); // 0 | 1 (default: the runtime's, off)
const spinning = spin === null ? undefined : spin === "1";

const setups = [];
for (const backend of backends) {
  for (const variant of variants) {
    const model = await loadPackage(pkg, { backend, variant, threads: threads[backend], spinning });
    for (const cache of backend === "node" ? ["inplace", "refeed"] : ["refeed"]) {
      setups.push({ backend, cache, model, variant, times: [] });
    }
  }
}
const { model } = setups[0];
const V = model.model.vocab_size;
const ids = Array.from({ length: inputLength }, (_, i) => 4 + ((i * 37) % (V - 4)));
if (model.family === "encoder-decoder") ids[ids.length - 1] = model.eosId;
const settings = { maxNewTokens, ignoreEos: true };
for (const s of setups) await s.model.decodeIds([ids], { ...settings, cache: s.cache });
for (let r = 0; r < rounds; r++) {
  for (const s of setups)
    s.times.push((await s.model.decodeIds([ids], { ...settings, cache: s.cache })).msPerToken);
}
const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
for (const { backend, cache, variant, times } of setups) {
  const line = {
    package: pkg,
    family: model.family,
    variant,
    backend,
    cache,
    threads: threads[backend],
    spin,
  };
  Object.assign(line, { input: inputLength, new_tokens: maxNewTokens, rounds });
  console.log(JSON.stringify({ ...line, ms_per_token: +median(times).toFixed(3) }));
}
for (const s of setups) if (s.cache !== "refeed" || s.backend === "wasm") await s.model.release();
