// Reading and checking a model package, as the Python runtime does (runtime/package.py,
// core/schema.py), from the one contract both runtimes read: contract.mjs, generated from
// edgeformer.core (`python -m edgeformer.core.contract --write runtime/js/contract.mjs`).
// Every problem is a PackageError naming the file, key and value.

import CONTRACT from "./contract.mjs";

export { CONTRACT };

/** A package that cannot be used (bad file, version, checksum, IO names): one clear message. */
export class PackageError extends Error {
  constructor(message) {
    super(message);
    this.name = "PackageError";
  }
}

export const isNode = typeof process !== "undefined" && !!process.versions?.node;
const FILES = CONTRACT.files;
const nodeOs = isNode ? await import("node:os") : null;
const show = (v) => (v === undefined ? "None" : JSON.stringify(v));

// ---- files: a folder on disk (Node) or a base URL (browser, or any fetch) -------------------

const plainName = (name) =>
  typeof name === "string" && name !== "" && name !== "." && name !== ".." && !/[/\\\0]/.test(name);

/** Reads a package's files by name. `source`: a folder path (Node), a URL string ending in "/"
 * or a URL object (fetch), or an object {name, read(file) -> Promise<Uint8Array>}. */
export async function fileSource(source) {
  if (source && typeof source === "object" && typeof source.read === "function") return source;
  const url = source instanceof URL ? source.href : String(source);
  if (!isNode || /^(https?|blob|data):/.test(url)) {
    const base = url.endsWith("/") ? url : `${url}/`;
    return {
      name: base,
      async read(file) {
        const res = await fetch(new URL(file, base));
        if (!res.ok) {
          const why = res.status === 404 ? `is missing ${file}` : `${file}: HTTP ${res.status}`;
          throw new PackageError(`model package ${base} ${why}`);
        }
        return new Uint8Array(await res.arrayBuffer());
      },
    };
  }
  const fs = await import("node:fs/promises");
  const path = await import("node:path");
  let dir = path.resolve(url.startsWith("file:") ? new URL(url).pathname : url);
  let stat = await fs.stat(dir).catch(() => null);
  if (!stat && plainName(url)) {
    // a bundled package's name (m30k-en-de, shakespeare: runtime/pretrained/NAME, as
    // runtime/package.py's resolve_package) where no folder of that name exists here
    const bundled = path.resolve(new URL(`../pretrained/${url}`, import.meta.url).pathname);
    const found = await fs.stat(path.join(bundled, FILES.config)).catch(() => null);
    if (found?.isFile()) [dir, stat] = [bundled, await fs.stat(bundled)];
  }
  if (!stat?.isDirectory()) throw new PackageError(`model package not found: ${dir} is not a folder`);
  const realDir = await fs.realpath(dir);
  const locate = async (file) => {
    // a plain file name whose real path stays in the folder; the same error whether or not an
    // outside target exists
    const real = plainName(file) ? await fs.realpath(path.join(dir, file)).catch(() => null) : null;
    if (real !== null && path.dirname(real) !== realDir) {
      throw new PackageError(
        `model package ${dir}: ${show(file)} is not a file name inside the package ` +
          "(paths, '..' and links out of the package are refused)",
      );
    }
    if (real === null || !(await fs.stat(real)).isFile())
      throw new PackageError(`model package ${dir} is missing ${file}`);
    return real;
  };
  return {
    name: dir,
    local: true,
    path: (file) => path.join(dir, file),
    inside: (file) =>
      plainName(file) &&
      fs.realpath(path.join(dir, file)).then(
        (real) => path.dirname(real) === realDir,
        () => path.dirname(path.resolve(dir, file)) === dir, // missing: judged by its name
      ),
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

export async function sha256(bytes) {
  if (isNode) {
    const { createHash } = await import("node:crypto");
    return createHash("sha256").update(bytes).digest("hex");
  }
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

// JSON nested deeper than this is refused (Python's parser gives up near its recursion limit,
// 1,000; V8's parses 100,000 levels): a package's files nest fewer than 20 deep
const MAX_JSON_DEPTH = 500;

/** The deepest nesting of arrays and objects in JSON text (strings skipped). */
function jsonDepth(text) {
  let depth = 0;
  let most = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92) i++; // backslash: skip the escaped character
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 || c === 91) {
      if (++depth > most) most = depth;
    } else if (c === 125 || c === 93) depth--;
  }
  return most;
}

