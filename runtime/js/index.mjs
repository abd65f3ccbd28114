// edgeformer-runtime: greedy decoding of an edgeformer model package in JavaScript.
//
// A package is a folder (docs/package-format.md is the contract): config.json, encoder.onnx /
// decoder.onnx (+ quantized variants) with their shared weights file, tokenizer.json,
// generation_config.json, golden.json. This module loads one and decodes greedily, exactly as the
// Python runtime (edgeformer.runtime) does with num_beams=1, on either
//   - onnxruntime-node  (backend "node": native CPU build, Node.js only), or
//   - onnxruntime-web   (backend "wasm": WebAssembly, in a browser or in Node.js).
//
//   import { loadPackage } from "edgeformer-runtime";
//   const model = await loadPackage("packages/m30k", { backend: "node" });
//   const [out] = await model.run(["A man is riding a bike."]);  // {ids, text, ...}
//   const ids = await model.generateIds([[5, 9, 14]], { maxNewTokens: 20 });
//
// The KV cache follows the package's cache contract: one preallocated (B, G, M, D) buffer per
// layer and kind; the decoder reads `past_key_values.X` and writes `present.X`. cache "inplace"
// passes the same tensor as that input and as the pre-allocated output (onnxruntime-node wraps
// both around its memory, so GroupQueryAttention writes the new entries in place: no copy);
// cache "refeed" feeds the `present.X` outputs of a call as the next call's `past_key_values.X`.
// onnxruntime-web never writes pre-allocated CPU outputs (they stay zeros, no error: measured
// with 1.30.0), so "wasm" always re-feeds. docs/ship-node.md has the measurements.

import { Tokenizer } from "@huggingface/tokenizers";

export const PACKAGE_FORMAT = "edgeformer-package";
export const FORMAT_VERSION = 4;
export const READABLE_VERSIONS = [2, 3, 4, 5]; // as the Python runtime (core/format.py)
export const VARIANTS = ["fp32", "int8", "int4", "int8-dynamic"];

// config.json's `model` uses Hugging Face's field names since format 3 (format 2: ours)
const OUR_NAMES = {
  hidden_size: "d_model",
  num_attention_heads: "n_heads",
  num_key_value_heads: "n_kv_heads",
  encoder_layers: "n_encoder_layers",
  decoder_layers: "n_decoder_layers",
  max_position_embeddings: "max_len",
  vocab_size: "vocab_size",
  head_dim: "d_head", // written only when not hidden_size / num_attention_heads (Qwen3, Gemma)
};
// core/variants.py: variant "auto" = the fastest variant export measured within these bounds
const MAX_QUALITY_LOSS = 0.05;
const MAX_BLEU_LOSS = 0.5;
const MAX_PERPLEXITY_INCREASE = 0.03;
// generation_config.json fields this (greedy-only) runtime applies; others are reported
const APPLIED = new Set([
  "max_new_tokens", "min_new_tokens", "eos_token_id", "max_length", "do_sample", "num_beams",
  "bos_token_id", "pad_token_id", "decoder_start_token_id", "transformers_version",
]); // prettier-ignore

/** A package that cannot be used (bad file, version, checksum, IO names): one clear message. */
export class PackageError extends Error {
  constructor(message) {
    super(message);
    this.name = "PackageError";
  }
}

const isNode = typeof process !== "undefined" && !!process.versions?.node;

// ---- files: a folder on disk (Node) or a base URL (browser, or any fetch) -------------------

/** Reads a package's files by name. `source`: a folder path (Node), a URL string ending in "/"
 * or a URL object (fetch), or an object {name, read(file) -> Promise<Uint8Array>}. */
