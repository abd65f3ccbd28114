// Decoding over a step function, as edgeformer.core.decoding does it (the same algorithms, ported
// line by line, so that both runtimes choose the same ids): greedy, sampling (temperature, top-k,
// top-p, numpy's seeded generator), beam search (length penalty, early stopping, n-best), min /
// max new tokens, end tokens, repetition penalty, no-repeat n-grams, suppressed sequences, a
// forced end token, forced prefixes (target prefixes: language tokens) and a stop test.
//
// A model is reached through a stepper:
//   step(tokens)  (N,) ids -> Promise<Float32Array (N * V)> logits of the token after
//   select(rows)  keep / reorder / repeat rows of the cache: row i of the new state is rows[i]
// The caller runs the first pass (encoder + first step, or the prefill) and hands its logits.

import CONTRACT from "./contract.mjs";
import { PCG64 } from "./random.mjs";

const B_ = CONTRACT.bounds;
const FIELDS = CONTRACT.generation_options;
export const OPTION_NAMES = Object.keys(FIELDS);
// structured output's engine, llguidance, has no wasm / JS build (docs/structured.md)
const STRUCTURED = ["response_format", "json_schema", "regex", "grammar"];
/** GenerationOptions fields this runtime refuses (makeOptions says so): its CLI does not list them. */
export const UNSUPPORTED_OPTIONS = ["sliding_window", "return_alternatives", ...STRUCTURED];
const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const CAMEL = Object.fromEntries(OPTION_NAMES.map((n) => [camel(n), n]));

const isInt = (v) => typeof v === "number" && Number.isInteger(v);
const isReal = (v) => typeof v === "number";
const show = (v) => (v === undefined ? "None" : typeof v === "bigint" ? `${v}` : JSON.stringify(v));
// a seed is exact: a safe integer, or a BigInt above 2^53 (a Number there is already rounded,
// so the draws would not be Python's for the seed the caller wrote)
const isSeed = (v) => typeof v === "bigint" || Number.isSafeInteger(v);

/** Options given as camelCase or snake_case keys -> snake_case ({} for none); unknown: error. */
export function optionKeys(options = {}) {
  const out = {};
  for (const [k, v] of Object.entries(options)) {
    if (v === undefined) continue;
    const name = CAMEL[k] ?? (k in FIELDS ? k : null);
    if (name === null) throw new RangeError(`unknown generation option ${k}; valid: ${OPTION_NAMES.map(camel).join(", ")}`);
    out[name] = v;
  }
  return out;
}

/** Options on top of defaults, validated as GenerationOptions.__post_init__: a full options
 * object (snake_case), or a RangeError "invalid generation option: ...". */
export function makeOptions(defaults = {}, options = {}) {
  const given = optionKeys(options);
  if (given.sampling && !("num_beams" in given)) given.num_beams = 1; // sampling turns a default beam search off
  const o = {};
  for (const [k, f] of Object.entries(FIELDS)) o[k] = f.default;
  Object.assign(o, defaults, given);
  validate(o);
  return o;
}