/** A package's JSON file, parsed: PackageError for bad UTF-8, invalid JSON or deep nesting. */
export function parseJson(bytes, where) {
  let text;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new PackageError(`${where} is not valid JSON (not UTF-8)`);
  }
  if (jsonDepth(text) > MAX_JSON_DEPTH) throw new PackageError(`${where} is nested too deeply to be a package file`);
  try {
    return JSON.parse(text);
  } catch (e) {
    if (e instanceof RangeError) throw new PackageError(`${where} is nested too deeply to be a package file`);
    throw new PackageError(`${where} is not valid JSON (${String(e.message).slice(0, 120)})`);
  }
}

// ---- config.json (core/schema.py PackageConfig.from_json) ------------------------------------

const isInt = (v) => Number.isInteger(v) && typeof v === "number";
const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

function obj(where, key, value) {
  if (!isObj(value)) throw new PackageError(`${where}: ${key} must be a JSON object, got ${show(value)}`);
  return value;
}

function int(where, key, value, low, high = null) {
  if (!isInt(value)) throw new PackageError(`${where}: ${key} must be an integer, got ${show(value)}`);
  if (value < low || (high !== null && value >= high)) {
    const bound = high === null ? `>= ${low}` : `in [${low}, ${high})`;
    throw new PackageError(`${where}: ${key} must be ${bound}, got ${value}`);
  }
  return value;
}

function names(where, key, value) {
  for (const [name, file] of Object.entries(obj(where, key, value))) {
    if (typeof file !== "string") throw new PackageError(`${where}: ${key}.${name} must be a string, got ${show(file)}`);
  }
  return value;
}

/** The IO names of every graph of a package of this family, format and depth (contract.io). */
export function ioNames(family, nLayers, version) {
  const out = {};
  for (const [graph, ios] of Object.entries(CONTRACT.io[family][String(version)])) {
    out[graph] = {};
    for (const [kind, segments] of Object.entries(ios)) {
      out[graph][kind] = segments.flatMap((s) =>
        s.names ?? Array.from({ length: nLayers }, (_, i) => s.per_layer.map((t) => t.replace("{i}", i))).flat(),
      );
    }
  }
  return out;
}

/** JSON values equal as Python compares them (objects: any key order; lists: in order). */
const canonical = (v) =>
  Array.isArray(v)
    ? v.map(canonical)
    : v && typeof v === "object"
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]))
      : v;
const sameJson = (a, b) => JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));

/** config.json's `model` -> our field names (format 2 stored ours), sizes bounded, the rules of
 * ModelConfig the runtime depends on checked; PackageError names the stored key. */