async function fileSource(source) {
  if (source && typeof source === "object" && typeof source.read === "function") return source;
  const url = source instanceof URL ? source.href : String(source);
  if (!isNode || /^(https?|blob|data):/.test(url)) {
    const base = url.endsWith("/") ? url : `${url}/`;
    return {
      name: base,
      async read(file) {
        const res = await fetch(new URL(file, base));
        if (!res.ok) throw new PackageError(`model package ${base}: ${file}: HTTP ${res.status}`);
        return new Uint8Array(await res.arrayBuffer());
      },
    };
  }
  const fs = await import("node:fs/promises");
  const path = await import("node:path");
  const dir = path.resolve(url.startsWith("file:") ? new URL(url).pathname : url);
  const locate = async (file) => {
    // a listed name is a plain file name (checkConfig); its real path must stay in the folder
    const full = path.join(dir, file);
    const real = await fs.realpath(full).catch(() => null);
    if (real === null) throw new PackageError(`model package ${dir}: ${file} is missing`);
    if (path.dirname(real) !== (await fs.realpath(dir))) {
      throw new PackageError(`model package ${dir}: ${file} leaves the package folder`);
    }
    return full;
  };
  return {
    name: dir,
    path: (file) => path.join(dir, file),
    read: async (file) => new Uint8Array(await fs.readFile(await locate(file))),
    // streamed: a weights file that onnxruntime-node opens by path is checked, not held
    async sha256(file) {
      const full = await locate(file);
      const { createHash } = await import("node:crypto");
      const { createReadStream } = await import("node:fs");
      const hash = createHash("sha256");
      for await (const chunk of createReadStream(full)) hash.update(chunk);
      return hash.digest("hex");
    },
  };
}