function validate(o) {
  const bad = (msg) => {
    throw new RangeError(`invalid generation option: ${msg}`);
  };
  if (o.max_new_tokens !== null && !isInt(o.max_new_tokens)) bad(`max_new_tokens=${show(o.max_new_tokens)} must be an integer or None`);
  for (const n of ["min_new_tokens", "top_k", "num_beams", "num_hypotheses", "no_repeat_ngram_size", "max_input_length"]) {
    if (!isInt(o[n])) bad(`${n}=${show(o[n])} must be an integer`);
  }
  const forced = o.forced_end_token;
  if (forced !== null && !(isInt(forced) && forced >= 0)) bad(`forced_end_token=${show(forced)} must be a token id >= 0 or None`);
  if (o.seed !== null && isInt(o.seed) && !isSeed(o.seed)) {
    bad(`seed=${show(o.seed)} is above 2^53, where a Number is already rounded (not the seed written): give it as a BigInt`);
  }
  if (o.seed !== null && !isSeed(o.seed)) bad(`seed=${show(o.seed)} must be an integer or None`);
  for (const n of ["temperature", "top_p", "length_penalty", "repetition_penalty"]) {
    if (!isReal(o[n])) bad(`${n}=${show(o[n])} must be a number`);
    if (!Number.isFinite(o[n])) bad(`${n}=${o[n]} must be finite`);
  }
  for (const n of ["sampling", "early_stopping", "ignore_eos", "return_alternatives", "sliding_window"]) {
    if (typeof o[n] !== "boolean") bad(`${n}=${show(o[n])} must be True or False`);
  }
  if (o.max_new_tokens !== null && o.max_new_tokens < 1) bad(`max_new_tokens=${o.max_new_tokens} must be >= 1 (or None: the model's length)`);
  if (o.min_new_tokens < 0 || (o.max_new_tokens !== null && o.min_new_tokens > o.max_new_tokens)) {
    bad(`min_new_tokens=${o.min_new_tokens} must be in [0, max_new_tokens]`);
  }
  if (o.sliding_window) bad("sliding_window is not supported by the JavaScript runtime");
  if (o.return_alternatives) bad("return_alternatives is not supported by the JavaScript runtime");
  for (const n of STRUCTURED) {
    if (o[n] !== null && o[n] !== undefined) bad(`${n} (structured output) is not supported by the JavaScript runtime`);
  }
  if (o.seed !== null && o.seed < 0) bad(`seed=${o.seed} must be >= 0 (or None)`);
  if (!(o.temperature > 0)) bad(`temperature=${o.temperature} must be > 0`);
  if (o.temperature < B_.min_temperature) bad(`temperature=${o.temperature} must be >= ${B_.min_temperature}`);
  if (o.top_k < 0) bad(`top_k=${o.top_k} must be >= 0`);
  if (!(o.top_p > 0 && o.top_p <= 1)) bad(`top_p=${o.top_p} must be in (0, 1]`);
  if (o.num_beams < 1) bad(`num_beams=${o.num_beams} must be >= 1`);
  if (o.num_beams > B_.max_beams) bad(`num_beams=${o.num_beams} must be <= ${B_.max_beams}`);
  if (Math.abs(o.length_penalty) > B_.max_length_penalty) {
    bad(`length_penalty=${o.length_penalty} must be in [-${B_.max_length_penalty}, ${B_.max_length_penalty}]`);
  }
  if (o.sampling && o.num_beams > 1) bad("sampling and beam search (num_beams > 1) cannot be combined");
  if (o.num_hypotheses < 1) bad(`num_hypotheses=${o.num_hypotheses} must be >= 1`);
  if (o.num_hypotheses > B_.max_beams) bad(`num_hypotheses=${o.num_hypotheses} must be <= ${B_.max_beams}`);
  if (!o.sampling && o.num_hypotheses > o.num_beams) bad(`num_hypotheses=${o.num_hypotheses} must be in [1, num_beams] (or use sampling)`);
  if (!(o.repetition_penalty > 0)) bad(`repetition_penalty=${o.repetition_penalty} must be > 0`);
  if (o.no_repeat_ngram_size < 0) bad(`no_repeat_ngram_size=${o.no_repeat_ngram_size} must be >= 0 (0 = off)`);
  if (o.max_input_length < 0) bad(`max_input_length=${o.max_input_length} must be >= 0`);
  const list = (v, name) => {
    if (typeof v === "string" || isInt(v)) return [v];
    if (!Array.isArray(v)) bad(`${name}=${show(v)} must be a list`);
    return v;
  };
  o.end_token = list(o.end_token, "end_token");
  for (const t of o.end_token) {
    if (isInt(t) ? t < 0 : !(typeof t === "string" && t)) bad(`end_token: ${show(t)} must be a token string or an id >= 0`);
  }
  o.stop = list(o.stop, "stop");
  for (const s of o.stop) if (!(typeof s === "string" && s)) bad(`stop: ${show(s)} must be a non-empty string`);
  o.suppress_sequences = typeof o.suppress_sequences === "string" ? [o.suppress_sequences] : o.suppress_sequences;
  if (!Array.isArray(o.suppress_sequences)) bad(`suppress_sequences=${show(o.suppress_sequences)} must be a list`);
  for (const s of o.suppress_sequences) {
    const ok = typeof s === "string" ? !!s.trim() : Array.isArray(s) && s.length > 0 && s.every((t) => isInt(t) && t >= 0);
    if (!ok) bad(`suppress_sequences: ${show(s)} must be a text or a non-empty list of token ids`);
  }
}