function checkModel(where, stored, family, version) {
  const fields = CONTRACT.model.fields;
  const ourName = {};
  for (const [ours, f] of Object.entries(fields)) ourName[version === 2 ? ours : f.stored] = ours;
  const storedName = (ours) => `model.${version === 2 ? ours : (fields[ours]?.stored ?? ours)}`;
  const m = {};
  for (const [k, v] of Object.entries(stored)) m[ourName[k] ?? k] = v;
  for (const [name, most] of Object.entries(CONTRACT.model.limits)) {
    int(where, storedName(name), m[name], 1, most + 1);
  }
  if ((m.family ?? family) !== family) {
    throw new PackageError(`${where}: model.family ${show(m.family)} != ${show(family)}`);
  }
  const unknown = Object.keys(m).filter((k) => !(k in fields)).sort();
  const bad = (msg) => {
    throw new PackageError(`${where}: model: invalid ModelConfig: ${msg}`);
  };
  if (unknown.length) bad(`unknown keys ${JSON.stringify(unknown)}`);
  for (const [k, f] of Object.entries(fields)) if (!(k in m)) m[k] = f.default;
  m.family = family;
  for (const [k, f] of Object.entries(fields)) {
    if (f.choices && !f.choices.includes(m[k])) bad(`${k}=${show(m[k])}, expected one of ${JSON.stringify(f.choices)}`);
  }
  if (!isInt(m.d_ff) || m.d_ff < 1) bad(`d_ff=${show(m.d_ff)} must be a positive integer`);
  if (family === "encoder-decoder" && !(isInt(m.n_encoder_layers) && m.n_encoder_layers >= 1)) {
    bad(`n_encoder_layers=${show(m.n_encoder_layers)} must be >= 1 for an encoder-decoder`);
  }
  const kv = m.n_kv_heads;
  if (kv !== null && (!isInt(kv) || kv < 1 || m.n_heads % kv)) {
    bad(`n_kv_heads=${show(kv)} must be a positive divisor of n_heads=${m.n_heads}`);
  }
  const dh = m.d_head;
  if (dh !== null && (!isInt(dh) || dh < 1)) bad(`d_head=${show(dh)} must be a positive integer`);
  if (dh === null && m.d_model % m.n_heads) bad(`d_model=${m.d_model} is not divisible by n_heads=${m.n_heads}`);
  const ids = { pad_id: m.pad_id, bos_id: m.bos_id, eos_id: m.eos_id };
  for (const [k, v] of Object.entries(ids)) {
    if (!isInt(v) || v < 0 || v >= m.vocab_size) bad(`${k}=${show(v)} is outside the vocabulary (size ${m.vocab_size})`);
  }
  // the decoder starts from bos_id, which may be the padding id (Marian, T5) or the EOS (BART,
  // mBART-50, M2M100, NLLB: fed first, it ends nothing); eos_id differs from pad_id
  if (family === "encoder-decoder" && m.eos_id === m.pad_id) {
    bad(`eos_id must differ from pad_id, got ${JSON.stringify(ids)}`);
  }
  if (family === "decoder-only" && m.pad_id === m.bos_id && m.bos_id !== m.eos_id) {
    bad(`pad_id and bos_id must differ unless both equal eos_id, got ${JSON.stringify(ids)}`);
  }
  const w = m.attention_window;
  if (w !== null && (!isInt(w) || w < 1)) bad(`attention_window=${show(w)} must be a positive integer`);
  const lt = m.layer_types;
  if (lt !== null && (!Array.isArray(lt) || lt.length !== m.n_decoder_layers)) {
    bad(`layer_types must list ${m.n_decoder_layers} layer types, got ${show(lt)}`);
  }
  checkEncoderDecoder(m, family, bad);
  m.kv_heads = kv ?? m.n_heads;
  m.head_dim = dh ?? m.d_model / m.n_heads;
  m.cache_head_size = m.head_dim; // the graphs' (zero-padded) head size, read from the decoder
  return m;
}

/** Embedding norms, their own positions, relative positions: encoder-decoder only
 * (core/config.py ModelConfig._check_encoder_decoder). */
function checkEncoderDecoder(m, family, bad) {
  const extras = {
    embedding_norm: pyTruthy(m.embedding_norm) ? m.embedding_norm : null,
    positional: m.positional === "relative" ? "relative" : null,
    separate_positions: pyTruthy(m.separate_positions) ? m.separate_positions : null,
  };
  const given = Object.entries(extras).filter(([, v]) => v !== null);
  if (family === "decoder-only" && given.length) bad(`${JSON.stringify(Object.fromEntries(given))} are supported for encoder-decoder models`);
  for (const name of ["relative_buckets", "relative_max_distance"]) {
    const v = m[name];
    if (v !== null && m.positional !== "relative") bad(`${name} needs positional='relative'`);
    if (v !== null && !(isInt(v) && v >= 2)) bad(`${name}=${pyShow(v)} must be an integer >= 2`);
  }
  if (pyTruthy(m.separate_positions) && m.positional !== "learned") bad("separate_positions needs positional='learned'");
  const hs = m.head_scale;
  if (hs !== null && !(typeof hs === "number" && hs > 0 && hs < Infinity)) bad(`head_scale=${pyShow(hs)} must be a positive number (or none)`);
}

