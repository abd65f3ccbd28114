// edgeformer-runtime: an edgeformer model package decoded in JavaScript, as the Python runtime
// (edgeformer.runtime) decodes it: the same checks of the package (one contract, contract.mjs,
// generated from edgeformer.core), the same decoding (decoding.mjs: greedy, beam search,
// sampling with numpy's seeded generator, penalties, prefixes, stop strings), on either
//   - onnxruntime-node  (backend "node": native CPU build, Node.js only), or
//   - onnxruntime-web   (backend "wasm": WebAssembly, or "webgpu": in a browser or in Node.js).
//
//   import { loadPackage } from "edgeformer-runtime";
//   const model = await loadPackage("packages/m30k", { backend: "node" });
//   const [out] = await model.run(["A man is riding a bike."], { numBeams: 4 });  // {ids, text, ...}
//   const ids = await model.generateIds([[5, 9, 14]], { maxNewTokens: 20, sampling: true, seed: 0 });
//
// The KV cache follows the package's cache contract: one preallocated (B, G, M, D) buffer per
// layer and kind; the decoder reads `past_key_values.X` and writes `present.X`. cache "inplace"
// passes the same tensor as that input and as the pre-allocated output (onnxruntime-node wraps
// both around its memory, so GroupQueryAttention writes the new entries in place: no copy);
// cache "refeed" feeds the `present.X` outputs of a call as the next call's `past_key_values.X`.
// onnxruntime-web never writes pre-allocated CPU outputs (they stay zeros, no error: measured
// with 1.30.0), so "wasm" always re-feeds. docs/ship-node.md has the measurements.

import { Tokenizer } from "@huggingface/tokenizers";
import {
  CONTRACT, PackageError, checkConfig, checkGraphSizes, checkNames, checkOrtVersion, checkThreads, fileSource, forcedFirstToken,
  generationSettings, isNode, onnxFacts, parseJson, readConfig, sha256,
} from "./package.mjs"; // prettier-ignore
import { decode, fitNewTokens, makeOptions, optionKeys } from "./decoding.mjs";
import { Translation, perText } from "./languages.mjs";
import { regexProblem } from "./regex.mjs";

export { PackageError, CONTRACT };
export { UNSUPPORTED_OPTIONS, makeOptions } from "./decoding.mjs";
export { regexProblem } from "./regex.mjs";
export { Embedder, Reranker, loadEmbedder } from "./embed.mjs";
export const PACKAGE_FORMAT = CONTRACT.package_format;
export const FORMAT_VERSION = CONTRACT.format_version;
export const READABLE_VERSIONS = CONTRACT.readable_versions;
export const VARIANTS = CONTRACT.variants;
const FILES = CONTRACT.files;
const WEB_VARIANTS = Object.keys(CONTRACT.web_variants);
export const BACKENDS = ["node", "wasm", "webgpu"];

/** (variant, why) for variant "auto": the Python runtime's policy (core/variants.py). */
export function pickVariant(cfg, maxQualityLoss = null) {
  const { max_quality_loss, max_bleu_loss, max_perplexity_increase } = CONTRACT.variant_auto;
  const measured = {};
  for (const [k, v] of Object.entries(cfg.variants ?? {})) {
    if (v.measured && !WEB_VARIANTS.includes(k)) measured[k] = v.measured; // never auto's pick
  }
  if (!measured.fp32) return ["fp32", "no export measurements in this package: fp32"];
  const ref = measured.fp32;
  const heldOut = (m) =>
    ("bleu" in m && "bleu" in ref && ref.bleu - m.bleu > max_bleu_loss) ||
    ("perplexity" in m && "perplexity" in ref && m.perplexity / ref.perplexity - 1 > max_perplexity_increase);
  const hasHeldOut = CONTRACT.held_out_keys.some((k) => k in ref);
  const bound = maxQualityLoss ?? (hasHeldOut ? 1 : max_quality_loss);
  const ok = Object.keys(measured).filter(
    (k) => !heldOut(measured[k]) && 1 - measured[k].agreement <= bound + 1e-12,
  );
  if (!ok.length) return ["fp32", "no variant within the bounds: fp32"];
  const best = fastestWithinMargin(Object.fromEntries(ok.map((k) => [k, measured[k].ms_per_token])));
  return [
    best,
    `${best}: fastest at export (${measured[best].ms_per_token.toFixed(3)} ms/token, ties within ` +
      `${Math.round(CONTRACT.variant_auto.speed_margin * 100)}% going to the more exact) within the quality bounds`,
  ];
}

/** Of the variants within speed_margin of the fastest, the first in the contract's preference
 *  (then by name): core/variants.py's fastest_within_margin. */
function fastestWithinMargin(msPerToken) {
  const { speed_margin, preference } = CONTRACT.variant_auto;
  const fastest = Math.min(...Object.values(msPerToken));
  const rank = (k) => (preference.includes(k) ? preference.indexOf(k) : preference.length);
  return Object.keys(msPerToken)
    .filter((k) => msPerToken[k] <= fastest * (1 + speed_margin))
    .sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0))[0];
}


// ---- tensors ----------------------------------------------------------------------------------

const int64 = (ort, rows, dims) => new ort.Tensor("int64", BigInt64Array.from(rows.flat(), BigInt), dims);
const zeros = (ort, dims) =>
  new ort.Tensor("float32", new Float32Array(dims.reduce((a, b) => a * b, 1)), dims);

/** Right-padded (B, T) ids and 1/0 mask of id lists. */
function pad(seqs, padId) {
  const T = Math.max(...seqs.map((s) => s.length));
  const ids = seqs.map((s) => [...s, ...Array(T - s.length).fill(padId)]);
  const mask = seqs.map((s) => [...Array(s.length).fill(1), ...Array(T - s.length).fill(0)]);
  return { ids, mask, T };
}

/** GroupQueryAttention's lengths of rows that hold lengths[b] tokens (format 5's encoder-decoder
 * step): seqlens_k (B,) = lengths - 1 and total_sequence_length () = the longest, int32. */
function gqaLengths(ort, lengths) {
  return [
    new ort.Tensor("int32", Int32Array.from(lengths, (n) => n - 1), [lengths.length]),
    new ort.Tensor("int32", Int32Array.of(Math.max(...lengths)), []),
  ];
}

/** (B, longest) mask: row b's first lengths[b] entries 1. */
function lengthMask(ort, lengths) {
  const longest = Math.max(...lengths);
  return int64(
    ort,
    lengths.map((n) => Array.from({ length: longest }, (_, j) => (j < n ? 1 : 0))),
    [lengths.length, longest],
  );
}