/** (options with max_new_tokens fitted to `room`, whether a number asked for was cut). */
export function fitNewTokens(o, room) {
  const asked = o.max_new_tokens;
  const n = asked === null ? room : Math.min(asked, room);
  if (n < 1) throw new RangeError(`invalid generation option: max_new_tokens=${n} must be >= 1 (the input leaves no room)`);
  return [{ ...o, max_new_tokens: n, min_new_tokens: Math.min(n, o.min_new_tokens) }, asked !== null && n < asked];
}

export const ALL_BANNED = "no token can be chosen: every token is banned at this step";

/** log softmax of a row (float64). */
function logSoftmax(row) {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i] > max) max = row[i];
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i] - max);
  const lse = Math.log(sum);
  const out = new Float64Array(row.length);
  for (let i = 0; i < row.length; i++) out[i] = row[i] - max - lse;
  return out;
}

function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) {
    if (Number.isNaN(row[best])) return best;
    if (row[i] > row[best] || Number.isNaN(row[i])) best = i;
  }
  return best;
}

/** Per-row logit adjustments (core.decoding._Penalties): repetition penalty, min length, banned
 * ids, suppressed sequences, no-repeat n-grams, forced end token. */
class Penalties {
  constructor(o, ends, vocab, context, n, banned) {
    this.o = o;
    this.ends = ends;
    this.vocab = vocab;
    const seqs = o.suppress_sequences;
    for (const s of seqs) {
      if (Math.max(...s) >= vocab) throw new RangeError(`suppress_sequences: token id ${Math.max(...s)} >= vocabulary ${vocab}`);
    }
    const endSet = new Set(ends);
    const never = new Set(banned.filter((t) => t >= 0 && t < vocab && !endSet.has(t)));
    for (const s of seqs) if (s.length === 1) never.add(s[0]);
    this.banned = [...never].sort((a, b) => a - b);
    this.sequences = seqs.filter((s) => s.length > 1);
    this.ngram = o.no_repeat_ngram_size;
    this.history = null;
    if (this.ngram > 0 || this.sequences.length) this.history = context ? context.map((c) => [...c]) : Array.from({ length: n }, () => []);
    this.seen = null;
    if (o.repetition_penalty !== 1) {
      this.seen = Array.from({ length: n }, () => new Uint8Array(vocab));
      (context ?? []).forEach((c, i) => c.forEach((t) => t >= 0 && t < vocab && (this.seen[i][t] = 1)));
    }
    this.forced = o.forced_end_token;
    if (this.forced !== null && !(this.forced >= 0 && this.forced < vocab)) throw new RangeError(`forced_end_token ${this.forced} >= vocabulary ${vocab}`);
  }

  /** Adjusted float32 logits of every row (a new array); nGenerated: a count per row. */
  apply(logits, nGenerated) {
    const { o, vocab } = this;
    const n = logits.length / vocab;
    const out = Float32Array.from(logits);
    for (let r = 0; r < n; r++) {
      const row = out.subarray(r * vocab, (r + 1) * vocab);
      if (this.seen) {
        const p = o.repetition_penalty;
        const seen = this.seen[r];
        for (let i = 0; i < vocab; i++) if (seen[i]) row[i] = row[i] > 0 ? row[i] / p : row[i] * p;
      }
      if (o.ignore_eos || nGenerated[r] < o.min_new_tokens) for (const e of this.ends) row[e] = -Infinity;
      for (const t of this.banned) row[t] = -Infinity;
      if (this.history) for (const t of this.historyBans(this.history[r])) row[t] = -Infinity;
      if (this.forced !== null && nGenerated[r] >= o.max_new_tokens - 1) {
        row.fill(-Infinity);
        row[this.forced] = 0;
      }
    }
    return out;
  }