/** config.json checked as core/schema.py checks it: {cfg, model} (model: our field names). */
export function checkConfig(data, where) {
  obj(where, "the top level", data);
  if (data.format !== CONTRACT.package_format) throw new PackageError(`${where}: not an edgeformer model package (format)`);
  const fmt = data.format_version;
  if (!CONTRACT.readable_versions.includes(fmt)) {
    throw new PackageError(
      `${where}: format_version ${show(fmt)}; this runtime reads versions ` +
        `${CONTRACT.readable_versions.join(", ")} (re-export the checkpoint with this edgeformer, ` +
        "or update edgeformer-runtime)",
    );
  }
  const family = data.family;
  if (family === CONTRACT.encoder.family) {
    throw new PackageError(`${where}: an encoder (sentence-embedding) package: load it with loadEmbedder (embeddings, or a cross-encoder's scores)`);
  }
  if (!CONTRACT.families.includes(family)) {
    throw new PackageError(`${where}: family must be one of ${JSON.stringify(CONTRACT.families)}, got ${show(family)}`);
  }
  const model = checkModel(where, obj(where, "model", data.model), family, fmt);
  const special = obj(where, "special_tokens", data.special_tokens);
  for (const k of CONTRACT.special_tokens.required) int(where, `special_tokens.${k}`, special[k], 0, model.vocab_size);
  for (const k of CONTRACT.special_tokens.optional) {
    if (special[k] !== undefined && special[k] !== null) int(where, `special_tokens.${k}`, special[k], 0, model.vocab_size);
  }
  const want = ioNames(family, model.n_decoder_layers, fmt);
  if (!sameJson(obj(where, "graphs", data.graphs), want)) {
    throw new PackageError(`${where}: graphs do not match the package contract of a ${family}`);
  }
  const variants = obj(where, "variants", data.variants);
  for (const [name, raw] of Object.entries(variants)) {
    const key = `variants.${name}`;
    const entry = obj(where, key, raw);
    const files = names(where, `${key}.files`, entry.files);
    if (!sameJson(Object.keys(files).sort(), Object.keys(want).sort())) {
      throw new PackageError(`${where}: ${key}.files must name the graphs ${JSON.stringify(Object.keys(want).sort())}`);
    }
    const ortGraphs = Object.values(files).every((f) => f.endsWith(CONTRACT.ort_suffix));
    if (!(ortGraphs && (entry.weights ?? null) === null) && typeof entry.weights !== "string") {
      throw new PackageError(`${where}: ${key}.weights must be a file name, got ${show(entry.weights)}`);
    }
    if (entry.measured) checkMeasured(where, `${key}.measured`, entry.measured);
  }
  if (!variants.fp32) throw new PackageError(`${where}: variants has no fp32`);
  const version = data.min_onnxruntime ?? CONTRACT.min_onnxruntime;
  if (typeof version !== "string") throw new PackageError(`${where}: min_onnxruntime must be a version string, got ${show(version)}`);
  names(where, "files", data.files);
  obj(where, "task", data.task ?? {});
  checkSource(where, data.source);
  int(where, "opset", data.opset ?? 21, 1);
  return { cfg: data, model };
}

/** config.json of an encoder package (family "encoder") checked as core/schema.py's
 * EncoderPackageConfig.from_json checks it: {cfg, model} (model: Hugging Face's names). */