// ---- the model ----------------------------------------------------------------------------------

const INPLACE_ON_WEB =
  'cache "inplace" on onnxruntime-web: it leaves pre-allocated CPU outputs unwritten (the cache ' +
  'and the logits stay zeros, no error; measured with 1.30.0): use cache "refeed" (the default)';

/**
 * Load a package, checked as the Python runtime checks it (runtime/package.py, model.py).
 * options:
 *   backend  "node" (onnxruntime-node) | "wasm" (onnxruntime-web) | "webgpu" (onnxruntime-web's
 *            WebGPU provider, wasm for what it does not run); default: "node" in Node.js
 *   ort      the onnxruntime module to use (default: imported by backend name)
 *   variant  "fp32" (default, as the Python runtime's) | "auto" (the Python runtime's policy; fp32
 *            on wasm) | "int8" | "int4" | "int8-dynamic" | "int8-web" | "int4-web" | "gguf"
 *   cache    "auto" (in place on node, re-fed on wasm) | "inplace" | "refeed"
 *   threads  intra-op threads (node: per session; wasm: ort.env.wasm.numThreads, set once)
 *   spinning let idle intra-op threads spin (default false: see docs/ship-node.md)
 *   verify   check every file against config.json's sha256 (default true; in Node every listed
 *            file at load, as Python; over fetch each file as it is read)
 */
export async function loadPackage(source, options = {}) {
  const backend = options.backend ?? (isNode ? "node" : "wasm");
  if (!BACKENDS.includes(backend)) throw new RangeError(`backend ${backend}: expected ${BACKENDS.join(", ")}`);
  if (backend === "node" && !isNode) throw new RangeError('backend "node" needs Node.js: use "wasm" in a browser');
  const cache = options.cache ?? "auto";
  if (!["auto", "inplace", "refeed"].includes(cache)) throw new RangeError(`cache ${cache}: expected auto, inplace or refeed`);
  if (backend !== "node" && cache === "inplace") throw new RangeError(INPLACE_ON_WEB);
  const threads = checkThreads(options.threads);
  const ortModule = { node: "onnxruntime-node", wasm: "onnxruntime-web", webgpu: "onnxruntime-web/webgpu" }[backend];
  const ort = options.ort ?? (await import(ortModule));
  if (backend === "webgpu" && !globalThis.navigator?.gpu) {
    throw new RangeError('backend "webgpu": this JavaScript environment has no WebGPU (navigator.gpu)');
  }
  const files = await fileSource(source);
  const where = `model package ${files.name}`;
  const { cfg, model } = checkConfig(await readConfig(files, where), `${where}: ${FILES.config}`);
  await checkNames(cfg, files, where);
  const verify = options.verify ?? true;
  const mismatch = (file) => new PackageError(`${where}: checksum mismatch for ${file} (file changed or corrupt)`);
  const checked = new Set();
  const read = async (file) => {
    const bytes = await files.read(file);
    if (verify && !checked.has(file) && (await sha256(bytes)) !== cfg.files[file]) throw mismatch(file);
    return bytes;
  };
  const graphFacts = {};
  if (files.local) {
    // as the Python runtime: every listed file present and checked, every graph's external data
    // listed, before any graph is loaded
    for (const file of Object.keys(cfg.files)) {
      const digest = await files.sha256(file);
      if (verify && digest !== cfg.files[file]) throw mismatch(file);
      checked.add(file);
    }
    for (const v of Object.values(cfg.variants)) {
      for (const file of Object.values(v.files)) {
        if (file.endsWith(CONTRACT.ort_suffix) || file in graphFacts) continue;
        graphFacts[file] = graphFactsOf(await read(file), file, cfg, where);
      }
    }
  }

  let variant = options.variant ?? "fp32";
  let variantReason = "asked for";
  if (variant === "auto" && backend !== "node") {
    // export measured native speeds; on wasm MatMulNBits ran 12-21x slower than fp32's MatMul
    // (docs/ship-node.md), so the fastest there is fp32
    [variant, variantReason] = ["fp32", "wasm: fp32 (quantized matmuls are slower there)"];
  } else if (variant === "auto") {
    [variant, variantReason] = pickVariant(cfg, options.maxQualityLoss ?? null);
  }
  const entry = cfg.variants[variant];
  if (!entry) throw new PackageError(`package ${files.name} has no variant ${JSON.stringify(variant)}; it has ${JSON.stringify(Object.keys(cfg.variants))}`);

  checkOrtVersion(ort, backend, cfg, where);

  // generation_config.json: the package's default decoding settings, checked as the Python
  // runtime checks them (a setting GenerationOptions refuses names the file)
  let defaults;
  let ignored = [];
  let forcedFirst = null; // an encoder-decoder's forced_bos_token_id (BART's <s>)
  const genWhere = `${where}: ${FILES.generation_config}`;
  {
    let settings = {};
    if (FILES.generation_config in cfg.files) {
      const data = parseJson(await read(FILES.generation_config), genWhere);
      ({ settings, ignored } = generationSettings(data, cfg, genWhere));
      if (cfg.family === "encoder-decoder") forcedFirst = forcedFirstToken(data, model.vocab_size, genWhere);
    }
    try {
      defaults = makeOptions({}, settings);
    } catch (e) {
      throw new PackageError(`${genWhere}: ${e.message}`);
    }
  }

  // tokenizers: hostile ones (a regex that could hang encoding, ids beyond the vocabulary) are
  // refused as in Python; one that the JS library cannot read, or that encodes export's probe
  // differently, leaves the package usable with ids (text in or out is then an error that says so)
  const tokenizers = {};
  let tokenizerError = null;
  for (const file of [FILES.tokenizer, FILES.source_tokenizer]) {
    if (!(file in cfg.files)) continue;
    const data = parseJson(await read(file), `${where}: ${file}`);
    const risky = regexProblem(data);
    if (risky) throw new PackageError(`${where}: ${file} cannot be read (${risky})`);
    let tok;
    try {
      tok = new Tokenizer(data, {});
    } catch (e) {
      tokenizerError ??= `${file} cannot be read by @huggingface/tokenizers (${String(e.message ?? e).slice(0, 200)})`;
      continue;
    }
    const top = Math.max(tokenIds(data), ...Object.values(tok.get_vocab(true)));
    if (top >= model.vocab_size) {
      throw new PackageError(`${where}: ${file} has token id ${top}, beyond the model's vocabulary of ${model.vocab_size}`);
    }
    tokenizers[file] = tok;
  }
  // a translator's source frame and languages (config.json's task: core/languages.py)
  const translation = Translation.fromTask(cfg.task ?? {}, cfg.special_tokens.eos_id, model.vocab_size, where);
  if (FILES.golden in cfg.files) {
    const golden = parseJson(await read(FILES.golden), `${where}: ${FILES.golden}`);
    const probes = golden?.probes ?? [];
    if (!Array.isArray(probes)) throw new PackageError(`${where}: ${FILES.golden}: probes must be a list`);
    for (const probe of probes) {
      const tok = tokenizers[probe?.file];
      if (!tok || typeof probe.text !== "string" || !Array.isArray(probe.ids)) continue;
      const ids = tok.encode(probe.text, { add_special_tokens: false }).ids;
      if (ids.length !== probe.ids.length || ids.some((x, i) => x !== probe.ids[i])) {
        tokenizerError ??= `${probe.file} does not encode export's probe text as the Python tokenizers library did`;
      }
    }
  }

  // sessions
  if (backend !== "node" && threads !== undefined) ort.env.wasm.numThreads = threads;
  // idle intra-op threads do not spin unless options.spinning: on this project's busy 2-core host
  // spinning made decoding 1.7-2.2x slower (docs/ship-node.md; the Python runtime spins the
  // decoder's threads by default)
  const providers = { node: ["cpu"], wasm: ["wasm"], webgpu: ["webgpu", "wasm"] }[backend];
  // WebGPU: onnxruntime-web 1.30's WebGPU provider has no MultiHeadAttention with a
  // key_padding_mask (the encoder's self-attention: "not implemented for webgpu" at run, measured
  // in Chromium), so an encoder-decoder's encoder runs on wasm and its decoder on WebGPU
  const sessionOptions = (graph) => ({
    executionProviders: backend === "webgpu" && graph === "encoder" ? ["wasm"] : providers,
    graphOptimizationLevel: "all",
    executionMode: "sequential",
    logSeverityLevel: options.logSeverityLevel ?? 3, // 0: verbose (which provider runs each node)
    ...(backend === "node" && threads !== undefined ? { intraOpNumThreads: threads } : {}),
    extra: {
      // the graphs keep residual Add + LayerNormalization unfused on purpose (runtime/session.py)
      optimization: { disable_specified_optimizers: "SkipLayerNormFusion" },
      session: { intra_op: { allow_spinning: options.spinning ? "1" : "0" } },
    },
  });
  const graphs = {};
  // the variant's weights file (null: ORT-format graphs, `export --format ort`, hold their own)
  const weights = entry.weights && backend !== "node" ? await read(entry.weights) : null;
  let headSize = null;
  for (const g of CONTRACT.graph_names[cfg.family]) {
    const file = entry.files[g];
    const bytes = backend !== "node" || !(file in graphFacts) ? await read(file) : null;
    if (bytes && !file.endsWith(CONTRACT.ort_suffix)) graphFacts[file] ??= graphFactsOf(bytes, file, cfg, where);
    let session;
    try {
      if (backend === "node") {
        session = await ort.InferenceSession.create(files.path(file), sessionOptions(g));
      } else {
        // onnxruntime-web cannot open files: the weights are handed over as externalData
        const externalData = weights ? [{ path: entry.weights, data: weights }] : [];
        session = await ort.InferenceSession.create(bytes, { ...sessionOptions(g), externalData });
      }
    } catch (e) {
      throw new PackageError(
        `${where}: onnxruntime cannot load the ${variant} ${g} graph: ${String(e.message ?? e).split("\n")[0].slice(0, 300)}`,
      );
    }
    const want = cfg.graphs[g];
    const same = (a, b) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());
    if (!same(session.inputNames, want.inputs) || !same(session.outputNames, want.outputs)) {
      throw new PackageError(`${where}: ${g} graph's inputs/outputs do not match the package contract`);
    }
    const ios = [...(session.inputMetadata ?? []), ...(session.outputMetadata ?? [])];
    const D = checkGraphSizes(model, g, graphFacts[file]?.metadata ?? null, ios, where);
    if (g === "decoder") headSize = D;
    graphs[g] = session;
  }
  model.cache_head_size = headSize ?? model.head_dim;
  const cacheMode = cache === "auto" ? (backend === "node" ? "inplace" : "refeed") : cache;
  return new Model({
    ort, backend, cfg, model, variant, variantReason, defaults, ignored, tokenizers, tokenizerError, graphs, cacheMode,
    where, translation, forcedFirst, tokenizerConfig: FILES.tokenizer_config in cfg.files ? parseJson(await read(FILES.tokenizer_config), `${where}: ${FILES.tokenizer_config}`) : null,
  }); // prettier-ignore
}