  historyBans(h) {
    const out = [];
    const n = this.ngram;
    if (n === 1) out.push(...h);
    else if (n > 1 && h.length >= n) {
      const key = h.slice(h.length - n + 1);
      for (let i = 0; i + n - 1 < h.length; i++) {
        let same = true;
        for (let j = 0; j < n - 1; j++) if (h[i + j] !== key[j]) same = false;
        if (same) out.push(h[i + n - 1]);
      }
    }
    for (const s of this.sequences) {
      const m = s.length - 1;
      if (h.length >= m && s.slice(0, m).every((t, j) => h[h.length - m + j] === t)) out.push(s[m]);
    }
    return out;
  }

  observe(tokens) {
    tokens.forEach((t, i) => {
      if (this.seen) this.seen[i][t] = 1;
      if (this.history) this.history[i].push(t);
    });
  }

  select(rows) {
    if (this.seen) this.seen = rows.map((r) => Uint8Array.from(this.seen[r]));
    if (this.history) this.history = rows.map((r) => [...this.history[r]]);
  }
}

const rowOf = (logits, r, V) => logits.subarray(r * V, (r + 1) * V);

function takeRows(x, rows, V) {
  const out = new Float32Array(rows.length * V);
  rows.forEach((r, i) => out.set(rowOf(x, r, V), i * V));
  return out;
}

function checkModel(row) {
  for (let i = 0; i < row.length; i++) {
    if (Number.isNaN(row[i]) || row[i] === Infinity) throw new RangeError("the model produced NaN (or +inf) logits");
  }
}

/** Temperature, then top-k, then top-p filtering (float64; removed entries -inf). */
export function filterLogits(row, temperature, topK, topP) {
  const V = row.length;
  const x = new Float64Array(V);
  for (let i = 0; i < V; i++) x[i] = row[i] / temperature;
  if (topK > 0 && topK < V) {
    const kth = Float64Array.from(x).sort()[V - topK];
    for (let i = 0; i < V; i++) if (x[i] < kth) x[i] = -Infinity;
  }
  if (topP < 1) {
    const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => x[b] - x[a] || a - b);
    const sorted = order.map((i) => x[i]);
    const lp = logSoftmax(sorted);
    let cum = 0;
    for (let j = 0; j < V; j++) {
      const p = Math.exp(lp[j]);
      if (cum >= topP) x[order[j]] = -Infinity; // the mass of strictly better tokens
      cum += p;
    }
  }
  return x;
}

/** The next token of each row (greedy: argmax; sampling: numpy's inverse-CDF draw). */
function choose(adjusted, raw, o, rng, V) {
  const n = adjusted.length / V;
  const tokens = new Array(n);
  const u = o.sampling ? rng.random(n) : null;
  for (let r = 0; r < n; r++) {
    const row = rowOf(adjusted, r, V);
    if (!o.sampling) {
      const t = argmax(row);
      if (!Number.isFinite(row[t])) {
        checkModel(rowOf(raw, r, V));
        throw new RangeError(ALL_BANNED);
      }
      tokens[r] = t;
      continue;
    }
    checkModel(rowOf(raw, r, V));
    if (!Number.isFinite(Math.max(...row))) throw new RangeError(ALL_BANNED);
    const x = filterLogits(row, o.temperature, o.top_k, o.top_p);
    const lp = logSoftmax(x);
    let cum = 0;
    let count = 0;
    for (let i = 0; i < V; i++) {
      cum += Math.exp(lp[i]);
      if (cum < u[r]) count++;
    }
    if (!Number.isFinite(Math.max(...x))) throw new RangeError("sampling has no token with a finite probability");
    tokens[r] = Math.min(count, V - 1);
  }
  return tokens;
}

const endIds = (o, eosId) => [...new Set([eosId, ...o.end_token])].sort((a, b) => a - b);

