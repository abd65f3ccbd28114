#!/usr/bin/env node
// Decoding an edgeformer package from the command line, one JSON line per input:
//
//   node runtime/js/cli.mjs PACKAGE [options] [--ids 1,2,3 ...] [TEXT ...]
//   echo "A man is riding a bike." | node runtime/js/cli.mjs m30k-en-de --format text
//
// PACKAGE is a package folder or a bundled package's name (m30k-en-de, shakespeare). Each TEXT
// is a source sentence (encoder-decoder) or a prompt (decoder-only); without TEXTs or --ids,
// the lines of stdin are the inputs. Each --ids is one input as token ids (a source ends in
// EOS, as the Python runtime's translate_ids expects). Inputs are decoded as one batch. A multilingual translator takes --source-lang / --target-lang
// (its tokenizer's codes: eng_Latn, deu_Latn; --languages lists them; with --ids, which are
// sources in the model's frame already, --target-lang alone). Output line (--format jsonl, the
// default): {"input", "ids", "text", "ms_per_token", ...} (with --n-best: "hypotheses"); with
// --format text, the text alone, one line per input (--n-best: "index<TAB>score<TAB>text" lines,
// as the Python CLI). The generation options are the Python CLI's, named by the
// contract (GenerationOptions' fields as --kebab-case flags; --beam and --sample as there).
// Exit status: 0, or 2 with one line "error: ..." for a package or a request it refuses.
import { CONTRACT, PackageError, UNSUPPORTED_OPTIONS, loadPackage } from "./index.mjs";

const OPTIONS = CONTRACT.generation_options;
const kebab = (s) => `--${s.replace(/_/g, "-")}`;
const FLAGS = { "--beam": "num_beams", "--sample": "sampling" };
for (const name of Object.keys(OPTIONS)) FLAGS[kebab(name)] = name;
// the options this runtime refuses still parse (and are refused by name), but are not offered
const OFFERED = Object.keys(FLAGS).filter((f) => !UNSUPPORTED_OPTIONS.includes(FLAGS[f]));
const FORMATS = ["jsonl", "text"];

const HELP = `usage: node cli.mjs PACKAGE [--backend node|wasm|webgpu] [--variant auto|fp32|int8|int4|...]
                    [--cache auto|inplace|refeed] [--threads N] [--spinning] [--scores] [--n-best]
                    [--stream] [--chat] [--target-prefix TEXT] [--source-lang CODE] [--target-lang CODE]
                    [--truncate] [--languages] [--format jsonl|text] [--ids 1,2,3 ...] [TEXT ...]
PACKAGE: a package folder, or a bundled package's name (m30k-en-de, shakespeare)
TEXT: the inputs (default: the lines of stdin)
generation options: ${OFFERED.join(" ")}`;

/** The lines of stdin, each one input (a last empty line after the final newline dropped). */
async function stdinLines() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8");
  const lines = text.split(/\r?\n/);
  if (lines.at(-1) === "") lines.pop();
  return lines;
}