/** The largest token id a tokenizer.json declares (its model's vocabulary, added tokens). */
function tokenIds(data) {
  let top = -1;
  const vocab = data?.model?.vocab;
  if (Array.isArray(vocab)) top = vocab.length - 1; // Unigram: [piece, score] by id
  else if (vocab && typeof vocab === "object") for (const v of Object.values(vocab)) if (typeof v === "number" && v > top) top = v;
  for (const t of Array.isArray(data?.added_tokens) ? data.added_tokens : []) if (typeof t?.id === "number" && t.id > top) top = t.id;
  return top;
}

/** A graph's external data files (each must be listed) and metadata, from its bytes. */
function graphFactsOf(bytes, file, cfg, where) {
  let facts;
  try {
    facts = onnxFacts(bytes);
  } catch (e) {
    return { locations: new Set(), metadata: null }; // not protobuf: onnxruntime's load says so
  }
  for (const data of facts.locations) {
    if (!(data in cfg.files)) {
      throw new PackageError(`${where}: ${file} reads the weights file ${JSON.stringify(data)}, which is not in the checksum list`);
    }
  }
  return facts;
}

export class Model {
  constructor(f) {
    Object.assign(this, f);
    this.family = f.cfg.family;
    const sp = f.cfg.special_tokens;
    this.padId = sp.pad_id;
    this.bosId = sp.bos_id;
    this.eosId = sp.eos_id;
    this.tokenizer = f.tokenizers[FILES.tokenizer] ?? null;
    this.sourceTokenizer = f.tokenizers[FILES.source_tokenizer] ?? this.tokenizer;
    this.maxLen = f.model.max_len;
    this.vocabSize = f.model.vocab_size;
    // never chosen (the Python runtime's banned_ids): padding and BOS, unless one also ends the
    // output (NLLB's and mBART-50's decoder start is their EOS; GPT-2's one <|endoftext|>) or is
    // a language code (mBART's fine-tunes start from their target language)
    const allowed = new Set([this.eosId, ...(f.defaults?.end_token ?? []).filter((t) => Number.isInteger(t)),
      ...Object.values(f.translation.languages)]);
    this.banned = [...new Set([this.padId, this.bosId])].filter((i) => !allowed.has(i));
  }