/** The generator of sampling: numpy's default_rng(seed) (PCG64), the same draws as Python. */
export function makeRng(seed) {
  return new PCG64(seed ?? null);
}

/**
 * Greedy or sampling, one step at a time (core.decoding.steps): calls onStep({rows, tokens,
 * logProbs, ended}) for the rows still running. inputs: {eosId, context, banned, prefixes, stop}.
 */
export async function steps(first, V, stepper, o, inputs, scores, onStep) {
  let n = first.length / V;
  const ends = endIds(o, inputs.eosId);
  const endSet = new Set(ends);
  const penalties = new Penalties(o, ends, V, inputs.context, n, inputs.banned ?? []);
  const prefixes = inputs.prefixes ?? Array.from({ length: n }, () => []);
  const rng = o.sampling ? makeRng(o.seed) : null;
  const limit = prefixes.map((p) => p.length + o.max_new_tokens);
  const seqs = Array.from({ length: n }, () => []);
  let active = Array.from({ length: n }, (_, i) => i);
  let logits = first;
  const maxT = Math.max(...limit);
  for (let t = 0; t < maxT; t++) {
    const gen = active.map((r) => t - prefixes[r].length);
    const forced = active.map((r) => t < prefixes[r].length);
    const adjusted = penalties.apply(logits, gen);
    // only the free rows choose (and draw a random number, as numpy's loop does)
    const free = forced.flatMap((f, i) => (f ? [] : [i]));
    const gather = (x) => (free.length === forced.length ? x : takeRows(x, free, V));
    const chosen = free.length ? choose(gather(adjusted), gather(logits), o, rng, V) : [];
    const tokens = forced.map((f, i) => (f ? prefixes[active[i]][t] : chosen[free.indexOf(i)]));
    let logProbs = null;
    if (scores) {
      logProbs = tokens.map((tok, i) => logSoftmax(rowOf(forced[i] ? logits : adjusted, i, V))[tok]);
    }
    const ended = tokens.map((tok, i) => endSet.has(tok) && !forced[i]);
    const alive = ended.map((e) => !e);
    if (inputs.stop) {
      tokens.forEach((tok, i) => {
        if (!alive[i]) return;
        const r = active[i];
        seqs[r].push(tok);
        if (!forced[i] && inputs.stop(r, seqs[r])) alive[i] = false;
      });
    }
    await onStep({ rows: active, tokens, logProbs, ended });
    active.forEach((r, i) => {
      if (t + 1 >= limit[r]) alive[i] = false;
    });
    const keep = alive.flatMap((a, i) => (a ? [i] : []));
    if (!keep.length) return;
    let fed = tokens;
    if (keep.length < active.length) {
      stepper.select(keep);
      penalties.select(keep);
      active = keep.map((i) => active[i]);
      fed = keep.map((i) => tokens[i]);
    }
    n = active.length;
    penalties.observe(fed);
    logits = await stepper.step(fed);
  }
}

/** Greedy or sampling, one hypothesis per row: [{tokens, score, logProbs}]. */
export async function greedyOrSample(first, V, stepper, o, inputs, scores, onToken = null) {
  const n = first.length / V;
  const out = Array.from({ length: n }, () => []);
  const lps = Array.from({ length: n }, () => []);
  await steps(first, V, stepper, o, inputs, scores, async ({ rows, tokens, logProbs, ended }) => {
    rows.forEach((r, i) => {
      if (!ended[i]) out[r].push(tokens[i]);
      if (logProbs) lps[r].push(logProbs[i]);
    });
    if (onToken) await onToken(rows.filter((_, i) => !ended[i]), tokens.filter((_, i) => !ended[i]));
  });
  const lp = o.length_penalty;
  return out.map((tokens, r) => {
    const p = lps[r];
    const sum = p.reduce((a, b) => a + b, 0);
    return { tokens, score: scores ? sum / Math.max(p.length, 1) ** lp : 0, logProbs: scores ? p : null };
  });
}

