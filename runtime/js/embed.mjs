// Sentence embeddings and cross-encoder scores from an encoder package (family "encoder"), as
// the Python runtime's edgeformer.runtime.embed computes them:
//
//   texts -> tokenizer.json (special tokens added, cut at max_seq_length as the Rust tokenizers
//            library cuts: longest first for a pair) -> batches of similar length (sorted, at
//            most batchSize rows, right-padded) -> encoder.onnx -> sentence_embedding (B, C),
//            pooled (and normalised) inside the graph -> rows back in the texts' order
//
//   import { loadEmbedder } from "edgeformer-runtime";
//   const embedder = await loadEmbedder("packages/minilm", { backend: "node" });
//   const rows = await embedder.embed(["A man is playing a guitar.", "hello"]);  // Float32Array[]
//   const scores = await (await loadEmbedder("packages/reranker")).score("query", ["doc", ...]);

import { Tokenizer } from "@huggingface/tokenizers";
import {
  CONTRACT, PackageError, checkEncoderConfig, checkNames, checkOrtVersion, checkThreads, fileSource, isNode,
  parseJson, readConfig, sha256,
} from "./package.mjs"; // prettier-ignore
import { regexProblem } from "./regex.mjs";

const FILES = CONTRACT.files;
const GRAPH = Object.keys(CONTRACT.encoder.io)[0];
export const DEFAULT_BATCH = 32;
export const EMBED_BACKENDS = ["node", "wasm"];

/** The package's tokenizer with the Python runtime's truncation (tokenizers' enable_truncation
 * (max_seq_length): the post-processor's special tokens kept, the text's tokens cut). */
export class EncoderTokenizer {
  constructor(tok, maxLen, padId) {
    this.tok = tok;
    this.maxLen = maxLen;
    this.padId = padId;
    this.vocab = tok.get_vocab(true);
    this.unkId = tok.model?.unk_token_id ?? padId;
    const added = (pair) => (tok.post_processor ? tok.post_processor.post_process([], pair ? [] : null, true).tokens.length : 0);
    this.added = { single: added(false), pair: added(true) };
  }

  /** ids (and token type ids) of a text, or of a (query, document) pair; a text over
   * max_seq_length is cut (truncate) or a RangeError naming it (what, i). */
  encode(text, pair, truncate, what, i) {
    let a = this.tok.tokenize(text);
    let b = pair === null ? null : this.tok.tokenize(pair);
    const room = this.maxLen - (b === null ? this.added.single : this.added.pair);
    if (a.length + (b?.length ?? 0) > room) {
      if (!truncate) {
        throw new RangeError(
          `${what} ${i} is over the model's max_seq_length of ${this.maxLen} tokens (truncate: true cuts it there, as sentence-transformers does)`,
        );
      }
      [a, b] = cut(a, b, room);
    }
    const out = this.tok.post_processor ? this.tok.post_processor.post_process(a, b, true) : { tokens: [...a, ...(b ?? [])] };
    const ids = out.tokens.map((t) => this.vocab.get(t) ?? this.unkId);
    return { ids, types: out.token_type_ids ?? new Array(ids.length).fill(0) };
  }
}

/** Rust tokenizers' TruncationStrategy::LongestFirst: the shorter input kept whole when the
 * longer can give up the rest, else both cut to half of `room` (the first gets the odd one when
 * it is the shorter: n1 = room / 2, n2 = n1 + room % 2). */
export function cut(a, b, room) {
  if (b === null) return [a.slice(0, Math.max(room, 0)), null];
  let [n1, n2] = [a.length, b.length];
  const swap = n1 > n2;
  if (swap) [n1, n2] = [n2, n1];
  n2 = n1 > room ? n1 : Math.max(n1, room - n1);
  if (n1 + n2 > room) {
    n1 = Math.floor(room / 2);
    n2 = n1 + (room % 2);
  }
  if (swap) [n1, n2] = [n2, n1];
  return [a.slice(0, n1), b.slice(0, n2)];
}

/** texts as a non-empty array of strings, or a RangeError naming the problem (the Python
 * runtime's Embedder.check_texts). */
function checkTexts(texts) {
  if (typeof texts === "string") throw new RangeError("embed takes a list of texts; give [text] for one");
  if (!Array.isArray(texts)) throw new RangeError(`embed takes a list of texts, got ${texts === null ? "null" : typeof texts}`);
  if (!texts.length) throw new RangeError("embed got an empty list of texts");
  const bad = texts.findIndex((t) => typeof t !== "string");
  if (bad >= 0) throw new RangeError(`text ${bad} is a ${texts[bad] === null ? "null" : typeof texts[bad]}, not a string`);
  return texts;
}