export function checkEncoderConfig(data, where) {
  obj(where, "the top level", data);
  if (data.format !== CONTRACT.package_format) throw new PackageError(`${where}: not an edgeformer model package (format)`);
  const E = CONTRACT.encoder;
  if (data.family !== E.family) {
    throw new PackageError(`${where}: a ${show(data.family)} package, not an encoder (sentence-embedding) one: load it with loadPackage`);
  }
  if (!CONTRACT.readable_versions.includes(data.format_version)) {
    throw new PackageError(
      `${where}: format_version ${show(data.format_version)}; this runtime reads versions ` +
        `${CONTRACT.readable_versions.join(", ")} (re-export the model with this edgeformer, or update edgeformer-runtime)`,
    );
  }
  const m = obj(where, "model", data.model);
  for (const k of E.model_keys) int(where, `model.${k}`, m[k], 1, E.limits[k] + 1);
  if (m.hidden_size % m.num_attention_heads) throw new PackageError(`${where}: model.hidden_size must divide by num_attention_heads`);
  if (typeof m.architecture !== "string") throw new PackageError(`${where}: model.architecture must be a string, got ${show(m.architecture)}`);
  const oneOf = (key, value, allowed) => {
    if (!allowed.includes(value)) throw new PackageError(`${where}: model.${key} must be one of ${JSON.stringify(allowed)}, got ${show(value)}`);
  };
  oneOf("hidden_act", m.hidden_act, E.activations);
  oneOf("pooling", m.pooling, E.pooling_modes);
  if (typeof m.normalize !== "boolean") throw new PackageError(`${where}: model.normalize must be true or false, got ${show(m.normalize)}`);
  if (typeof m.layer_norm_eps !== "number") throw new PackageError(`${where}: model.layer_norm_eps must be a number, got ${show(m.layer_norm_eps)}`);
  int(where, "model.position_offset", m.position_offset, 0);
  int(where, "model.max_seq_length", m.max_seq_length, 2, m.max_position_embeddings - m.position_offset + 1);
  const labels = int(where, "model.num_labels", m.num_labels ?? 0, 0, E.max_labels + 1);
  if (labels) oneOf("classifier_act", m.classifier_act, E.classifier_activations);
  int(where, "pad_id", data.pad_id, 0, m.vocab_size);
  const want = labels ? E.classifier_io : E.io;
  if (!sameJson(obj(where, "graphs", data.graphs), want)) {
    throw new PackageError(`${where}: graphs do not match the package contract of an encoder`);
  }
  for (const [name, raw] of Object.entries(obj(where, "variants", data.variants))) {
    const key = `variants.${name}`;
    const entry = obj(where, key, raw);
    const files = names(where, `${key}.files`, entry.files);
    if (!sameJson(Object.keys(files).sort(), Object.keys(want).sort())) {
      throw new PackageError(`${where}: ${key}.files must name the graphs ${JSON.stringify(Object.keys(want).sort())}`);
    }
    if (typeof entry.weights !== "string") throw new PackageError(`${where}: ${key}.weights must be a file name, got ${show(entry.weights)}`);
    for (const [k, x] of Object.entries(obj(where, `${key}.measured`, entry.measured ?? {}))) {
      if (!E.measured_keys.includes(k) || typeof x !== "number" || !Number.isFinite(x)) {
        throw new PackageError(`${where}: ${key}.measured.${k}: one of ${JSON.stringify(E.measured_keys)}, a number`);
      }
    }
  }
  if (!data.variants.fp32) throw new PackageError(`${where}: variants has no fp32`);
  if (typeof (data.min_onnxruntime ?? "") !== "string") {
    throw new PackageError(`${where}: min_onnxruntime must be a version string, got ${show(data.min_onnxruntime)}`);
  }
  names(where, "files", data.files);
  checkSource(where, data.source);
  int(where, "opset", data.opset ?? 21, 1);
  return { cfg: data, model: m };
}

function checkSource(where, source) {
  for (const [k, v] of Object.entries(obj(where, "source", source ?? {}))) {
    if (typeof v !== "string") throw new PackageError(`${where}: source.${k} must be a string, got ${show(v)}`);
    if (v.length > 200) throw new PackageError(`${where}: source.${k} is longer than 200 characters`);
  }
}

function checkMeasured(where, key, value) {
  obj(where, key, value);
  for (const name of CONTRACT.measured_keys) {
    const x = value[name];
    if (typeof x !== "number" || !(x >= 0 && x < Infinity)) {
      throw new PackageError(`${where}: ${key}.${name} must be a number >= 0, got ${show(x)}`);
    }
    if (name === "agreement" && x > 1) throw new PackageError(`${where}: ${key}.agreement must be in [0, 1], got ${x}`);
  }
  for (const name of CONTRACT.held_out_keys) {
    const x = value[name];
    if (x !== undefined && x !== null && (typeof x !== "number" || !(x >= 0 && x < Infinity))) {
      throw new PackageError(`${where}: ${key}.${name} must be a number >= 0, got ${show(x)}`);
    }
  }
}