  /** The sessions' resources (onnxruntime-web keeps them in the wasm heap). */
  async release() {
    for (const s of Object.values(this.graphs)) await s.release();
  }

  /** The package's defaults (generation_config.json) under `options` (camelCase or snake_case
   * GenerationOptions names), validated: a RangeError names the option. */
  options(options = {}) {
    const { scores, cache, targetPrefix, onToken, stopTest: _, truncate, ...rest } = options;
    for (const k of LANGUAGE_KEYS) delete rest[k];
    return makeOptions(this.defaults, rest);
  }

  // ---- languages (a multilingual translator's codes: config.json's task) -------------------

  /** The model's language codes (sourceLang / targetLang); [] for a one-pair model. */
  get languages() {
    return [...this.translation.codes];
  }

  /** RangeError (naming close matches) for a code the model does not know, or a missing target
   * language a multilingual model needs (the Python runtime's check_languages). */
  checkLanguages(sourceLang = null, targetLang = null) {
    this.translation.frame(sourceLang);
    this.forcedIds(targetLang);
  }

  /** The tokens forced after the decoder start of a translation into `targetLang`: its
   * language token, else generation_config.json's forced_bos_token_id (BART's <s>), else none. */
  forcedIds(targetLang = null) {
    if (this.family !== "encoder-decoder") throw new RangeError(`${this.where} is decoder-only: languages are for translations`);
    return this.translation.targetPrefix(targetLang, this.forcedFirst, this.bosId);
  }

  /** A text's source ids in the model's frame: its tokens between the task's source_prefix and
   * source_suffix (default: + EOS; a converted model's own: BART's <s> first, NLLB's language
   * token, in `sourceLang` where given); [] for empty or whitespace-only text. A RangeError for
   * an unknown language, or more than max_len ids (or maxInputLength, when set; EOS included)
   * without `truncate` (which cuts the text's tokens to fit), as the Python runtime's source_ids. */
  sourceIds(text, options = {}) {
    if (typeof text !== "string") throw new RangeError(`texts must be strings (got ${typeof text})`);
    if (this.family !== "encoder-decoder") throw new RangeError(`${this.where} is decoder-only: sources are for translations`);
    const [head, tail] = this.translation.frame(languageArgs(options).source);
    let ids = this.encode(text, this.sourceTokenizer);
    if (!ids.length) return [];
    const asked = options.maxInputLength ?? options.max_input_length ?? 0;
    const limit = Math.min(asked || this.maxLen, this.maxLen);
    const extra = head.length + tail.length;
    if (options.truncate) ids = ids.slice(0, Math.max(limit - extra, 1));
    else if (ids.length + extra > limit) {
      const what = limit < this.maxLen ? `max_input_length ${limit}` : `the model's max_len ${this.maxLen}`;
      throw new RangeError(
        `source of ${ids.length + extra} tokens (with EOS) is longer than ${what} (truncate: true or --truncate cuts longer ones)`,
      );
    }
    return [...head, ...ids, ...tail];
  }

  // ---- text --------------------------------------------------------------------------------

  /** Text -> ids, as the Python `tokenizers` library encodes it: no special tokens, or with
   * those the tokenizer adds (an LM's prompt: a converted Llama's <s>, as the Python runtime). */
  encode(text, tokenizer = this.tokenizer, addSpecialTokens = false) {
    this.checkTokenizer();
    if (!text.trim()) return [];
    return tokenizer.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  }

  /** Ids -> text (special tokens skipped; no clean-up of spaces: the Python library's decode). */
  decode(ids) {
    this.checkTokenizer();
    if (!ids.length) return "";
    return this.tokenizer.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  }

  checkTokenizer() {
    const why = this.tokenizerError ?? (this.tokenizer ? null : `the package has no ${FILES.tokenizer}`);
    if (why) throw new PackageError(`${this.where}: ${why}: pass token ids (translateIds / generateIds, --ids)`);
  }

  /** The text that `ids` add after `prompt` (its leading space included), as the Python runtime. */
  continuation(prompt, ids) {
    return this.decode([...prompt, ...ids]).slice(this.decode(prompt).length);
  }

  /** Options with end_token strings and suppress_sequences texts as ids (Model.resolve). */
  resolve(o) {
    const V = this.vocabSize;
    const suppress = o.suppress_sequences.map((s) => {
      const ids = typeof s === "string" ? this.encode(s) : s;
      if (!ids.length || Math.max(...ids) >= V) throw new RangeError(`suppress_sequences: ${JSON.stringify(s)} has no token ids in the vocabulary`);
      return ids;
    });
    const ends = o.end_token.map((t) => {
      let i = typeof t === "string" ? (this.tokenizer?.token_to_id(t) ?? null) : t;
      if ((i === null || i === undefined) && typeof t === "string" && /^\d+$/.test(t)) i = Number(t);
      if (i === null || i === undefined || !(i >= 0 && i < V)) throw new RangeError(`end_token ${JSON.stringify(t)} is not a token of the vocabulary`);
      return i;
    });
    if (o.forced_end_token !== null && o.forced_end_token >= V) {
      throw new RangeError(`forced_end_token ${o.forced_end_token} is not a token of the vocabulary`);
    }
    return { ...o, suppress_sequences: suppress, end_token: ends };
  }

  /** The ids of a text input: a source's (sourceIds: null for an empty source, which
   * translates to ""), a prompt its tokens with the special tokens its tokenizer adds (BOS alone
   * when empty). */
  inputIds(t, options = {}) {
    if (typeof t !== "string") throw new RangeError(`texts must be strings (got ${typeof t})`);
    if (this.family === "encoder-decoder") {
      const ids = this.sourceIds(t, options);
      return ids.length ? ids : null;
    }
    const ids = this.encode(t, this.tokenizer, true);
    return ids.length ? ids : [this.bosId];
  }

