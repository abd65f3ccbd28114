#!/usr/bin/env node
// Greedy decoding of an edgeformer package from the command line, one JSON line per input:
//
//   node runtime/js/cli.mjs PACKAGE [options] [--ids 1,2,3 ...] [TEXT ...]
//
// Each TEXT is a source sentence (encoder-decoder) or a prompt (decoder-only); each --ids is
// one input as token ids (a source ends in EOS, as the Python runtime's translate_ids expects).
// Inputs are decoded as one batch. Output line: {"input", "ids", "text", "ms_per_token", ...}.
import { loadPackage } from "./index.mjs";

const HELP = `usage: node cli.mjs PACKAGE [--backend node|wasm] [--variant auto|fp32|int8|int4|int8-dynamic]
                    [--cache auto|inplace|refeed] [--threads N] [--spinning] [--max-new-tokens N]
                    [--ignore-eos] [--scores] [--ids 1,2,3 ...] [TEXT ...]`;

function parse(argv) {
  const opts = { ids: [], texts: [] };
  const value = (i, flag) => {
    if (i >= argv.length) throw new Error(`${flag} needs a value`);
    return argv[i];
  };
  const int = (text, flag) => {
    if (!/^\d+$/.test(text)) throw new Error(`${flag} ${text}: expected a whole number`);
    return Number(text);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "-h" || a === "--help") opts.help = true;
    else if (a === "--backend") opts.backend = value(++i, a);
    else if (a === "--variant") opts.variant = value(++i, a);
    else if (a === "--cache") opts.cache = value(++i, a);
    else if (a === "--threads") opts.threads = int(value(++i, a), a);
    else if (a === "--max-new-tokens") opts.maxNewTokens = int(value(++i, a), a);
    else if (a === "--ignore-eos") opts.ignoreEos = true;
    else if (a === "--spinning") opts.spinning = true;
    else if (a === "--scores") opts.scores = true;
    else if (a === "--ids")
      opts.ids.push(
        value(++i, a)
          .split(",")
          .map((x) => int(x.trim(), a)),
      );
    else if (a.startsWith("--")) throw new Error(`unknown option ${a}\n${HELP}`);
    else if (opts.package === undefined) opts.package = a;
    else opts.texts.push(a);
  }
  return opts;
}

async function main() {
  const opts = parse(process.argv.slice(2));
  if (opts.help || opts.package === undefined) {
    console.log(HELP);
    return opts.help ? 0 : 2;
  }
  if (opts.ids.length && opts.texts.length) throw new Error("give --ids or texts, not both");
  const { backend, variant, cache, threads, spinning } = opts;
  const model = await loadPackage(opts.package, { backend, variant, cache, threads, spinning });
  const settings = { maxNewTokens: opts.maxNewTokens, ignoreEos: opts.ignoreEos, scores: opts.scores };
  const info = { variant: model.variant, backend: model.backend, cache: model.cacheMode };
  if (opts.ids.length) {
    const out = await model.decodeIds(opts.ids, settings);
    out.ids.forEach((ids, i) => {
      const line = { input: opts.ids[i], ids, ms_per_token: out.msPerToken, ...info };
      if (out.logProbs) line.log_probs = out.logProbs[i];
      console.log(JSON.stringify(line));
    });
  } else if (opts.texts.length) {
    for (const line of await model.run(opts.texts, settings))
      console.log(JSON.stringify({ ...line, ...info }));
  }
  if (model.ignored.length) {
    console.error(
      `note: greedy decoding only; generation_config.json's ${model.ignored.join(", ")} not applied`,
    );
  }
  await model.release();
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e) => {
    console.error(`error: ${e.message ?? e}`);
    process.exitCode = 1;
  },
);