/** The files a package's config names, checked before any is read: each a plain name inside
 * the folder and in the checksum list (runtime/package.py load_package). */
export async function checkNames(cfg, files, where) {
  const listed = cfg.files;
  const referenced = Object.values(cfg.variants).flatMap((v) => [
    ...Object.values(v.files),
    ...(v.weights ? [v.weights] : []),
  ]);
  for (const name of [...Object.keys(listed), ...referenced, FILES.tokenizer]) {
    const inside = files.inside ? await files.inside(name) : plainName(name);
    if (!inside) {
      throw new PackageError(
        `${where}: ${show(name)} is not a file name inside the package ` +
          "(paths, '..' and links out of the package are refused)",
      );
    }
    if (!(name in listed)) throw new PackageError(`${where}: ${show(name)} is not in the checksum list`);
  }
}

// ---- ONNX graphs: the protobuf fields the checks need, without an ONNX library --------------

function varint(buf, i) {
  let value = 0;
  let scale = 1;
  for (;;) {
    if (i >= buf.length) throw new Error("truncated varint");
    const b = buf[i++];
    value += (b & 0x7f) * scale;
    if (!(b & 0x80)) return [value, i];
    scale *= 128;
    if (scale > 2 ** 63) throw new Error("varint too long");
  }
}

/** The fields of a protobuf message in buf[start, end): [field, wire type, start, end]. */
function* fieldsOf(buf, start, end) {
  let i = start;
  while (i < end) {
    let key;
    [key, i] = varint(buf, i);
    const field = Math.floor(key / 8);
    const wire = key & 7;
    const at = i;
    if (wire === 0) [, i] = varint(buf, i);
    else if (wire === 1) i += 8;
    else if (wire === 5) i += 4;
    else if (wire === 2) {
      let n;
      [n, i] = varint(buf, i);
      yield [field, wire, i, i + n];
      i += n;
      if (i > end) throw new Error("truncated field");
      continue;
    } else throw new Error(`wire type ${wire}`);
    if (i > end) throw new Error("truncated field");
    yield [field, wire, at, i];
  }
}

const text = new TextDecoder();

function entry(buf, start, end) {
  let key = "";
  let value = "";
  for (const [f, w, s, e] of fieldsOf(buf, start, end)) {
    if (w !== 2) continue;
    if (f === 1) key = text.decode(buf.subarray(s, e));
    if (f === 2) value = text.decode(buf.subarray(s, e));
  }
  return [key, value];
}

/** An ONNX model's external data files (every TensorProto's external_data "location", in any
 * graph, subgraph, attribute or function) and its metadata_props, read from its bytes. */
export function onnxFacts(buf) {
  const locations = new Set();
  const metadata = {};
  const tensor = (s, e) => {
    for (const [f, w, a, b] of fieldsOf(buf, s, e)) {
      if (f !== 13 || w !== 2) continue; // external_data
      const [k, v] = entry(buf, a, b);
      if (k === "location") locations.add(v);
    }
  };
  const sparse = (s, e) => {
    for (const [f, w, a, b] of fieldsOf(buf, s, e)) if ((f === 1 || f === 2) && w === 2) tensor(a, b);
  };
  const attribute = (s, e) => {
    for (const [f, w, a, b] of fieldsOf(buf, s, e)) {
      if (w !== 2) continue;
      if (f === 5 || f === 10) tensor(a, b);
      else if (f === 6 || f === 11) graph(a, b);
      else if (f === 22 || f === 23) sparse(a, b);
    }
  };
  const node = (s, e) => {
    for (const [f, w, a, b] of fieldsOf(buf, s, e)) if (f === 5 && w === 2) attribute(a, b);
  };
  const graph = (s, e) => {
    for (const [f, w, a, b] of fieldsOf(buf, s, e)) {
      if (w !== 2) continue;
      if (f === 1) node(a, b);
      else if (f === 5) tensor(a, b);
      else if (f === 15) sparse(a, b);
    }
  };
  for (const [f, w, a, b] of fieldsOf(buf, 0, buf.length)) {
    if (w !== 2) continue;
    if (f === 7) graph(a, b);
    else if (f === 14) {
      const [k, v] = entry(buf, a, b);
      metadata[k] = v;
    } else if (f === 25) {
      for (const [g, x, c, d] of fieldsOf(buf, a, b)) if (g === 7 && x === 2) node(c, d); // FunctionProto.node
    }
  }
  return { locations, metadata };
}