  /** What run() and stream() decode for `texts`, as the Python runtime's text API prepares it:
   * {o: the options, inputs (null: an empty source), live (the rows decoded), prefixes (per
   * text: the forced first tokens, a target language or forced_bos_token_id, then
   * targetPrefix), settings (decodeIds's options for the live rows: their prefixes, and max /
   * min new tokens counting the forced tokens, as transformers counts them)}. */
  request(texts, options) {
    if (!Array.isArray(texts)) throw new RangeError("texts must be a list of strings");
    const ed = this.family === "encoder-decoder";
    const o = this.options(options);
    const { source, target } = languageArgs(options);
    if (!ed && (source !== null || target !== null)) throw new RangeError("sourceLang / targetLang are for translations");
    const forced = ed ? perText(target, texts.length, "target_lang").map((t) => this.forcedIds(t)) : null;
    let prefixes = options.targetPrefix ?? null;
    if (prefixes !== null) {
      if (!ed) throw new RangeError("targetPrefix is for translations (an LM's prompt is its prefix)");
      if (!Array.isArray(prefixes) || prefixes.length !== texts.length) throw new RangeError(`targetPrefix must list one prefix per text`);
      prefixes = prefixes.map((p) => (p === null || p === undefined ? [] : typeof p === "string" ? this.encode(p) : p));
    }
    if (forced?.some((f) => f.length)) prefixes = forced.map((f, i) => [...f, ...(prefixes ? prefixes[i] : [])]);
    const langs = ed ? perText(source, texts.length, "source_lang") : null;
    const limits = { truncate: !!options.truncate, maxInputLength: o.max_input_length };
    const inputs = texts.map((t, i) => {
      if (!ed) return this.inputIds(t);
      try {
        return this.inputIds(t, { ...limits, sourceLang: langs[i] });
      } catch (e) {
        if (typeof t !== "string" || !(e instanceof RangeError || e instanceof PackageError)) throw e;
        throw new e.constructor(`texts[${i}]: ${e.message}`);
      }
    });
    // an empty source translates to "" (as in the Python runtime): only the others are decoded
    const live = inputs.map((ids, i) => (ids ? i : -1)).filter((i) => i >= 0);
    const kept = prefixes && live.map((i) => prefixes[i]);
    const settings = { ...options, targetPrefix: kept };
    const k = forced && live.length ? Math.min(...live.map((i) => forced[i].length)) : 0;
    if (k) {
      // max_new_tokens fitted to the positions left, then the forced tokens taken out of it
      const longest = Math.max(...kept.map((p) => p.length));
      if (longest >= this.maxLen) throw new RangeError(`a target prefix of ${longest} tokens leaves no room: the model's max_len is ${this.maxLen} target positions`);
      const [fitted] = fitNewTokens(o, this.maxLen - longest);
      for (const key of ["maxNewTokens", "max_new_tokens", "minNewTokens", "min_new_tokens"]) delete settings[key];
      settings.maxNewTokens = Math.max(fitted.max_new_tokens - k, 1);
      settings.minNewTokens = Math.max(fitted.min_new_tokens - k, 0);
    }
    return { o, inputs, live, prefixes, settings };
  }

  /** Texts -> [{input, ids, text, ms_per_token, hypotheses}] (a translation, or the continuation
   * of a prompt), as the Python runtime's text API. options: decodeIds's, and stop (strings
   * that end an output, cut before them), targetPrefix (a text or ids per input: forced first
   * tokens of a translation), sourceLang / targetLang (a multilingual translator's language
   * codes, e.g. "eng_Latn", "deu_Latn": one for all texts or one per text) and truncate (cut
   * sources longer than the model's max_len). */
  async run(texts, options = {}) {
    const ed = this.family === "encoder-decoder";
    const { o, inputs, live, prefixes, settings } = this.request(texts, options);
    const stops = o.stop;
    const bases = live.map((i) => (ed ? [] : inputs[i]));
    const skip = live.map((i) => (prefixes ? prefixes[i].length : 0));
    const stop = stops.length ? stopTest((ids) => this.decode(ids), stops, bases, skip) : null;
    const out = await this.decodeIds(
      live.map((i) => inputs[i]),
      { ...settings, stopTest: stop },
    );
    const lines = texts.map((input) => ({ input, ids: [], text: "", ms_per_token: out.msPerToken, hypotheses: [] }));
    const textOf = (j, ids) => {
      const i = live[j];
      const full = ed ? this.decode(ids) : this.continuation(inputs[i], ids);
      const start = ed && skip[j] ? this.decode(ids.slice(0, skip[j])).length : 0;
      return cutAtStop(full, stops, start);
    };
    live.forEach((i, j) => {
      const hyps = out.hypotheses[j];
      lines[i].hypotheses = hyps.map((h) => ({ text: textOf(j, h.tokens), ids: h.tokens, score: h.score, log_probs: h.logProbs ?? [] }));
      lines[i].ids = hyps[0]?.tokens ?? [];
      lines[i].text = lines[i].hypotheses[0]?.text ?? "";
      if (out.logProbs) lines[i].log_probs = out.logProbs[j];
    });
    return lines;
  }

  /** A text's output as pieces while it is decoded (greedy or sampling; beam search knows its
   * output only at the end: one piece). The pieces concatenate to run()'s text. */
  async *stream(text, options = {}) {
    const o = this.options(options);
    if (o.num_beams > 1) {
      yield (await this.run([text], options))[0].text;
      return;
    }
    const ed = this.family === "encoder-decoder";
    const { inputs, settings } = this.request([text], options);
    const input = inputs[0];
    if (input === null) return;
    const stops = o.stop;
    const base = ed ? [] : input;
    const stop = stops.length ? stopTest((ids) => this.decode(ids), stops, [base], [0]) : null;
    const queue = [];
    let wake = null;
    let finished = false;
    let failure = null;
    const ids = [];
    let shown = 0;
    let pending = "";
    let stopped = false;
    const emit = (final) => {
      const all = ed ? this.decode(ids) : this.continuation(input, ids);
      // a character split over tokens decodes as U+FFFD until it completes: held back
      const upto = final ? all.length : all.endsWith("\uFFFD") ? all.replace(/\uFFFD+$/, "").length : all.length;
      pending += all.slice(shown, Math.max(shown, upto));
      shown = Math.max(shown, upto);
      const cut = cutAtStop(pending, stops);
      if (cut.length < pending.length) {
        queue.push(cut);
        pending = "";
        stopped = true;
        return;
      }
      let hold = 0;
      if (!final) for (const s of stops) for (let k = 1; k <= Math.min(s.length, pending.length); k++) if (pending.endsWith(s.slice(0, k))) hold = Math.max(hold, k);
      if (pending.length - hold > 0) queue.push(pending.slice(0, pending.length - hold));
      pending = pending.slice(pending.length - hold);
    };
    const onToken = (rows, tokens) => {
      if (stopped || !tokens.length) return;
      ids.push(tokens[0]);
      emit(false);
      wake?.();
    };
    const done = this.decodeIds([input], { ...settings, onToken, stopTest: stop }).then(
      () => {
        if (!stopped) emit(true);
        finished = true;
        wake?.();
      },
      (e) => {
        failure = e;
        finished = true;
        wake?.();
      },
    );
    for (;;) {
      while (queue.length) {
        const piece = queue.shift();
        if (piece) yield piece;
      }
      if (finished) break;
      await new Promise((r) => (wake = r));
      wake = null;
    }
    await done;
    while (queue.length) {
      const piece = queue.shift();
      if (piece) yield piece;
    }
    if (failure) throw failure;
  }

