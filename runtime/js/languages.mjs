// A translator's source frame and languages (config.json's task), read and checked as
// edgeformer.core.languages does, from the keys and bounds of the one contract (contract.mjs):
//
//   source = task.source_prefix + text ids + task.source_suffix     (default: text ids + [EOS])
//
// A language token inside that frame (NLLB's `eng_Latn $A </s>`, mBART's `$A </s> en_XX`) is the
// one a requested source language replaces; the target language is the token forced after the
// decoder start (transformers' forced_bos_token_id), unless target_lang_position is "start"
// (the decoder starts from it: fixed). Errors carry the Python runtime's messages: a package's
// problem is a PackageError naming the key, a request's a RangeError (Python's ValueError).

import CONTRACT from "./contract.mjs";
import { PackageError } from "./package.mjs";

const T = CONTRACT.translation;
const [AFTER_START, START] = [T.default_position, T.target_positions.find((p) => p !== T.default_position)];
const isId = (v, vocab) => typeof v === "number" && Number.isInteger(v) && v >= 0 && v < vocab;
const chars = (s) => Array.from(s); // code points, as Python's str

/** A value as Python's repr() writes it (the messages are the Python runtime's). */
export function pyRepr(v) {
  if (v === null || v === undefined) return "None";
  if (typeof v === "boolean") return v ? "True" : "False";
  if (Array.isArray(v)) return `[${v.map(pyRepr).join(", ")}]`;
  if (typeof v === "object") return `{${Object.entries(v).map(([k, x]) => `${pyRepr(k)}: ${pyRepr(x)}`).join(", ")}}`;
  if (typeof v !== "string") return String(v);
  const q = v.includes("'") && !v.includes('"') ? '"' : "'";
  let out = "";
  for (const ch of v) {
    const c = ch.codePointAt(0);
    if (ch === q || ch === "\\") out += `\\${ch}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch !== " " && /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u.test(ch)) {
      const [p, w] = c < 0x100 ? ["x", 2] : c < 0x10000 ? ["u", 4] : ["U", 8];
      out += `\\${p}${c.toString(16).padStart(w, "0")}`;
    } else out += ch;
  }
  return q + out + q;
}

// ---- difflib.get_close_matches, ported (SequenceMatcher.ratio over code points) ---------------

/** Python's SequenceMatcher(None, a, b).ratio(): 2 * matched / (len(a) + len(b)), with its
 * longest-match recursion and autojunk (b's elements more frequent than 1% + 1 of b's length,
 * when b has 200 or more, are not matched first). */
export function ratio(a, b) {
  a = chars(a);
  b = chars(b);
  const b2j = new Map();
  b.forEach((c, j) => (b2j.get(c) ?? b2j.set(c, []).get(c)).push(j));
  if (b.length >= 200) {
    const most = Math.floor(b.length / 100) + 1;
    for (const [c, idx] of [...b2j]) if (idx.length > most) b2j.delete(c);
  }
  const longest = (alo, ahi, blo, bhi) => {
    let [bi, bj, size] = [alo, blo, 0];
    let j2len = new Map();
    for (let i = alo; i < ahi; i++) {
      const next = new Map();
      for (const j of b2j.get(a[i]) ?? []) {
        if (j < blo) continue;
        if (j >= bhi) break;
        const k = (j2len.get(j - 1) ?? 0) + 1;
        next.set(j, k);
        if (k > size) [bi, bj, size] = [i - k + 1, j - k + 1, k];
      }
      j2len = next;
    }
    while (bi > alo && bj > blo && a[bi - 1] === b[bj - 1]) [bi, bj, size] = [bi - 1, bj - 1, size + 1];
    while (bi + size < ahi && bj + size < bhi && a[bi + size] === b[bj + size]) size++;
    return [bi, bj, size];
  };
  let matched = 0;
  const queue = [[0, a.length, 0, b.length]];
  while (queue.length) {
    const [alo, ahi, blo, bhi] = queue.pop();
    const [i, j, k] = longest(alo, ahi, blo, bhi);
    if (!k) continue;
    matched += k;
    if (alo < i && blo < j) queue.push([alo, i, blo, j]);
    if (i + k < ahi && j + k < bhi) queue.push([i + k, ahi, j + k, bhi]);
  }
  const total = a.length + b.length;
  return total ? (2 * matched) / total : 1;
}

/** difflib.get_close_matches(word, possibilities, n, cutoff): best first, ties by the larger
 * string (heapq.nlargest over (score, x)). */
export function closeMatches(word, possibilities, n, cutoff) {
  const scored = possibilities.map((x) => [ratio(x, word), x]).filter(([s]) => s >= cutoff);
  scored.sort(([s, x], [t, y]) => t - s || (x < y ? 1 : x > y ? -1 : 0));
  return scored.slice(0, n).map(([, x]) => x);
}

// ---- an unknown code's close matches (core/languages.py close_codes) ---------------------------

/** The language part of a code, lowercased: deu_Latn -> deu, de_DE -> de, zh-CN -> zh. */
const languageOf = (code) => code.toLowerCase().split(/[_-]/)[0];
const words = (s) => s.split(/\s+/).filter((w) => w);

/** The contract's language table as [the language's codes, its English names lowercased]. */
const ROWS = T.language_table.split("\n").filter((line) => line).map((line) => {
  const [a3, a2, b, ...rest] = line.split(" ");
  const names = rest.join(" ").toLowerCase().split(";");
  return [new Set([a3, a2, b].filter((c) => c !== "-")), names];
});

/** The ISO codes of the language(s) `lang` names (a code of any spelling, a name, a word of one). */
export function sameLanguage(lang) {
  const key = languageOf(lang);
  const name = lang.trim().toLowerCase();
  const out = new Set();
  for (const [codes, names] of ROWS) {
    if (codes.has(key) || names.includes(name) || names.some((n) => words(n).includes(name))) {
      for (const c of codes) out.add(c);
    }
  }
  return out;
}

/** The codes among `codes` close to the unknown `lang` ([] when none is). */
export function closeCodes(lang, codes) {
  const c = T.close_matches;
  let same = sameLanguage(lang);
  if (same.size === 0) {
    const names = new Map();
    for (const [set, ns] of ROWS) for (const n of ns) names.set(n, set);
    for (const n of closeMatches(lang.trim().toLowerCase(), [...names.keys()], 1, c.name_cutoff)) same = names.get(n);
  }
  let near = codes.filter((x) => same.has(languageOf(x)));
  if (near.length === 0) {
    near = closeMatches(lang, codes, c.n, c.cutoff);
    const start = chars(lang.toLowerCase()).slice(0, c.same_start).join("");
    near.push(...codes.filter((x) => x.toLowerCase().startsWith(start)).slice(0, c.n));
  }
  return [...new Set(near)];
}

// ---- the task ---------------------------------------------------------------------------------

function frameIds(where, key, value, vocab) {
  if (value === null || value === undefined) return [];
  if (!Array.isArray(value) || !value.every((i) => isId(i, vocab))) {
    throw new PackageError(`${where}: task.${key} must be a list of token ids < ${vocab}`);
  }
  if (value.length > T.max_frame_ids) {
    throw new PackageError(`${where}: task.${key} lists ${value.length} ids (at most ${T.max_frame_ids})`);
  }
  return [...value];
}

/** A translator's source frame and language codes (core/languages.py TranslationTask). */
export class Translation {
  /** config.json's task -> a Translation; every problem a PackageError naming the key. */
  static fromTask(task, eos, vocab, where) {
    const prefix = frameIds(where, "source_prefix", task.source_prefix, vocab);
    let suffix = frameIds(where, "source_suffix", task.source_suffix, vocab);
    if (!("source_prefix" in task) && !("source_suffix" in task)) suffix = [eos];
    const langs = "languages" in task ? task.languages : {};
    const okCode = (c) => chars(c).length > 0 && chars(c).length <= T.max_code_chars;
    if (langs === null || typeof langs !== "object" || Array.isArray(langs) || !Object.entries(langs).every(([c, i]) => okCode(c) && isId(i, vocab))) {
      throw new PackageError(`${where}: task.languages must map language codes (strings) to token ids < ${vocab}`);
    }
    const source = task.source_lang ?? null;
    if (source !== null && !(typeof source === "string" && Object.hasOwn(langs, source))) {
      throw new PackageError(`${where}: task.source_lang ${pyRepr(source)} is not in task.languages`);
    }
    const position = task.target_lang_position === undefined ? AFTER_START : task.target_lang_position;
    if (!T.target_positions.includes(position)) {
      throw new PackageError(`${where}: task.target_lang_position must be ${pyRepr(AFTER_START)} or ${pyRepr(START)}`);
    }
    return new Translation(prefix, suffix, { ...langs }, source, position);
  }

  constructor(prefix = [], suffix = [], languages = {}, sourceLang = null, targetPosition = AFTER_START) {
    Object.assign(this, { prefix, suffix, languages, sourceLang, targetPosition });
    this.codes = Object.keys(languages);
  }

  get multilingual() {
    return this.codes.length > 0;
  }

  /** The token id of a language code; RangeError listing close matches. */
  code(lang, what) {
    if (typeof lang !== "string") throw new RangeError(`${what} must be a language code (a string), got ${pyRepr(lang)}`);
    if (Object.hasOwn(this.languages, lang)) return this.languages[lang];
    if (!this.multilingual) throw new RangeError(`${what}=${pyRepr(lang)}: this model has no language codes`);
    const near = closeCodes(lang, this.codes);
    const first = this.codes.slice(0, T.close_matches.fallback).join(", ");
    const hint = near.length ? `close: ${near.join(", ")}` : `none is close; they begin ${first}, ...`;
    throw new RangeError(
      `${what}=${pyRepr(lang)} is not one of this model's ${this.codes.length} language codes (${hint})`,
    );
  }

  /** [prefix, suffix] of a source in `sourceLang` (null: the frame's own). */
  frame(sourceLang) {
    if (sourceLang === null || sourceLang === undefined) return [this.prefix, this.suffix];
    const token = this.code(sourceLang, "source_lang");
    if (this.sourceLang === null) {
      throw new RangeError("source_lang: this model's sources carry no language token (give only target_lang)");
    }
    const old = this.languages[this.sourceLang];
    const swap = (ids) => ids.map((i) => (i === old ? token : i));
    return [swap(this.prefix), swap(this.suffix)];
  }

  /** The tokens forced first (after the decoder start): the target language's, else the
   * generation config's forced_bos_token_id; RangeError where a multilingual model is given no
   * target language, or one its decoder start fixes otherwise. */
  targetPrefix(targetLang, forced, start) {
    if (targetLang !== null && targetLang !== undefined) {
      const token = this.code(targetLang, "target_lang");
      if (this.targetPosition === START) {
        if (token !== start) {
          const fixed = this.codes.find((c) => this.languages[c] === start);
          const from = fixed === undefined ? `token ${start}` : pyRepr(fixed);
          throw new RangeError(
            `target_lang=${pyRepr(targetLang)}: this model's decoder always starts in ${from} (its decoder_start_token_id)`,
          );
        }
        return [];
      }
      return [token];
    }
    if (forced !== null && forced !== undefined) return [forced];
    if (this.multilingual && this.targetPosition === AFTER_START) {
      const sample = this.codes.slice(0, T.close_matches.sample).join(", ");
      throw new RangeError(
        `this model translates into ${this.codes.length} languages: give target_lang (--target-lang), e.g. one of ${sample}, ...`,
      );
    }
    return [];
  }
}

/** A language argument for n texts: one code for all, or one (or null) per text. */
export function perText(value, n, what) {
  if (value === null || value === undefined || !Array.isArray(value)) return Array(n).fill(value ?? null);
  if (value.length !== n) throw new RangeError(`${what}: ${value.length} codes for ${n} texts`);
  return value.map((v) => v ?? null);
}