// ---- generation_config.json (core/generation_config.py) --------------------------------------

/** generation_config.json -> ({option: value} it sets, [fields not applied]), as the Python
 * runtime reads it; the settings are validated with the caller's options (decoding.mjs). */
export function generationSettings(data, cfg, where) {
  obj(where, "the top level", data);
  const gc = CONTRACT.generation_config;
  const out = {};
  for (const [hf, ours] of Object.entries(gc.fields)) {
    if (data[hf] !== undefined && data[hf] !== null) out[ours] = data[hf];
  }
  if (out.early_stopping === "never") out.early_stopping = false;
  if (out.sampling && !("top_k" in out)) out.top_k = gc.hf_sampling_top_k;
  const eos = data.eos_token_id;
  if (Array.isArray(eos)) out.end_token = eos.filter((i) => i !== cfg.special_tokens.eos_id);
  const forced = out.forced_end_token;
  if (Array.isArray(forced) && forced.length === 1) out.forced_end_token = forced[0];
  const length = data.max_length;
  if (cfg.family === "encoder-decoder" && !("max_new_tokens" in out) && length !== undefined && length !== null) {
    if (!isInt(length) || length < 2) throw new PackageError(`${where}: max_length must be an integer >= 2, got ${show(length)}`);
    out.max_new_tokens = length - 1;
  }
  const shortest = data.min_length;
  if (cfg.family === "encoder-decoder" && !("min_new_tokens" in out) && pyTruthy(shortest)) {
    if (!isInt(shortest) || shortest < 0) throw new PackageError(`${where}: min_length must be an integer >= 0, got ${pyShow(shortest)}`);
    out.min_new_tokens = Math.max(shortest - 1, 0); // the decoder start counted
  }
  const known = new Set([...Object.keys(gc.fields), ...gc.understood, ...gc.no_effect]);
  if (cfg.family === "encoder-decoder") for (const k of gc.encoder_decoder_fields) known.add(k);
  const ignored = Object.keys(data)
    .filter((k) => !known.has(k) && data[k] !== null && !(k in gc.neutral && sameJson(data[k], gc.neutral[k])))
    .sort();
  if (cfg.family === "decoder-only" && data.max_length !== undefined && data.max_length !== null) {
    ignored.push("max_length (counts the prompt: use max_new_tokens)");
  }
  return { settings: out, ignored };
}

/** An encoder-decoder's generation_config.json forced_bos_token_id (null when unset: the token
 * forced after the decoder start, e.g. BART's <s>), or a PackageError (core/generation_config.py
 * forced_first_token). */
export function forcedFirstToken(data, vocab, where) {
  let token = isObj(data) ? (data.forced_bos_token_id ?? null) : null;
  if (Array.isArray(token) && token.length === 1) token = token[0];
  if (token !== null && !(isInt(token) && token >= 0 && token < vocab)) {
    throw new PackageError(`${where}: forced_bos_token_id must be a token id < ${vocab}`);
  }
  return token;
}

/** Python's truth value of a JSON value (0, "", [], {}, false and null are false). */
const pyTruthy = (v) =>
  !(v === null || v === undefined || v === false || v === 0 || v === "" || (Array.isArray(v) && !v.length) || (isObj(v) && !Object.keys(v).length));
/** A JSON value in a message as Python's repr() writes it (strings quoted with '). */
const pyShow = (v) => (typeof v === "string" ? `'${v}'` : v === true ? "True" : v === false ? "False" : show(v));

// ---- the graphs' sizes against config.json (runtime/model.py check_graph_sizes) --------------