async function sha256(bytes) {
  if (isNode) {
    const { createHash } = await import("node:crypto");
    return createHash("sha256").update(bytes).digest("hex");
  }
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

const decoder = new TextDecoder();
const json = (bytes) => JSON.parse(decoder.decode(bytes));

// ---- config -----------------------------------------------------------------------------------

function checkConfig(cfg, where) {
  if (!cfg || typeof cfg !== "object" || cfg.format !== PACKAGE_FORMAT) {
    throw new PackageError(`${where}: config.json is not an edgeformer package (format)`);
  }
  if (!READABLE_VERSIONS.includes(cfg.format_version)) {
    throw new PackageError(
      `${where}: format_version ${cfg.format_version} is not one this runtime reads ` +
        `(${READABLE_VERSIONS.join(", ")}): re-export the package with this edgeformer ` +
        `(or update edgeformer-runtime)`,
    );
  }
  if (!["encoder-decoder", "decoder-only"].includes(cfg.family)) {
    throw new PackageError(`${where}: unknown family ${JSON.stringify(cfg.family)}`);
  }
  for (const name of Object.keys(cfg.files ?? {})) {
    if (!/^[A-Za-z0-9_.-]+$/.test(name) || name.startsWith(".")) {
      throw new PackageError(`${where}: config.json lists ${JSON.stringify(name)}: not a plain file name`);
    }
  }
  const raw = cfg.model ?? {};
  const m = {};
  for (const [k, v] of Object.entries(raw)) m[cfg.format_version === 2 ? k : (OUR_NAMES[k] ?? k)] = v;
  for (const key of ["vocab_size", "d_model", "n_heads", "n_decoder_layers", "max_len"]) {
    if (!Number.isInteger(m[key]) || m[key] < 1) {
      throw new PackageError(`${where}: config.json model: ${key} must be a positive integer`);
    }
  }
  m.kv_heads = m.n_kv_heads ?? m.n_heads;
  m.head_dim = m.d_head ?? m.d_model / m.n_heads;
  m.cache_head_size = m.head_dim; // the graphs' (zero-padded) head size, read from the decoder
  return m;
}

// core/format.py WEB_VARIANTS: int8 / int4's graphs with fp32 compute (accuracy_level 0), what
// onnxruntime-web computes for any accuracy_level: their golden run holds on wasm
const WEB_VARIANTS = ["int8-web", "int4-web"];

/** (variant, why) for variant "auto": the Python runtime's policy (core/variants.py). */
export function pickVariant(cfg, maxQualityLoss = null) {
  const measured = {};
  for (const [k, v] of Object.entries(cfg.variants ?? {})) {
    if (v.measured && !WEB_VARIANTS.includes(k)) measured[k] = v.measured; // never auto's pick
  }
  if (!measured.fp32) return ["fp32", "no export measurements in this package: fp32"];
  const ref = measured.fp32;
  const heldOut = (m) => {
    if ("bleu" in m && "bleu" in ref && ref.bleu - m.bleu > MAX_BLEU_LOSS) return "BLEU";
    if (
      "perplexity" in m &&
      "perplexity" in ref &&
      m.perplexity / ref.perplexity - 1 > MAX_PERPLEXITY_INCREASE
    ) {
      return "perplexity";
    }
    return null;
  };
  const hasHeldOut = "bleu" in ref || "perplexity" in ref;
  const bound = maxQualityLoss ?? (hasHeldOut ? 1 : MAX_QUALITY_LOSS);
  const ok = Object.keys(measured).filter(
    (k) => !heldOut(measured[k]) && 1 - measured[k].agreement <= bound + 1e-12,
  );
  if (!ok.length) return ["fp32", "no variant within the bounds: fp32"];
  const best = ok.reduce((a, b) => (measured[b].ms_per_token < measured[a].ms_per_token ? b : a));
  return [
    best,
    `${best}: fastest at export (${measured[best].ms_per_token.toFixed(3)} ms/token) within the quality bounds`,
  ];
}

/** "1.22.0" -> a string that compares as the version does ("00001.00022.00000"). */
const versionTuple = (v) =>
  [...(String(v).match(/\d+/g) ?? []), "0", "0", "0"]
    .slice(0, 3)
    .map((x) => x.padStart(5, "0"))
    .join(".");

const INPLACE_ON_WEB =
  'cache "inplace" on onnxruntime-web: it leaves pre-allocated CPU outputs unwritten (the cache ' +
  'and the logits stay zeros, no error; measured with 1.30.0): use cache "refeed" (the default)';

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

// ---- the model --------------------------------------------------------------------------------

/**
 * Load a package. options:
 *   backend  "node" (onnxruntime-node) | "wasm" (onnxruntime-web); default: "node" in Node.js
 *   ort      the onnxruntime module to use (default: imported by backend name)
 *   variant  "fp32" (default, as the Python runtime's) | "auto" (the Python runtime's policy; fp32
 *            on wasm) | "int8" | "int4" | "int8-dynamic" | "int8-web" | "int4-web"
 *   cache    "auto" (in place on node, re-fed on wasm) | "inplace" | "refeed"
 *   threads  intra-op threads (node: per session; wasm: ort.env.wasm.numThreads, set once)
 *   spinning let idle intra-op threads spin (default false: see docs/ship-node.md)
 *   verify   check every file read against config.json's sha256 (default true)
 */
export async function loadPackage(source, options = {}) {
  const backend = options.backend ?? (isNode ? "node" : "wasm");
  if (!["node", "wasm"].includes(backend)) throw new Error(`backend ${backend}: expected node or wasm`);
  if (backend === "node" && !isNode) throw new Error('backend "node" needs Node.js: use "wasm" in a browser');
  const ort = options.ort ?? (await import(backend === "node" ? "onnxruntime-node" : "onnxruntime-web"));
  const cache = options.cache ?? "auto";
  if (!["auto", "inplace", "refeed"].includes(cache))
    throw new Error(`cache ${cache}: expected auto, inplace or refeed`);
  if (backend === "wasm" && cache === "inplace") throw new Error(INPLACE_ON_WEB);
  const files = await fileSource(source);
  const where = `model package ${files.name}`;
  const cfg = json(await files.read("config.json"));
  const model = checkConfig(cfg, where);
  const verify = options.verify ?? true;
  const read = async (file) => {
    const want = cfg.files?.[file];
    if (want === undefined) throw new PackageError(`${where}: ${file} is not in config.json's checksum list`);
    const bytes = await files.read(file);
    if (verify && (await sha256(bytes)) !== want) throw mismatch(file);
    return bytes;
  };
  const mismatch = (file) =>
    new PackageError(`${where}: ${file} does not match its sha256 in config.json (damaged or edited)`);
  const check = async (file) => {
    // a file onnxruntime opens itself (node: graphs and weights by path): listed and checked
    const want = cfg.files?.[file];
    if (want === undefined) throw new PackageError(`${where}: ${file} is not in config.json's checksum list`);
    if (!verify) return;
    const got = files.sha256 ? await files.sha256(file) : await sha256(await files.read(file));
    if (got !== want) throw mismatch(file);
  };

  let variant = options.variant ?? "fp32";
  let variantReason = "asked for";
  if (variant === "auto" && backend === "wasm") {
    // export measured native speeds; on wasm MatMulNBits ran 12-21x slower than fp32's MatMul
    // (docs/ship-node.md), so the fastest there is fp32
    [variant, variantReason] = ["fp32", "wasm: fp32 (quantized matmuls are slower there)"];
  } else if (variant === "auto") {
    [variant, variantReason] = pickVariant(cfg, options.maxQualityLoss ?? null);
  }
  const entry = cfg.variants?.[variant];
  if (!entry) {
    throw new PackageError(
      `${where}: no variant ${variant} (has ${Object.keys(cfg.variants ?? {}).join(", ")})`,
    );
  }

  const have = ort.env?.versions?.[backend === "node" ? "node" : "web"] ?? "0";
  if (versionTuple(have) < versionTuple(cfg.min_onnxruntime ?? "0")) {
    throw new PackageError(
      `${where} needs onnxruntime >= ${cfg.min_onnxruntime}; this is onnxruntime-${backend === "node" ? "node" : "web"} ${have}`,
    );
  }

  // generation_config.json: greedy-only, so the fields it applies are the lengths and end tokens
  const gen = cfg.files?.["generation_config.json"] ? json(await read("generation_config.json")) : {};
  const ignored = Object.keys(gen).filter((k) => !APPLIED.has(k));
  if (gen.do_sample) ignored.push("do_sample");
  if ((gen.num_beams ?? 1) > 1) ignored.push("num_beams");

  // tokenizers, checked against export's probes (golden.json) as the Python runtime does. One
  // that the JS library cannot read, or that encodes a probe differently, leaves the package
  // usable with ids: text in or out is then an error that says so (tokenizerError)
  const tokenizers = {};
  let tokenizerError = null;
  for (const file of ["tokenizer.json", "source_tokenizer.json"]) {
    if (!cfg.files?.[file]) continue;
    const data = json(await read(file));
    try {
      tokenizers[file] = new Tokenizer(data, {});
    } catch (e) {
      tokenizerError ??= `${file} cannot be read by @huggingface/tokenizers (${String(e.message ?? e).slice(0, 200)})`;
    }
  }
  if (cfg.files?.["golden.json"]) {
    for (const probe of json(await read("golden.json")).probes ?? []) {
      const tok = tokenizers[probe.file];
      if (!tok) continue;
      const ids = tok.encode(probe.text, { add_special_tokens: false }).ids;
      if (ids.length !== probe.ids.length || ids.some((x, i) => x !== probe.ids[i])) {
        tokenizerError ??= `${probe.file} does not encode export's probe text as the Python tokenizers library did`;
      }
    }
  }

  // sessions
  const threads = options.threads;
  if (backend === "wasm" && threads !== undefined) ort.env.wasm.numThreads = threads;
  // idle intra-op threads do not spin unless options.spinning: on this project's busy 2-core host
  // spinning made decoding 1.7-2.2x slower (docs/ship-node.md; the Python runtime spins the
  // decoder's threads by default)
  const sessionOptions = () => ({
    executionProviders: [backend === "node" ? "cpu" : "wasm"],
    graphOptimizationLevel: "all",
    executionMode: "sequential",
    logSeverityLevel: 3,
    ...(backend === "node" && threads !== undefined ? { intraOpNumThreads: threads } : {}),
    extra: {
      // the graphs keep residual Add + LayerNormalization unfused on purpose (runtime/session.py)
      optimization: { disable_specified_optimizers: "SkipLayerNormFusion" },
      session: { intra_op: { allow_spinning: options.spinning ? "1" : "0" } },
    },
  });
  const graphs = {};
  const graphNames = cfg.family === "encoder-decoder" ? ["encoder", "decoder"] : ["decoder"];
  // the variant's weights file (null: ORT-format graphs, `export --format ort`, hold their own)
  const weights = entry.weights && backend === "wasm" ? await read(entry.weights) : null;
  if (entry.weights && backend === "node") await check(entry.weights); // opened by path
  for (const g of graphNames) {
    const file = entry.files[g];
    const bytes = backend === "wasm" ? await read(file) : null;
    if (backend === "node") await check(file);
    let session;
    try {
      if (backend === "node") {
        session = await ort.InferenceSession.create(files.path(file), sessionOptions());
      } else {
        // onnxruntime-web cannot open files: the weights are handed over as externalData
        const externalData = weights ? [{ path: entry.weights, data: weights }] : [];
        session = await ort.InferenceSession.create(bytes, { ...sessionOptions(), externalData });
      }
    } catch (e) {
      throw new PackageError(
        `${where}: onnxruntime cannot load the ${variant} ${g} graph: ${String(e.message ?? e).split("\n")[0]}`,
      );
    }
    const want = cfg.graphs?.[g];
    const same = (a, b) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());
    if (want && (!same(session.inputNames, want.inputs) || !same(session.outputNames, want.outputs))) {
      throw new PackageError(`${where}: the ${g} graph's inputs/outputs do not match config.json`);
    }
    graphs[g] = session;
  }
  // the cache's sizes: the graph's fixed dims (B, G, M, D) of past_key_values.*; D is the graphs'
  // attention head size, the model's head dim zero-padded to a multiple of 8 since 2026-11-27
  const past = graphs.decoder.inputMetadata?.find((i) =>
    /^past_key_values\.0\.(decoder\.)?key$/.test(i.name),
  );
  const [, G, , D] = past?.shape ?? [];
  if (Number.isInteger(G) && G !== model.kv_heads) {
    throw new PackageError(
      `${where}: the decoder's cache has ${G} heads, config.json says ${model.kv_heads}`,
    );
  }
  if (Number.isInteger(D)) {
    if (D < model.head_dim)
      throw new PackageError(`${where}: the decoder's head size ${D} < the model's ${model.head_dim}`);
    model.cache_head_size = D;
  }
  const cacheMode = cache === "auto" ? (backend === "wasm" ? "refeed" : "inplace") : cache;
  return new Model({
    ort, backend, cfg, model, variant, variantReason, gen, ignored, tokenizers, tokenizerError, graphs, cacheMode, where,
  }); // prettier-ignore
}