  /** A conversation -> the prompt text the model was tuned on: tokenizer_config.json's chat
   * template rendered as transformers' apply_chat_template(add_generation_prompt=True). */
  async chatPrompt(messages, { addGenerationPrompt = true } = {}) {
    const tc = this.tokenizerConfig;
    const source = tc?.chat_template;
    if (typeof source !== "string") throw new PackageError(`${this.where}: the package has no chat template (${FILES.tokenizer_config})`);
    if (!Array.isArray(messages) || !messages.length || messages.some((m) => typeof m?.role !== "string")) {
      throw new RangeError("messages must be a non-empty list of {role, content} objects");
    }
    if (source.length > MAX_TEMPLATE_CHARS) throw new PackageError(`${this.where}: the chat template is longer than ${MAX_TEMPLATE_CHARS} characters`);
    const special = {};
    for (const k of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]) {
      const v = tc[k];
      if (v !== undefined && v !== null) special[k] = typeof v === "string" ? v : (v.content ?? "");
    }
    let text;
    try {
      text = await renderTemplate(source, {
        messages: messages.map((m) => Object.fromEntries(Object.entries(m).filter(([, v]) => v !== null && v !== undefined))),
        add_generation_prompt: addGenerationPrompt,
        ...special,
      });
    } catch (e) {
      throw new PackageError(`${this.where}: the chat template fails: ${String(e.message ?? e).slice(0, 200)}`);
    }
    if (text.length > MAX_PROMPT_CHARS) throw new PackageError(`${this.where}: the chat template's output is longer than ${MAX_PROMPT_CHARS} characters`);
    return text;
  }

  /** The assistant's reply to a conversation (the rendered prompt encoded without adding
   * special tokens: the template writes them), as Generator.chat. */
  async chat(messages, options = {}) {
    if (this.family !== "decoder-only") throw new RangeError(`${this.where} is encoder-decoder: chat is for language models`);
    const prompt = await this.chatPrompt(messages);
    const ids = this.encode(prompt);
    // answered from BOS alone, the conversation would be dropped: refused (runtime/chat.py's
    // EMPTY_CHAT_PROMPT)
    if (!ids.length) throw new PackageError(`${this.where}: ${EMPTY_CHAT_PROMPT}`);
    const o = this.options(options);
    const stop = o.stop.length ? stopTest((x) => this.decode(x), o.stop, [ids], [0]) : null;
    const out = await this.decodeIds([ids], { ...options, stopTest: stop });
    return cutAtStop(this.continuation(ids, out.ids[0]), o.stop);
  }

  // ---- ids ---------------------------------------------------------------------------------

  /** Source id lists (each ending in EOS) -> output id lists (no BOS / EOS). */
  async translateIds(sources, options = {}) {
    if (this.family !== "encoder-decoder") throw new RangeError(`${this.where} is decoder-only: use generateIds`);
    return (await this.decodeIds(sources, options)).ids;
  }

  /** Prompt id lists -> continuation id lists (no EOS). */
  async generateIds(prompts, options = {}) {
    if (this.family !== "decoder-only") throw new RangeError(`${this.where} is encoder-decoder: use translateIds`);
    return (await this.decodeIds(prompts, options)).ids;
  }

  /**
   * Decode a batch of id lists as edgeformer.runtime's *_ids_nbest: {ids (the best hypothesis
   * per input), hypotheses ([{tokens, score, logProbs}] per input, best first), logProbs (with
   * scores), msPerToken, steps}. options: GenerationOptions (camelCase or snake_case: maxNewTokens,
   * minNewTokens, numBeams, lengthPenalty, earlyStopping, numHypotheses, sampling, temperature,
   * topK, topP, seed, repetitionPenalty, noRepeatNgramSize, suppressSequences, endToken,
   * forcedEndToken, ignoreEos, ...) over the package's defaults; and scores (log-probabilities
   * of greedy / sampled tokens), cache ("inplace" | "refeed"), targetPrefix (ids per input:
   * forced first tokens of a translation, included in the output), onToken(rows, tokens)
   * (streaming: called with each step's new tokens, greedy and sampling), stopTest(row, tokens).
   */
  async decodeIds(inputs, options = {}) {
    if (!Array.isArray(inputs)) throw new RangeError("inputs must be a list of token id lists");
    let o = this.resolve(this.options(options));
    if (!inputs.length) return { ids: [], hypotheses: [], msPerToken: 0, steps: 0 };
    const V = this.vocabSize;
    for (const s of inputs) {
      if (!Array.isArray(s) || !s.length || s.length > this.maxLen) {
        throw new RangeError(`an input of ${s?.length} tokens: must be 1 .. the model's max_len ${this.maxLen}`);
      }
      if (o.max_input_length && s.length > o.max_input_length) throw new RangeError(`an input of ${s.length} tokens: more than max_input_length ${o.max_input_length}`);
      if (s.some((t) => !Number.isInteger(t) || t < 0 || t >= V)) throw new RangeError(`token ids must be integers in [0, ${V})`);
    }
    const ed = this.family === "encoder-decoder";
    const prefixes = options.targetPrefix ?? null;
    if (prefixes !== null) {
      if (!ed) throw new RangeError("targetPrefix is for translations");
      if (prefixes.length !== inputs.length) throw new RangeError(`${prefixes.length} target prefixes for ${inputs.length} sources`);
      for (const p of prefixes) if (!Array.isArray(p) || p.some((t) => !Number.isInteger(t) || t < 0 || t >= V)) throw new RangeError(`target prefix ids must be integers in [0, ${V})`);
    }
    const longest = Math.max(0, ...(prefixes ?? []).map((p) => p.length));
    if (longest >= this.maxLen) throw new RangeError(`a target prefix of ${longest} tokens leaves no room: the model's max_len is ${this.maxLen} target positions`);
    const { ids, mask, T } = pad(inputs, this.padId);
    // the positions left: an encoder-decoder's target starts at BOS (position 0), an LM's
    // continuation at its prompt's end (core/decoding.fit_new_tokens)
    const room = ed ? this.maxLen - longest : this.maxLen - T + 1;
    [o] = fitNewTokens(o, room);
    const mode = options.cache ?? this.cacheMode;
    const t0 = performance.now();
    const capacity = ed ? Math.min(this.maxLen, o.max_new_tokens + longest + 1) : Math.min(this.maxLen, T + o.max_new_tokens);
    const stepper = new Stepper(this, inputs.length, capacity, mode);
    const first = ed ? await stepper.startEncoderDecoder(ids, mask) : await stepper.prefill(ids, mask);
    const decodeInputs = {
      eosId: this.eosId,
      context: ed ? null : inputs,
      banned: this.banned,
      prefixes: prefixes && prefixes.map((p) => [...p]),
      stop: options.stopTest ?? null,
    };
    const hyps = await decode(first, V, stepper, o, decodeInputs, !!options.scores || o.num_beams > 1, options.onToken ?? null);
    const ms = performance.now() - t0;
    const best = hyps.map((h) => h[0]?.tokens ?? []);
    const produced = Math.max(1, ...best.map((x) => x.length));
    const result = { ids: best, hypotheses: hyps, msPerToken: ms / produced, steps: stepper.calls - 1 };
    if (options.scores) result.logProbs = hyps.map((h) => h[0]?.logProbs ?? []); // the end token's included
    return result;
  }
}