/** {axis: size} that an input or output of this name must have. */
function fixedDims(name, H, G, D, V) {
  if (name === "logits") return { 1: V };
  if (name.endsWith(".last_key") || name.endsWith(".last_value")) return { 2: H * D };
  if (name.includes(".encoder.")) return { 1: H, 3: D };
  if (name.endsWith(".key") || name.endsWith(".value")) return { 1: G, 3: D };
  return {};
}

/** config.json's sizes against a graph's metadata (when read) and its IO shapes: the graphs'
 * head size (zero-padded) on success, else a PackageError naming the size and both values. */
export function checkGraphSizes(model, graph, metadata, ios, where) {
  const gm = CONTRACT.graph_metadata;
  const want = {};
  for (const [ours, stored] of Object.entries(gm.keys)) {
    want[`${gm.prefix}${stored}`] = String(ours === "n_kv_heads" ? model.kv_heads : model[ours]);
  }
  for (const [key, value] of Object.entries(want)) {
    if (metadata && key in metadata && metadata[key] !== value) {
      throw new PackageError(
        `${where}: config.json's model.${key.slice(gm.prefix.length)} is ${value} but the ${graph} graph was built for ${metadata[key]}`,
      );
    }
  }
  const head = metadata?.[gm.attention_head_size] ?? String(model.head_dim);
  if (!/^\d+$/.test(head) || Number(head) < model.head_dim) {
    throw new PackageError(`${where}: the ${graph} graph's attention head size is ${show(head)}, the config's head dim is ${model.head_dim}`);
  }
  const D = Number(head);
  for (const io of ios) {
    const shape = io.shape ?? io.dims ?? [];
    for (const [axis, size] of Object.entries(fixedDims(io.name, model.n_heads, model.kv_heads, D, model.vocab_size))) {
      const got = shape[Number(axis)];
      if (typeof got === "number" && got !== size) {
        throw new PackageError(
          `${where}: config.json's sizes disagree with the ${graph} graph: ${io.name} has shape ` +
            `${JSON.stringify(shape)}, the config gives ${size} at axis ${axis}`,
        );
      }
    }
  }
  return D;
}

/** The most threads a pool may ask for (runtime/session.py max_threads). */
export function maxThreads() {
  const b = CONTRACT.bounds;
  const cores = nodeOs?.cpus().length || globalThis.navigator?.hardwareConcurrency || 1;
  return Math.max(b.max_threads_floor, b.max_threads_per_core * cores);
}

/** The parsed config.json of a package's files (`where` names the package in errors). */
export async function readConfig(files, where) {
  let bytes;
  try {
    bytes = await files.read(FILES.config);
  } catch (e) {
    if (e instanceof PackageError) throw new PackageError(`${where} has no ${FILES.config}`);
    throw e;
  }
  return parseJson(bytes, `${where}: ${FILES.config}`);
}

/** "1.22.0" -> a string that compares as the version does ("00001.00022.00000"). */
const versionTuple = (v) =>
  [...(String(v).match(/\d+/g) ?? []), "0", "0", "0"]
    .slice(0, 3)
    .map((x) => x.padStart(5, "0"))
    .join(".");

/** A PackageError when the onnxruntime module is older than the package's min_onnxruntime. */
export function checkOrtVersion(ort, backend, cfg, where) {
  const have = ort.env?.versions?.[backend === "node" ? "node" : "web"] ?? "0";
  if (versionTuple(have) < versionTuple(cfg.min_onnxruntime ?? CONTRACT.min_onnxruntime)) {
    throw new PackageError(
      `${where} needs onnxruntime >= ${cfg.min_onnxruntime}; this is onnxruntime-${backend === "node" ? "node" : "web"} ${have}`,
    );
  }
}

export function checkThreads(value, name = "threads") {
  if (value === undefined || value === null) return value;
  if (!isInt(value)) throw new RangeError(`${name}=${show(value)} must be an integer`);
  if (value < 1 || value > maxThreads()) throw new RangeError(`${name}=${value} must be in [1, ${maxThreads()}] on this machine`);
  return value;
}