/** Beam search (core.decoding.beam_search): the n-best hypotheses per row, best first. */
export async function beamSearch(first, V, stepper, o, inputs) {
  const B = first.length / V;
  const K = o.num_beams;
  const lp = o.length_penalty;
  const eosId = inputs.eosId;
  const ends = endIds(o, eosId);
  const endSet = new Set(ends);
  const prefixes = inputs.prefixes ?? Array.from({ length: B }, () => []);
  const limit = prefixes.map((p) => p.length + o.max_new_tokens);
  const normalise = (score, length) => score / Math.max(length, 1) ** lp;
  for (let r = 0; r < B; r++) {
    const row = rowOf(first, r, V);
    if (!Number.isFinite(Math.max(...row)) || row.some(Number.isNaN)) throw new RangeError("the model produced NaN (or all -inf) logits");
  }
  const ctx = inputs.context ?? Array.from({ length: B }, () => []);
  const repContext = ctx.flatMap((c) => Array.from({ length: K }, () => c));
  const penalties = new Penalties(o, ends, V, repContext, B * K, inputs.banned ?? []);
  let rows = Array.from({ length: B * K }, (_, i) => Math.floor(i / K));
  stepper.select(rows);
  let logits = new Float32Array(B * K * V);
  for (let i = 0; i < B * K; i++) logits.set(rowOf(first, Math.floor(i / K), V), i * V);
  let beamScores = Array.from({ length: B * K }, (_, i) => (i % K === 0 ? 0 : -Infinity));
  let seqs = Array.from({ length: B * K }, () => []);
  let seqLps = Array.from({ length: B * K }, () => []);
  const finished = Array.from({ length: B }, () => []);
  const done = new Array(B).fill(false);
  const maxT = Math.max(...limit);
  for (let t = 0; t < maxT; t++) {
    const gen = Array.from({ length: B * K }, (_, i) => t - prefixes[Math.floor(i / K)].length);
    const adjusted = penalties.apply(logits, gen);
    const logp = [];
    for (let i = 0; i < B * K; i++) logp.push(logSoftmax(rowOf(adjusted, i, V)));
    const forced = prefixes.map((p) => t < p.length);
    for (let b = 0; b < B; b++) {
      if (!forced[b]) continue;
      const i = b * K;
      const tok = prefixes[b][t];
      const value = logSoftmax(rowOf(logits, i, V))[tok];
      for (let j = i; j < i + K; j++) logp[j].fill(-Infinity);
      logp[i][tok] = value;
    }
    const m = Math.min(2 * K, V);
    const top = [];
    for (let b = 0; b < B; b++) {
      const cands = [];
      for (let k = 0; k < K; k++) {
        const i = b * K + k;
        const s = beamScores[i];
        // the best m tokens of this beam (ties: the lower id)
        const best = bestTokens(logp[i], m);
        for (const tok of best) cands.push({ beam: k, tok, score: s + logp[i][tok] });
      }
      cands.sort((a, c) => c.score - a.score || a.beam * V + a.tok - (c.beam * V + c.tok) || 0);
      top.push(cands.slice(0, 2 * K));
    }
    const newRows = [];
    const newTokens = [];
    const newScores = [];
    const newLps = [];
    for (let b = 0; b < B; b++) {
      let chosen = 0;
      for (const { beam, tok, score } of top[b]) {
        const src = b * K + beam;
        if (done[b] || score === -Infinity || Number.isNaN(score)) {
          newRows.push(b * K);
          newTokens.push(eosId);
          newScores.push(-Infinity);
          newLps.push(0);
          chosen++;
        } else if (endSet.has(tok) && !forced[b]) {
          finished[b].push([normalise(score, t + 1), seqs[src], [...seqLps[src], logp[src][tok]]]);
          continue;
        } else {
          newRows.push(src);
          newTokens.push(tok);
          newScores.push(score);
          newLps.push(logp[src][tok]);
          chosen++;
        }
        if (chosen === K) break;
      }
      while (chosen < K) {
        newRows.push(b * K);
        newTokens.push(eosId);
        newScores.push(-Infinity);
        newLps.push(0);
        chosen++;
      }
    }
    rows = newRows;
    beamScores = newScores;
    seqs = rows.map((r, i) => [...seqs[r], newTokens[i]]);
    seqLps = rows.map((r, i) => [...seqLps[r], newLps[i]]);
    if (inputs.stop) {
      for (let i = 0; i < B * K; i++) {
        const b = Math.floor(i / K);
        if (beamScores[i] > -Infinity && !forced[b] && inputs.stop(b, seqs[i])) {
          finished[b].push([normalise(beamScores[i], t + 1), seqs[i], seqLps[i]]);
          beamScores[i] = -Infinity;
        }
      }
    }
    for (let b = 0; b < B; b++) {
      if (done[b]) continue;
      const live = beamScores.slice(b * K, (b + 1) * K);
      const bestLive = Math.max(...live);
      if (finished[b].length >= K) {
        if (o.early_stopping) done[b] = true;
        else {
          const worst = finished[b].map((h) => h[0]).sort((x, y) => x - y)[finished[b].length - K];
          const longest = lp > 0 ? limit[b] : t + 1;
          done[b] = normalise(bestLive, longest) <= worst;
        }
      }
      if (!done[b] && (t + 1 >= limit[b] || bestLive === -Infinity)) {
        for (let i = b * K; i < (b + 1) * K; i++) {
          if (beamScores[i] > -Infinity) finished[b].push([normalise(beamScores[i], seqs[i].length), seqs[i], seqLps[i]]);
        }
        done[b] = true;
      }
    }
    if (done.every(Boolean)) break;
    stepper.select(rows);
    penalties.select(rows);
    penalties.observe(newTokens);
    logits = await stepper.step(newTokens);
    for (let i = 0; i < B * K; i++) {
      const row = rowOf(logits, i, V);
      if (!Number.isFinite(Math.max(...row)) || row.some(Number.isNaN)) throw new RangeError("the model produced NaN (or all -inf) logits");
    }
  }
  return finished.map((hs) =>
    [...hs]
      .sort((a, c) => c[0] - a[0])
      .slice(0, o.num_hypotheses)
      .map(([score, tokens, logProbs]) => ({ tokens, score, logProbs })),
  );
}