export class Model {
  constructor(f) {
    Object.assign(this, f);
    this.family = f.cfg.family;
    const sp = f.cfg.special_tokens;
    this.padId = sp.pad_id;
    this.bosId = sp.bos_id;
    this.eosId = sp.eos_id;
    this.tokenizer = f.tokenizers["tokenizer.json"] ?? null;
    this.sourceTokenizer = f.tokenizers["source_tokenizer.json"] ?? this.tokenizer;
    this.maxLen = f.model.max_len;
    const eos = f.gen.eos_token_id;
    this.endIds = [...new Set([this.eosId, ...(Array.isArray(eos) ? eos : [])])];
    this.banned = [this.padId, this.bosId].filter((t) => !this.endIds.includes(t)); // never chosen
  }

  /** The sessions' resources (onnxruntime-web keeps them in the wasm heap). */
  async release() {
    for (const s of Object.values(this.graphs)) await s.release();
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
    const why = this.tokenizerError ?? (this.tokenizer ? null : "the package has no tokenizer.json");
    if (why)
      throw new PackageError(`${this.where}: ${why}: pass token ids (translateIds / generateIds, --ids)`);
  }

  /** The text that `ids` add after `prompt` (its leading space included), as the Python runtime. */
  continuation(prompt, ids) {
    return this.decode([...prompt, ...ids]).slice(this.decode(prompt).length);
  }

