// Types of edgeformer-runtime's public API (index.mjs). docs/ship-node.md has the guide.

/** A package that cannot be used (bad file, version, checksum, IO names): one clear message. */
export class PackageError extends Error {}

export type Backend = "node" | "wasm" | "webgpu";
export type Variant = "auto" | "fp32" | "int8" | "int4" | "int8-dynamic" | "int8-web" | "int4-web" | "gguf";
export type CacheMode = "auto" | "inplace" | "refeed";

/** A package's files: a folder path (Node), a URL (fetch), or a reader. */
export type PackageSource = string | URL | { name: string; read(file: string): Promise<Uint8Array> };

export interface LoadOptions {
  backend?: Backend;
  /** the onnxruntime module to use (default: imported by backend name) */
  ort?: unknown;
  variant?: Variant;
  cache?: CacheMode;
  /** intra-op threads: at most max(64, 4 per core), as the Python runtime */
  threads?: number;
  spinning?: boolean;
  /** check files against config.json's sha256 (default true) */
  verify?: boolean;
  maxQualityLoss?: number | null;
}

/** GenerationOptions of the Python runtime (camelCase or snake_case names). */
export interface GenerationOptions {
  maxNewTokens?: number | null;
  minNewTokens?: number;
  sampling?: boolean;
  temperature?: number;
  topK?: number;
  topP?: number;
  seed?: number | bigint | null; // above 2^53: a BigInt (a Number there is refused: rounded)
  numBeams?: number;
  lengthPenalty?: number;
  earlyStopping?: boolean;
  numHypotheses?: number;
  repetitionPenalty?: number;
  ignoreEos?: boolean;
  forcedEndToken?: number | null;
  noRepeatNgramSize?: number;
  suppressSequences?: (string | number[])[];
  endToken?: (string | number)[];
  /** texts that end an output (it is cut before them) */
  stop?: string[];
  maxInputLength?: number;
  [snakeCase: string]: unknown;
}

/** A language code, or one per text (null: the model's default for that text). */
export type LanguageArg = string | (string | null)[] | null;

export interface TextOptions extends DecodeOptions {
  /** a multilingual translator's source language (its tokenizer's code: "eng_Latn", "en_XX") */
  sourceLang?: LanguageArg;
  /** its target language ("deu_Latn"): forced after the decoder start; one per text mixes them */
  targetLang?: LanguageArg;
  /** cut sources longer than the model's max_len (else a RangeError) */
  truncate?: boolean;
}

export interface DecodeOptions extends GenerationOptions {
  /** also return each chosen token's log-probability (greedy, sampling) */
  scores?: boolean;
  cache?: "inplace" | "refeed";
  /** forced first tokens of each translation (ids per input; run(): texts or ids) */
  targetPrefix?: (number[] | string | null)[] | null;
  /** streaming: each step's new tokens (greedy and sampling) */
  onToken?: (rows: number[], tokens: number[]) => void | Promise<void>;
  stopTest?: (row: number, tokens: number[]) => boolean;
}

export interface Hypothesis {
  tokens: number[];
  score: number;
  logProbs: number[] | null;
}

export interface DecodeResult {
  /** the best hypothesis per input */
  ids: number[][];
  hypotheses: Hypothesis[][];
  logProbs?: number[][];
  msPerToken: number;
  steps: number;
}

export interface TextResult {
  input: string;
  ids: number[];
  text: string;
  ms_per_token: number;
  hypotheses: { text: string; ids: number[]; score: number; log_probs: number[] }[];
  log_probs?: number[];
}

export interface ChatMessage {
  role: string;
  content?: string;
  [key: string]: unknown;
}