// the language options (camelCase or snake_case, as the generation options)
const LANGUAGE_KEYS = ["sourceLang", "targetLang", "source_lang", "target_lang"];
const languageArgs = (o) => ({ source: o.sourceLang ?? o.source_lang ?? null, target: o.targetLang ?? o.target_lang ?? null });

const EMPTY_CHAT_PROMPT = "the chat template renders this conversation as an empty prompt (no tokens): nothing for the model to answer";
const MAX_PROMPT_CHARS = 1 << 21; // runtime/chat.py: above any context a package holds
const MAX_TEMPLATE_CHARS = 1 << 20;
const MAX_RANGE = 100_000; // jinja2's sandbox: range() of more items is an error
// runtime/chat.py's render bounds: the items of any one value a render makes (and of an int
// argument), and its work (one unit per evaluated node plus the items of every value it makes
// or reads: nested loops, a filter chain over 100,000 items, doubling a list end here)
const MAX_TEMPLATE_VALUE = MAX_PROMPT_CHARS;
const MAX_TEMPLATE_WORK = 1 << 25;
// the interpreter's own cost in those units (an item copied ~ 1): a node ~ 0.5 us, a block (a
// loop's iteration: scopes and the loop object) ~ 10 us, measured on node 22
const NODE_UNITS = 16;
const BLOCK_UNITS = 256;
const LIST_FILTER_UNITS = 32; // per item of a list a filter reads (sort's comparator: ~1 us)

/** The items a runtime value of @huggingface/jinja holds (a string's characters), 1 else. */
const sizeOf = (v) => {
  const inner = v?.value;
  if (typeof inner === "string" || Array.isArray(inner)) return inner.length;
  return inner instanceof Map ? inner.size : 1;
};

/** The library's interpreter, bounded in work and in the size of every value it makes. */
async function boundedInterpreter() {
  const { Interpreter } = await import("@huggingface/jinja");
  return class BoundedInterpreter extends Interpreter {
    work = MAX_TEMPLATE_WORK;

    charge(units) {
      this.work -= units;
      if (this.work < 0) throw new RangeError(`the render's work passed ${MAX_TEMPLATE_WORK} units (nodes and items an operation reads or makes): a loop or an operation without bound`);
    }

    evaluate(statement, environment) {
      this.charge(NODE_UNITS);
      const value = super.evaluate(statement, environment);
      const size = sizeOf(value);
      if (size > MAX_TEMPLATE_VALUE) throw new RangeError(`the template makes a value of ${size} items (at most ${MAX_TEMPLATE_VALUE})`);
      this.charge(size);
      return value;
    }

    applyFilter(operand, filterNode, environment) {
      if (Array.isArray(operand?.value)) this.charge(LIST_FILTER_UNITS * operand.value.length);
      return super.applyFilter(operand, filterNode, environment);
    }

    evaluateBlock(statements, environment) {
      this.charge(BLOCK_UNITS); // a loop's iteration, even with an empty body
      return super.evaluateBlock(statements, environment);
    }

    evaluateArguments(args, environment) {
      const [positional, keywords] = super.evaluateArguments(args, environment);
      for (const v of [...positional, ...keywords.values()]) {
        if (typeof v?.value === "number" && Math.abs(v.value) > MAX_TEMPLATE_VALUE) {
          throw new RangeError(`the template passes ${v.value} to a call (at most ${MAX_TEMPLATE_VALUE})`);
        }
      }
      return [positional, keywords];
    }
  };
}

/** A chat template rendered by @huggingface/jinja (an interpreter: no JavaScript runs) with
 * transformers' globals; range() bounded as in jinja2's sandbox (the library's own builds any
 * array: range(10 ** 8) exhausted the heap). */
async function renderTemplate(source, variables) {
  const { Environment, Template } = await import("@huggingface/jinja");
  const Interpreter = await boundedInterpreter();
  const template = new Template(source);
  const env = new Environment();
  const range = (start, stop, step = 1) => {
    if (stop === undefined) [start, stop] = [0, start];
    if (step === 0) throw new RangeError("range() step must not be zero");
    const n = Math.max(0, Math.ceil((stop - start) / step));
    if (n > MAX_RANGE) throw new RangeError(`range() of ${n} items (at most ${MAX_RANGE})`);
    return Array.from({ length: n }, (_, i) => start + i * step);
  };
  const pad2 = (n) => String(n).padStart(2, "0");
  const strftimeNow = (format) => {
    const d = new Date();
    const month = (style) => new Intl.DateTimeFormat("en", { month: style }).format(d);
    const parts = { Y: d.getFullYear(), m: pad2(d.getMonth() + 1), d: pad2(d.getDate()), H: pad2(d.getHours()),
                    M: pad2(d.getMinutes()), b: month("short"), B: month("long"), "%": "%" }; // prettier-ignore
    return String(format).replace(/%([YmdbBHM%])/g, (_, k) => String(parts[k]));
  };
  const globals = { false: false, true: true, none: null, False: false, True: true, None: null, range,
                    strftime_now: strftimeNow, raise_exception: (m) => { throw new Error(m); } }; // prettier-ignore
  for (const [k, v] of Object.entries({ ...globals, ...variables })) env.set(k, v);
  return new Interpreter(env).run(template.parsed).value;
}