/** (B, S) int64 of rows right-padded with `fill`. */
const int64 = (ort, rows, S, fill) =>
  new ort.Tensor("int64", BigInt64Array.from(rows.flatMap((r) => [...r, ...new Array(S - r.length).fill(fill)]), BigInt), [rows.length, S]);

/**
 * Load an encoder package, checked as the Python runtime checks it (runtime/embed.py
 * load_encoder_package): an Embedder, or a Reranker for a cross-encoder's package.
 * options: backend "node" | "wasm"; variant (default "fp32"); batchSize (default 32); threads;
 *          verify (default true: every file against config.json's sha256); ort (a module).
 */
export async function loadEmbedder(source, options = {}) {
  const backend = options.backend ?? (isNode ? "node" : "wasm");
  if (!EMBED_BACKENDS.includes(backend)) throw new RangeError(`backend ${backend}: an encoder package runs on ${EMBED_BACKENDS.join(", ")}`);
  if (backend === "node" && !isNode) throw new RangeError('backend "node" needs Node.js: use "wasm" in a browser');
  const threads = checkThreads(options.threads);
  const batchSize = options.batchSize ?? DEFAULT_BATCH;
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new RangeError(`batchSize=${JSON.stringify(batchSize)} must be an integer >= 1`);
  const ort = options.ort ?? (await import(backend === "node" ? "onnxruntime-node" : "onnxruntime-web"));
  const files = await fileSource(source);
  const where = `model package ${files.name}`;
  const data = await readConfig(files, where);
  if (data && data.format === undefined && "architectures" in data) {
    throw new PackageError(`${files.name} is a Hugging Face model folder, not a model package: export it first (edgeformer export ${files.name} PACKAGE_DIR)`);
  }
  const { cfg, model } = checkEncoderConfig(data, `${where}: ${FILES.config}`);
  await checkNames(cfg, files, where);
  const verify = options.verify ?? true;
  const read = async (file) => {
    const bytes = await files.read(file);
    if (verify && (await sha256(bytes)) !== cfg.files[file]) throw new PackageError(`${where}: checksum mismatch for ${file}`);
    return bytes;
  };
  if (files.local && verify) {
    for (const file of Object.keys(cfg.files)) {
      if ((await files.sha256(file)) !== cfg.files[file]) throw new PackageError(`${where}: checksum mismatch for ${file}`);
    }
  }
  const variant = options.variant ?? "fp32";
  const entry = cfg.variants[variant];
  if (!entry) throw new RangeError(`variant ${JSON.stringify(variant)} is not in this package (it has ${Object.keys(cfg.variants).join(", ")})`);
  checkOrtVersion(ort, backend, cfg, where);

  const tokData = parseJson(files.local && verify ? await files.read(FILES.tokenizer) : await read(FILES.tokenizer), `${where}: ${FILES.tokenizer}`);
  const risky = regexProblem(tokData);
  if (risky) throw new PackageError(`${where}: ${FILES.tokenizer} cannot be read (${risky})`);
  let tok;
  try {
    tok = new Tokenizer(tokData, {});
  } catch (e) {
    throw new PackageError(`${where}: ${FILES.tokenizer} cannot be read by @huggingface/tokenizers (${String(e.message ?? e).slice(0, 200)})`);
  }
  const top = Math.max(-1, ...tok.get_vocab(true).values());
  if (top >= model.vocab_size) throw new PackageError(`${where}: ${FILES.tokenizer} has token id ${top}, beyond the model's vocabulary of ${model.vocab_size}`);

  const sessionOptions = {
    executionProviders: [backend === "node" ? "cpu" : "wasm"],
    graphOptimizationLevel: "all",
    executionMode: "sequential",
    logSeverityLevel: options.logSeverityLevel ?? 3,
    ...(backend === "node" && threads !== undefined ? { intraOpNumThreads: threads } : {}),
    // the graphs keep residual Add + LayerNormalization unfused on purpose (runtime/session.py)
    extra: { optimization: { disable_specified_optimizers: "SkipLayerNormFusion" }, session: { intra_op: { allow_spinning: options.spinning ? "1" : "0" } } },
  };
  if (backend === "wasm" && threads !== undefined) ort.env.wasm.numThreads = threads;
  const file = entry.files[GRAPH];
  let session;
  try {
    if (backend === "node") {
      session = await ort.InferenceSession.create(files.path(file), sessionOptions);
    } else {
      const bytes = files.local && verify ? await files.read(file) : await read(file);
      const weights = files.local && verify ? await files.read(entry.weights) : await read(entry.weights);
      session = await ort.InferenceSession.create(bytes, { ...sessionOptions, externalData: [{ path: entry.weights, data: weights }] });
    }
  } catch (e) {
    throw new PackageError(`${where}: onnxruntime cannot load the ${variant} ${GRAPH} graph: ${String(e.message ?? e).split("\n")[0].slice(0, 300)}`);
  }
  const io = cfg.graphs[GRAPH];
  const same = (a, b) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());
  if (!same(session.inputNames, io.inputs) || !same(session.outputNames, io.outputs)) {
    throw new PackageError(`${where}: the ${GRAPH} graph's inputs/outputs do not match the package contract`);
  }
  const Kind = model.num_labels ? Reranker : Embedder;
  return new Kind({ ort, backend, cfg, model, variant, session, batchSize, where,
                    tokenizer: new EncoderTokenizer(tok, model.max_seq_length, cfg.pad_id) }); // prettier-ignore
}