  /** Texts -> [{input, ids, text, ms_per_token}] (a translation, or the continuation of a
   * prompt), as the Python runtime's text API: a source is its tokens + EOS (an empty source
   * translates to ""), a prompt its tokens (BOS alone when empty). options: as decodeIds. */
  async run(texts, options = {}) {
    const ed = this.family === "encoder-decoder";
    const inputs = texts.map((t) => {
      if (typeof t !== "string") throw new Error(`texts must be strings (got ${typeof t})`);
      if (ed) return t.trim() ? [...this.encode(t, this.sourceTokenizer), this.eosId] : null;
      const ids = this.encode(t, this.tokenizer, true);
      return ids.length ? ids : [this.bosId];
    });
    // an empty source translates to "" (as in the Python runtime): only the others are decoded
    const live = inputs.map((ids, i) => (ids ? i : -1)).filter((i) => i >= 0);
    const out = await this.decodeIds(
      live.map((i) => inputs[i]),
      options,
    );
    const lines = texts.map((input) => ({ input, ids: [], text: "", ms_per_token: out.msPerToken }));
    live.forEach((i, j) => {
      const ids = out.ids[j];
      lines[i].ids = ids;
      lines[i].text = ed ? this.decode(ids) : this.continuation(inputs[i], ids);
      if (out.logProbs) lines[i].log_probs = out.logProbs[j];
    });
    return lines;
  }