export class Model {
  readonly backend: Backend;
  readonly family: "encoder-decoder" | "decoder-only";
  readonly variant: string;
  readonly variantReason: string;
  readonly cacheMode: "inplace" | "refeed";
  readonly maxLen: number;
  readonly vocabSize: number;
  readonly padId: number;
  readonly bosId: number;
  readonly eosId: number;
  /** generation_config.json's fields this runtime does not apply */
  readonly ignored: string[];
  /** the package's defaults under `options`, validated (snake_case keys) */
  options(options?: GenerationOptions): Record<string, unknown>;
  encode(text: string): number[];
  decode(ids: number[]): string;
  /** a multilingual translator's language codes ([] for a one-pair model) */
  readonly languages: string[];
  /** RangeError (naming close matches) for an unknown code or a missing target language */
  checkLanguages(sourceLang?: string | null, targetLang?: string | null): void;
  /** the tokens forced after the decoder start (a target language's, or forced_bos_token_id) */
  forcedIds(targetLang?: string | null): number[];
  /** a text's source ids in the model's frame (language token, </s>); [] for empty text */
  sourceIds(text: string, options?: { sourceLang?: string | null; truncate?: boolean; maxInputLength?: number }): number[];
  run(texts: string[], options?: TextOptions): Promise<TextResult[]>;
  stream(text: string, options?: TextOptions): AsyncGenerator<string>;
  chatPrompt(messages: ChatMessage[], options?: { addGenerationPrompt?: boolean }): Promise<string>;
  chat(messages: ChatMessage[], options?: DecodeOptions): Promise<string>;
  translateIds(sources: number[][], options?: DecodeOptions): Promise<number[][]>;
  generateIds(prompts: number[][], options?: DecodeOptions): Promise<number[][]>;
  decodeIds(inputs: number[][], options?: DecodeOptions): Promise<DecodeResult>;
  release(): Promise<void>;
}

export function loadPackage(source: PackageSource, options?: LoadOptions): Promise<Model>;
export function pickVariant(config: object, maxQualityLoss?: number | null): [string, string];
export function makeOptions(defaults?: object, options?: GenerationOptions): Record<string, unknown>;
/** GenerationOptions fields the JavaScript runtime refuses (sliding_window, return_alternatives, structured output). */
export const UNSUPPORTED_OPTIONS: readonly string[];
export function cutAtStop(text: string, stops: string[], start?: number): string;
/** why a tokenizer.json's regexes could hang encoding, or null */
export function regexProblem(tokenizer: unknown): string | null;

export interface EmbedLoadOptions {
  backend?: "node" | "wasm";
  ort?: unknown;
  variant?: "fp32" | "int8" | "int4" | "int8-dynamic";
  /** rows per onnxruntime call (texts sorted by length first); default 32 */
  batchSize?: number;
  threads?: number;
  spinning?: boolean;
  verify?: boolean;
}

/** An encoder package's sentence embeddings (the Python runtime's Embedder). */
export class Embedder {
  readonly backend: "node" | "wasm";
  readonly variant: string;
  readonly dimension: number;
  readonly maxSeqLength: number;
  readonly normalized: boolean;
  /** each text's ids, special tokens included; truncate (default true) cuts at maxSeqLength */
  ids(texts: string[], options?: { truncate?: boolean }): number[][];
  /** one Float32Array of `dimension` numbers per text, in the texts' order */
  embed(texts: string[], options?: { truncate?: boolean }): Promise<Float32Array[]>;
  release(): Promise<void>;
}

/** A cross-encoder's package: (query, document) pairs -> its classifier's logits. */
export class Reranker extends Embedder {
  pairIds(query: string, documents: string[], options?: { truncate?: boolean }): { ids: number[]; types: number[] }[];
  /** one logit per document (one label), else one array of num_labels logits */
  score(query: string, documents: string[], options?: { truncate?: boolean }): Promise<number[] | number[][]>;
}

/** Load an encoder package (config.json family "encoder"): a Reranker for a cross-encoder. */
export function loadEmbedder(source: PackageSource, options?: EmbedLoadOptions): Promise<Embedder | Reranker>;

/** the package contract, generated from edgeformer.core (contract.mjs) */
export const CONTRACT: Record<string, any>;
export const PACKAGE_FORMAT: string;
export const FORMAT_VERSION: number;
export const READABLE_VERSIONS: number[];
export const VARIANTS: string[];
export const BACKENDS: Backend[];