/** The m largest entries' ids, largest first (ties: the lower id). */
function bestTokens(row, m) {
  const ids = [];
  for (let i = 0; i < row.length; i++) {
    const x = row[i];
    if (ids.length === m && !(x > row[ids[m - 1]])) continue;
    let j = ids.length === m ? m - 1 : ids.length;
    if (ids.length < m) ids.push(i);
    while (j > 0 && x > row[ids[j - 1]]) {
      ids[j] = ids[j - 1];
      j--;
    }
    ids[j] = i;
  }
  return ids;
}

/** The hypotheses of every row by the strategy `o` selects (core.decoding.decode): beam search:
 * the num_hypotheses best; greedy: one; sampling: num_hypotheses samples (one generator). */
export async function decode(first, V, stepper, o, inputs, scores = true, onToken = null) {
  const B = first.length / V;
  const A = o.sampling ? o.num_hypotheses : 1;
  if (A > 1) {
    const rows = Array.from({ length: B * A }, (_, i) => Math.floor(i / A));
    stepper.select(rows);
    const rep = new Float32Array(B * A * V);
    rows.forEach((r, i) => rep.set(rowOf(first, r, V), i * V));
    first = rep;
    const stop = inputs.stop;
    inputs = {
      ...inputs,
      context: inputs.context && rows.map((r) => inputs.context[r]),
      prefixes: inputs.prefixes && rows.map((r) => inputs.prefixes[r]),
      stop: stop && ((r, seq) => stop(Math.floor(r / A), seq)),
    };
  }
  let hyps;
  if (o.num_beams > 1) hyps = await beamSearch(first, V, stepper, o, inputs);
  else hyps = (await greedyOrSample(first, V, stepper, o, inputs, scores, onToken)).map((h) => [h]);
  if (A === 1) return hyps;
  return Array.from({ length: B }, (_, b) => hyps.slice(b * A, (b + 1) * A).flat());
}