  // ---- ids ---------------------------------------------------------------------------------

  /** Source id lists (each ending in EOS) -> output id lists (no BOS / EOS). */
  async translateIds(sources, options = {}) {
    if (this.family !== "encoder-decoder") throw new Error(`${this.where} is decoder-only: use generateIds`);
    return (await this.decodeIds(sources, options)).ids;
  }

  /** Prompt id lists -> continuation id lists (no EOS). */
  async generateIds(prompts, options = {}) {
    if (this.family !== "decoder-only") throw new Error(`${this.where} is encoder-decoder: use translateIds`);
    return (await this.decodeIds(prompts, options)).ids;
  }

  /**
   * Greedy decoding of a batch, as edgeformer.runtime with num_beams=1: {ids, msPerToken, steps}.
   * options: maxNewTokens (default: generation_config.json's, else all the model's positions allow),
   * minNewTokens, ignoreEos (benchmarks: always maxNewTokens), cache ("inplace" | "refeed"),
   * scores (also return logProbs: each chosen token's log-probability, as the Python runtime's).
   */
  async decodeIds(inputs, options = {}) {
    if (!inputs.length) return { ids: [], msPerToken: 0, steps: 0 };
    for (const s of inputs) {
      if (!s.length || s.length > this.maxLen) {
        throw new Error(`an input of ${s.length} tokens: must be 1 .. the model's max_len ${this.maxLen}`);
      }
      if (s.some((t) => !Number.isInteger(t) || t < 0 || t >= this.model.vocab_size)) {
        throw new Error(`token ids must be integers in [0, ${this.model.vocab_size})`);
      }
    }
    const ed = this.family === "encoder-decoder";
    const { ids, mask, T } = pad(inputs, this.padId);
    // the positions left: an encoder-decoder's target starts at BOS (position 0), an LM's
    // continuation at its prompt's end (core/decoding.fit_new_tokens)
    const room = ed ? this.maxLen : this.maxLen - T + 1;
    let maxNew =
      options.maxNewTokens ??
      this.gen.max_new_tokens ??
      (ed && this.gen.max_length ? this.gen.max_length - 1 : room);
    maxNew = Math.min(maxNew, room);
    const minNew = Math.min(options.minNewTokens ?? this.gen.min_new_tokens ?? 0, maxNew);
    const mode = options.cache ?? this.cacheMode;
    const t0 = performance.now();
    const stepper = new Stepper(
      this,
      inputs.length,
      ed ? Math.min(this.maxLen, maxNew + 1) : Math.min(this.maxLen, T + maxNew),
      mode,
    );
    let logits;
    if (ed) {
      logits = await stepper.startEncoderDecoder(ids, mask);
    } else {
      logits = await stepper.prefill(ids, mask);
    }
    const B = inputs.length;
    const V = this.model.vocab_size;
    const scores = options.scores ? inputs.map(() => []) : null;
    const ban = new Set(this.banned);
    const banEnds = new Set([...this.banned, ...this.endIds]);
    const out = inputs.map(() => []);
    const done = new Array(B).fill(false);
    let steps = 0;
    for (let t = 0; t < maxNew; t++) {
      const tokens = new Array(B).fill(this.padId);
      for (let b = 0; b < B; b++) {
        if (done[b]) continue;
        const row = logits.subarray(b * V, (b + 1) * V);
        const tok = argmax(row, options.ignoreEos || t < minNew ? banEnds : ban);
        if (tok < 0 || !Number.isFinite(row[tok]))
          throw new Error(`no finite logit to choose at step ${t} (row ${b})`);
        if (scores) scores[b].push(logSoftmaxAt(row, tok, options.ignoreEos || t < minNew ? banEnds : ban));
        if (this.endIds.includes(tok)) done[b] = true;
        else out[b].push(tok);
        tokens[b] = tok;
      }
      if (t + 1 === maxNew || done.every(Boolean)) break;
      logits = await stepper.step(tokens); // finished rows go on (their tokens are not kept)
      steps++;
    }
    const ms = performance.now() - t0;
    const produced = Math.max(1, ...out.map((o) => o.length));
    const result = { ids: out, msPerToken: ms / produced, steps };
    if (scores) result.logProbs = scores; // per chosen token, the end token's included
    return result;
  }
}