function parse(argv) {
  const opts = { ids: [], texts: [], gen: {} };
  const value = (i, flag) => {
    if (i >= argv.length) throw new RangeError(`${flag} needs a value`);
    return argv[i];
  };
  const int = (text, flag) => {
    if (!/^\d+$/.test(text)) throw new RangeError(`${flag} ${text}: expected a whole number`);
    return Number(text);
  };
  // a seed above 2^53 stays exact (a BigInt): numpy's draws for the seed written
  const seed = (text, flag) => {
    const n = int(text, flag);
    return Number.isSafeInteger(n) ? n : BigInt(text);
  };
  const real = (text, flag) => {
    if (text.trim() === "" || !Number.isFinite(Number(text))) throw new RangeError(`${flag} ${text}: expected a number`);
    return Number(text);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const name = FLAGS[a] ?? (a.startsWith("--no-") ? FLAGS[`--${a.slice(5)}`] : undefined);
    if (a === "-h" || a === "--help") opts.help = true;
    else if (a === "--backend") opts.backend = value(++i, a);
    else if (a === "--variant") opts.variant = value(++i, a);
    else if (a === "--cache") opts.cache = value(++i, a);
    else if (a === "--threads") opts.threads = int(value(++i, a), a);
    else if (a === "--spinning") opts.spinning = true;
    else if (a === "--scores") opts.scores = true;
    else if (a === "--n-best") opts.nbest = true;
    else if (a === "--stream") opts.stream = true;
    else if (a === "--chat") opts.chat = true;
    else if (a === "--target-prefix") opts.targetPrefix = value(++i, a);
    else if (a === "--source-lang") opts.sourceLang = value(++i, a);
    else if (a === "--target-lang") opts.targetLang = value(++i, a);
    else if (a === "--truncate") opts.truncate = true;
    else if (a === "--languages") opts.languages = true;
    else if (a === "--format") {
      opts.format = value(++i, a);
      if (!FORMATS.includes(opts.format)) throw new RangeError(`--format ${opts.format}: expected ${FORMATS.join(" or ")}`);
    }
    else if (a === "--ids")
      opts.ids.push(
        value(++i, a)
          .split(",")
          .map((x) => int(x.trim(), a)),
      );
    else if (name !== undefined) {
      const kind = OPTIONS[name].kind;
      if (kind === "bool") opts.gen[name] = !a.startsWith("--no-");
      else if (kind === "list") (opts.gen[name] ??= []).push(value(++i, a));
      else if (name === "seed") opts.gen[name] = seed(value(++i, a), a);
      else if (kind.startsWith("int")) opts.gen[name] = int(value(++i, a), a);
      else if (kind.startsWith("str") || kind.startsWith("dict")) opts.gen[name] = value(++i, a);
      else opts.gen[name] = real(value(++i, a), a);
    } else if (a.startsWith("--")) throw new RangeError(`unknown option ${a}\n${HELP}`);
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
  if (opts.ids.length && opts.texts.length) throw new RangeError("give --ids or texts, not both");
  if (!opts.ids.length && !opts.texts.length && !opts.languages) {
    if (process.stdin.isTTY) throw new RangeError("give the inputs as TEXT arguments, --ids, or lines on stdin");
    opts.texts = await stdinLines();
  }
  const text = opts.format === "text";
  const { backend, variant, cache, threads, spinning } = opts;
  const model = await loadPackage(opts.package, { backend, variant, cache, threads, spinning });
  model.options(opts.gen); // options checked before anything runs
  const langs = { sourceLang: opts.sourceLang ?? null, targetLang: opts.targetLang ?? null };
  if (opts.languages) {
    console.log(JSON.stringify({ languages: model.languages }));
    await model.release();
    return 0;
  }
  const translating = model.family === "encoder-decoder";
  if (!translating && (langs.sourceLang !== null || langs.targetLang !== null)) {
    throw new RangeError("--source-lang / --target-lang are for translators");
  }
  if (opts.ids.length && langs.sourceLang !== null) {
    throw new RangeError("--source-lang applies to texts (--ids are sources in the model's frame already)");
  }
  // an unknown code: one error before anything is decoded (the Python CLI's check)
  if (translating && !opts.ids.length) model.checkLanguages(langs.sourceLang, langs.targetLang);
  const settings = { ...opts.gen, scores: opts.scores, ...langs, truncate: opts.truncate };
  if (opts.targetPrefix !== undefined) settings.targetPrefix = opts.texts.map(() => opts.targetPrefix);
  const info = { variant: model.variant, backend: model.backend, cache: model.cacheMode };
  const hyps = (h) => h.map((x) => ({ ids: x.tokens ?? x.ids, text: x.text, score: x.score, log_probs: x.logProbs ?? x.log_probs }));
  if (opts.ids.length) {
    const { sourceLang, targetLang, truncate, ...low } = settings;
    if (targetLang !== null) low.targetPrefix = opts.ids.map(() => model.forcedIds(targetLang));
    const out = await model.decodeIds(opts.ids, low);
    out.ids.forEach((ids, i) => {
      if (text) return console.log(ids.join(" ")); // ids in, ids out
      const line = { input: opts.ids[i], ids, ms_per_token: out.msPerToken, ...info };
      if (out.logProbs) line.log_probs = out.logProbs[i];
      if (opts.nbest) line.hypotheses = hyps(out.hypotheses[i]);
      console.log(JSON.stringify(line));
    });
  } else if (opts.chat) {
    const messages = opts.texts.map((content, i) => ({ role: i % 2 ? "assistant" : "user", content }));
    const reply = await model.chat(messages, opts.gen);
    console.log(text ? reply : JSON.stringify({ messages, text: reply, ...info }));
  } else if (opts.stream) {
    for (const text of opts.texts) {
      for await (const piece of model.stream(text, settings)) process.stdout.write(piece);
      process.stdout.write("\n");
    }
  } else if (opts.texts.length) {
    (await model.run(opts.texts, settings)).forEach((line, i) => {
      const { hypotheses, ...rest } = line;
      if (!text) console.log(JSON.stringify({ ...rest, ...(opts.nbest ? { hypotheses } : {}), ...info }));
      else if (!opts.nbest) console.log(line.text);
      else for (const h of hypotheses) console.log(`${i}\t${h.score.toFixed(4)}\t${h.text}`);
    });
  }
  if (model.ignored.length) {
    console.error(`note: generation_config.json's ${model.ignored.join(", ")} not applied`);
  }
  await model.release();
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e) => {
    // a package or a request refused: one line, exit 2 (as the Python CLI); anything else is a
    // bug of this runtime: exit 1
    const clear = e instanceof PackageError || e instanceof RangeError;
    console.error(`error: ${String(e.message ?? e).split("\n")[0]}`);
    process.exitCode = clear ? 2 : 1;
  },
);