/** `text` up to the first stop string found at or after `start` (whole text if none). */
export function cutAtStop(text, stops, start = 0) {
  const found = stops.map((s) => text.indexOf(s, start)).filter((i) => i >= 0);
  return found.length ? text.slice(0, Math.min(...found)) : text;
}

/** stop(row, tokens): the text tokens[skip[row]:] add after bases[row] + the skipped tokens
 * contains a stop string (runtime/text.py stop_test). */
function stopTest(decodeIds, stops, bases, skip) {
  const shown = new Map();
  return (row, tokens) => {
    const base = [...bases[row], ...tokens.slice(0, skip[row])];
    const key = `${row}:${Math.min(skip[row], tokens.length)}`;
    if (!shown.has(key)) shown.set(key, decodeIds(base).length);
    const text = decodeIds([...base, ...tokens.slice(skip[row])]).slice(shown.get(key));
    return stops.some((s) => text.includes(s));
  };
}

/** One request's decoder state: the caches (per the contract) and the lengths of its rows. */
class Stepper {
  constructor(model, batch, capacity, mode) {
    const { ort, graphs, model: m } = model;
    this.ort = ort;
    this.session = graphs.decoder;
    this.encoder = graphs.encoder;
    if (mode === "inplace" && model.backend !== "node") throw new RangeError(INPLACE_ON_WEB);
    if (!["inplace", "refeed"].includes(mode)) throw new RangeError(`cache ${mode}: expected inplace or refeed`);
    this.calls = 0;
    this.mode = mode;
    this.bosId = model.bosId;
    this.lengths = new Array(batch).fill(0);
    this.names = this.session.inputNames.filter((n) =>
      /^past_key_values\.\d+\.(decoder\.)?(key|value)$/.test(n),
    );
    this.cache = {};
    for (const n of this.names) this.cache[n] = zeros(ort, [batch, m.kv_heads, capacity, m.cache_head_size]);
    this.static = {}; // encoder-decoder: the source's lengths (format 5) or mask, cross K/V
    this.takesLengths = this.session.inputNames.includes("seqlens_k"); // format 5's ED step
    const outs = this.session.outputNames;
    // "inplace": the same tensor as past input and present output; "refeed": fetch the presents
    this.fetches = { logits: null };
    if (mode === "inplace") {
      for (const n of this.names) this.fetches[present(n)] = this.cache[n];
    } else {
      for (const n of this.names) this.fetches[present(n)] = null;
    }
    this.hasCrossPresents = outs.some((n) => n.includes(".encoder."));
  }

  async startEncoderDecoder(ids, mask) {
    const { ort } = this;
    const B = ids.length;
    const S = ids[0].length;
    const srcMask = int64(ort, mask, [B, S]);
    const enc = await this.encoder.run({ input_ids: int64(ort, ids, [B, S]), attention_mask: srcMask });
    if (this.takesLengths) {
      const real = mask.map((row) => row.reduce((a, c) => a + c, 0));
      this.static.encoder_seqlens_k = gqaLengths(ort, real)[0];
      this.static.encoder_total_sequence_length = new ort.Tensor("int32", Int32Array.of(S), []);
    } else {
      this.static.encoder_attention_mask = srcMask;
    }
    const inputs = new Set(this.session.inputNames);
    for (const [name, value] of Object.entries(enc)) {
      const past = name.replace("present", "past_key_values");
      if (inputs.has(past)) this.static[past] = value;
    }
    // format 4: the decoder writes the cross K/V back where they already are (present = past);
    // in place they are bound to the same tensors; re-fed, the unchanged inputs are kept
    if (this.hasCrossPresents && this.mode === "inplace") {
      for (const name of this.session.outputNames) {
        if (name.includes(".encoder."))
          this.fetches[name] = this.static[name.replace("present", "past_key_values")];
      }
    }
    const bos = ids.map(() => [this.bosId]);
    return this.call(
      bos,
      ids.map(() => [0]),
      this.lengths.map((n) => n + 1),
    );
  }

  async prefill(ids, mask) {
    const positions = mask.map((row) => row.map((m, j) => (m ? j : 0)));
    return this.call(
      ids,
      positions,
      mask.map((row, b) => this.lengths[b] + row.reduce((a, c) => a + c, 0)),
    );
  }

  async step(tokens) {
    return this.call(
      tokens.map((t) => [t]),
      this.lengths.map((n) => [n]),
      this.lengths.map((n) => n + 1),
    );
  }

  /** Run the decoder on (B, T) ids and positions; newLengths: tokens per row after the call. */
  async call(ids, positions, newLengths) {
    const { ort } = this;
    const B = ids.length;
    const T = ids[0].length;
    const feeds = {
      ...this.static,
      ...this.cache,
      input_ids: int64(ort, ids, [B, T]),
      position_ids: int64(ort, positions, [B, T]),
    };
    if (this.takesLengths) {
      [feeds.seqlens_k, feeds.total_sequence_length] = gqaLengths(ort, newLengths);
    } else {
      feeds.attention_mask = lengthMask(ort, newLengths);
    }
    const out = await this.session.run(feeds, this.fetches);
    if (this.mode === "refeed") for (const n of this.names) this.cache[n] = out[present(n)];
    this.lengths = newLengths;
    this.calls++;
    const logits = out.logits.data;
    return logits instanceof Float32Array ? logits : Float32Array.from(logits);
  }

  /** Keep / reorder / repeat rows of the state: row i of the new state is rows[i] (beams,
   * samples, finished rows dropped). */
  select(rows) {
    const { ort } = this;
    const take = (tensor) => {
      const [, ...rest] = tensor.dims;
      const per = rest.reduce((a, b) => a * b, 1);
      const data = tensor.data;
      const out = new data.constructor(rows.length * per);
      rows.forEach((r, i) => out.set(data.subarray(r * per, (r + 1) * per), i * per));
      return new ort.Tensor(tensor.type, out, [rows.length, ...rest]);
    };
    for (const n of this.names) this.cache[n] = take(this.cache[n]);
    for (const [k, v] of Object.entries(this.static)) if (v.dims.length) this.static[k] = take(v);
    this.lengths = rows.map((r) => this.lengths[r]);
    if (this.mode === "inplace") {
      for (const n of this.names) this.fetches[present(n)] = this.cache[n];
      for (const name of Object.keys(this.fetches)) {
        if (name.includes(".encoder.")) this.fetches[name] = this.static[name.replace("present", "past_key_values")];
      }
    }
  }
}

const present = (name) => name.replace("past_key_values", "present");