/** The first largest entry (ties: the lower id, as numpy's argmax; a NaN: the first NaN),
 * ids in `excluded` (a Set) skipped. */
function argmax(row, excluded) {
  let best = -1;
  let value = -Infinity;
  for (let i = 0; i < row.length; i++) {
    if (excluded.has(i)) continue;
    const x = row[i];
    if (Number.isNaN(x)) return i;
    if (best < 0 || x > value) {
      best = i;
      value = x;
    }
  }
  return best;
}

/** log softmax(row)[tok] in float64 over the ids not `excluded` (the Python runtime's scores). */
function logSoftmaxAt(row, tok, excluded) {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (!excluded.has(i) && row[i] > max) max = row[i];
  let sum = 0;
  for (let i = 0; i < row.length; i++) if (!excluded.has(i)) sum += Math.exp(row[i] - max);
  return row[tok] - max - Math.log(sum);
}

/** One request's decoder state: the caches (per the contract) and the lengths of its rows. */
class Stepper {
  constructor(model, batch, capacity, mode) {
    const { ort, graphs, model: m } = model;
    this.ort = ort;
    this.session = graphs.decoder;
    this.encoder = graphs.encoder;
    if (mode === "inplace" && model.backend === "wasm") throw new Error(INPLACE_ON_WEB);
    if (!["inplace", "refeed"].includes(mode)) throw new Error(`cache ${mode}: expected inplace or refeed`);
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
    return out.logits.data;
  }
}

const present = (name) => name.replace("past_key_values", "present");