/** Sentence embeddings: (await loadEmbedder(pkg)).embed(texts) -> one Float32Array per text. */
export class Embedder {
  constructor(f) {
    Object.assign(this, f);
    this.output = CONTRACT.encoder.io[GRAPH].outputs[1];
  }

  get dimension() {
    return this.model.hidden_size;
  }

  get maxSeqLength() {
    return this.model.max_seq_length;
  }

  get normalized() {
    return this.model.normalize;
  }

  /** Each text's ids with its special tokens, cut at max_seq_length (truncate, default) or a
   * RangeError naming the first text over it. */
  ids(texts, options = {}) {
    const truncate = options.truncate ?? true;
    return checkTexts(texts).map((t, i) => this.tokenizer.encode(t, null, truncate, "text", i).ids);
  }

  /** One Float32Array (dimension) per text, in the texts' order. */
  async embed(texts, options = {}) {
    if (this.model.num_labels) throw new RangeError(`${this.where} is a cross-encoder (a text pair -> scores): use score`);
    const rows = this.ids(texts, options).map((ids) => ({ ids, types: null }));
    return this.runBatches(rows, this.output, this.dimension, "embeddings");
  }

  /** rows {ids, types} sorted by length, batchSize at a time through the graph: the output's
   * rows (width numbers each) in the given order. */
  async runBatches(rows, output, width, what) {
    const order = rows.map((_, i) => i).sort((a, b) => rows[a].ids.length - rows[b].ids.length || a - b);
    const out = new Array(rows.length);
    for (let start = 0; start < order.length; start += this.batchSize) {
      const chunk = order.slice(start, start + this.batchSize);
      const S = Math.max(...chunk.map((i) => rows[i].ids.length));
      const pick = (f) => chunk.map((i) => f(rows[i]));
      // right-padded (B, S): ids with pad_id, the mask and token types with 0
      const feed = {
        input_ids: int64(this.ort, pick((r) => r.ids), S, this.cfg.pad_id),
        attention_mask: int64(this.ort, pick((r) => r.ids.map(() => 1)), S, 0),
        token_type_ids: int64(this.ort, pick((r) => r.types ?? r.ids.map(() => 0)), S, 0),
      };
      const got = (await this.session.run(feed, [output]))[output].data;
      chunk.forEach((i, b) => {
        const row = Float32Array.from(got.subarray(b * width, (b + 1) * width));
        if (!row.every(Number.isFinite)) throw new RangeError(`the encoder gave non-finite ${what}`);
        out[i] = row;
      });
    }
    return out;
  }

  async release() {
    await this.session.release();
  }
}

/** A cross-encoder: each (query, document) pair read together -> its classifier's logits, as
 * the Python runtime's Reranker.score (no activation: one label is a relevance logit). */
export class Reranker extends Embedder {
  constructor(f) {
    super(f);
    this.output = CONTRACT.encoder.classifier_io[GRAPH].outputs[1];
  }

  async embed() {
    throw new RangeError(`${this.where} is a cross-encoder (a text pair -> scores): use score`);
  }

  /** Each pair's ids and token type ids, cut longest first (truncate) or a RangeError. */
  pairIds(query, documents, options = {}) {
    if (typeof query !== "string") throw new RangeError(`query must be a string, got ${query === null ? "null" : typeof query}`);
    const truncate = options.truncate ?? true;
    return checkTexts(documents).map((d, i) => this.tokenizer.encode(query, d, truncate, "pair", i));
  }

  /** One number per document for a one-label model, else one array of num_labels numbers. */
  async score(query, documents, options = {}) {
    const L = this.model.num_labels;
    const out = await this.runBatches(this.pairIds(query, documents, options), this.output, L, "scores");
    return out.map((r) => (L === 1 ? r[0] : Array.from(r)));
  }
}
