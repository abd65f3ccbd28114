// Bounds on the regular expressions a tokenizer.json carries: the Python runtime's rule
// (edgeformer.core.patterns, issue 50), ported line by line so that both runtimes refuse the
// same files. A JavaScript RegExp never gives up on a catastrophic pattern (the event loop
// hangs; Oniguruma in the Python library panics after millions of steps), and a package's probe
// text does not trigger one: the first matching input would. So a pattern is refused when the
// file is read, by a structural bound every real tokenizer's patterns meet:
//
// 1. a pattern is a string of at most MAX_PATTERN_CHARS characters;
// 2. no backreference (\1..\9, \k<..>), subroutine call (\g<..>), conditional (?(..)..) or
//    absent operator (?~..);
// 3. every counted repetition {n}, {n,}, {n,m}, {,m} has n, m <= MAX_REPEAT_COUNT;
// 4. a repeated group (under *, +, {n,} or {n,m} with m >= 2) matches in one way only: no
//    repetition, alternation or optional item inside: no (a+)+, (a*)*, (a|aa)+, a{2}{3},
//    (?:a?){60} (V8 backtracked 16 s on 6 characters), (a?b?)+;
// 5. repetitions in a row: the degree of a repeated item is 1, of a sequence the sum of its
//    items', of an alternation the largest of its branches'. A top-level branch has degree <=
//    MAX_DEGREE (2) and, once it reached it, only optional items (?, {0,1}) follow; a group's
//    body has degree <= 1 (x*x*$, x*x*x*, (?:x*x*)y are refused; \s*[\r\n]+ passes);
// 6. the ways to match at one position without repetitions (an item 1, an optional item its
//    own + 1, a sequence the product, an alternation the sum) are at most MAX_WAYS anywhere:
//    a?a?...a?aa...a (2^n paths) is refused whatever its length;
// 7. groups nest at most MAX_NESTING deep; a pattern this module cannot read is refused.
// tests/runtime/test_js.py runs the same patterns through both and requires the same verdicts.

import contract from "./contract.mjs";

// the bounds, from the one contract (core/patterns.py's constants)
export const MAX_PATTERN_CHARS = contract.patterns.max_pattern_chars;
export const MAX_REPEAT_COUNT = contract.patterns.max_repeat_count;
export const MAX_DEGREE = contract.patterns.max_degree; // in a top-level branch; 1 in a group's body
export const MAX_NESTING = contract.patterns.max_nesting;
export const MAX_WAYS = contract.patterns.max_ways; // ways to match at one position (rule 6)
// the normalizer's expansion: characters one input character may become (core/patterns.py)
export const MAX_NORMALIZER_EXPANSION = contract.patterns.max_normalizer_expansion;
const UNICODE_EXPANSION = contract.patterns.unicode_expansion;

class PatternRefused extends Error {}

const refuse = (msg) => {
  throw new PatternRefused(msg);
};
const isDigits = (s) => /^[0-9]+$/.test(s);
const repr = (s) => `'${s}'`;

/** [min, max (null: unbounded), index after] of a quantifier at p[i], or null. */
function quantifier(p, i) {
  const c = i < p.length ? p[i] : "";
  let lo;
  let hi;
  let end;
  if (c && "*+?".includes(c)) {
    [lo, hi] = { "*": [0, null], "+": [1, null], "?": [0, 1] }[c];
    end = i + 1;
  } else if (c === "{") {
    const close = p.indexOf("}", i);
    const body = close > 0 ? p.slice(i + 1, close) : "";
    const parts = body.split(",");
    if (close < 0 || parts.length > 2 || !parts.every((x) => isDigits(x) || x === "")) return null;
    if (parts.every((x) => x === "")) return null;
    lo = parts[0] ? Number(parts[0]) : 0;
    hi = parts.length === 1 ? lo : parts[1] ? Number(parts[1]) : null;
    for (const n of [lo, hi]) {
      if (n !== null && n > MAX_REPEAT_COUNT) {
        refuse(`repetition count ${n} in ${repr(p.slice(i, close + 1))} is over ${MAX_REPEAT_COUNT}`);
      }
    }
    end = close + 1;
  } else return null;
  if (end < p.length && "?+".includes(p[end])) end += 1; // lazy or possessive
  return [lo, hi, end];
}

function classEnd(p, i) {
  let j = i + 1;
  let depth = 1;
  if (j < p.length && p[j] === "^") j += 1;
  if (j < p.length && p[j] === "]") j += 1;
  while (j < p.length) {
    const c = p[j];
    if (c === "\\") {
      j += 2;
      continue;
    }
    if (c === "[") depth += 1;
    else if (c === "]") {
      depth -= 1;
      if (depth === 0) return j + 1;
    }
    j += 1;
  }
  return refuse(`the character class at offset ${i} is not closed`);
}

const REFUSED_ESCAPES = { k: "a named backreference (\\k)", g: "a subroutine call (\\g)" };

function escapeEnd(p, i) {
  if (i + 1 >= p.length) refuse("the pattern ends with a lone backslash");
  const c = p[i + 1];
  if ("123456789".includes(c)) refuse(`backreference \\${c} at offset ${i} (matching becomes exponential)`);
  if (c in REFUSED_ESCAPES) refuse(`${REFUSED_ESCAPES[c]} at offset ${i}`);
  if ("pPx".includes(c) && i + 2 < p.length && p[i + 2] === "{") {
    const close = p.indexOf("}", i + 2);
    if (close < 0) refuse(`the escape at offset ${i} is not closed`);
    return close + 1;
  }
  return i + 2;
}

/** [index where the body starts, whether it is a group at all] for p[i] === "(". */
function groupStart(p, i) {
  if (!p.startsWith("(?", i)) return [i + 1, true];
  const rest = p.slice(i + 2);
  if (rest.startsWith("#")) {
    const close = p.indexOf(")", i);
    if (close < 0) refuse(`the comment at offset ${i} is not closed`);
    return [close + 1, false];
  }
  if (rest.startsWith("(")) refuse(`a conditional group (?(...) at offset ${i}`);
  if (rest.startsWith("~")) refuse(`an absent operator (?~...) at offset ${i}`);
  if (rest.startsWith("P=") || rest.startsWith("P>") || rest.startsWith("R") || /^[0-9]/.test(rest)) {
    refuse(`a backreference or recursion at offset ${i}`);
  }
  for (const opener of [":", "=", "!", "<=", "<!", ">"]) if (rest.startsWith(opener)) return [i + 2 + opener.length, true];
  for (const [opener, closer] of [["<", ">"], ["P<", ">"], ["'", "'"]]) {
    if (rest.startsWith(opener)) {
      const close = p.indexOf(closer, i + 2 + opener.length);
      if (close < 0) refuse(`the group name at offset ${i} is not closed`);
      return [close + 1, true];
    }
  }
  let j = i + 2;
  while (j < p.length && (/^\p{L}$/u.test(p[j]) || p[j] === "-")) j += 1;
  if (j < p.length && p[j] === ":") return [j + 1, true];
  if (j < p.length && p[j] === ")") return [j + 1, false];
  return refuse(`the group at offset ${i} is not one edgeformer reads`);
}

const node = (repeats = false, alternates = false, degree = 0, ways = 1, optional = false) => ({
  repeats,
  alternates,
  degree,
  ways,
  optional,
});
const capped = (ways) => Math.min(ways, MAX_WAYS + 1);
const tooManyWays = (offset) =>
  refuse(`more than ${MAX_WAYS} ways to match at one position (at offset ${offset}): backtracking tries every one of them`);

class Parser {
  constructor(pattern) {
    this.p = pattern;
    this.i = 0;
  }

  alternation(depth) {
    if (depth > MAX_NESTING) refuse(`groups nest more than ${MAX_NESTING} deep`);
    const branches = [this.sequence(depth)];
    while (this.i < this.p.length && this.p[this.i] === "|") {
      this.i += 1;
      branches.push(this.sequence(depth));
    }
    const n = node(
      branches.some((b) => b.repeats),
      branches.length > 1 || branches.some((b) => b.alternates),
      Math.max(...branches.map((b) => b.degree)),
      capped(branches.reduce((sum, b) => sum + b.ways, 0)),
      branches.some((b) => b.optional),
    );
    if (n.ways > MAX_WAYS) tooManyWays(this.i);
    return n;
  }

  sequence(depth) {
    const n = node();
    const p = this.p;
    const most = depth === 0 ? MAX_DEGREE : 1;
    while (this.i < p.length && !"|)".includes(p[this.i])) {
      const start = this.i;
      const found = this.atom(depth);
      if (found === null) continue;
      const [item, optional] = found;
      if (n.degree >= MAX_DEGREE && !optional) {
        refuse(`${repr(p.slice(start, this.i))} at offset ${start} must match after ${n.degree} repetitions in a row (backtracking grows as a power of the input's length)`);
      }
      n.repeats ||= item.repeats;
      n.alternates ||= item.alternates;
      n.optional ||= item.optional;
      n.degree += item.degree;
      n.ways = capped(n.ways * item.ways);
      if (n.ways > MAX_WAYS) tooManyWays(start);
      if (n.degree > most) {
        const where = depth === 0 ? "two repetitions in a row in a top-level branch" : "one repetition in a row in a group";
        refuse(`more than ${where} (at offset ${start}): backtracking grows as a power of the input's length`);
      }
    }
    return n;
  }

  atom(depth) {
    const p = this.p;
    const i = this.i;
    const c = p[i];
    let inner;
    if (c === "(") {
      const [body, isGroup] = groupStart(p, i);
      this.i = body;
      if (!isGroup) return null;
      inner = this.alternation(depth + 1);
      if (this.i >= p.length || p[this.i] !== ")") refuse(`the group at offset ${i} is not closed`);
      this.i += 1;
    } else if (c === "[") {
      this.i = classEnd(p, i);
      inner = node();
    } else if (c === "\\") {
      this.i = escapeEnd(p, i);
      inner = node();
    } else {
      if ("*+?".includes(c) || (c === "{" && quantifier(p, i) !== null)) refuse(`a quantifier with nothing to repeat at offset ${i}`);
      this.i = i + 1;
      inner = node();
    }
    let optional = false;
    for (let q = quantifier(p, this.i); q !== null; q = quantifier(p, this.i)) {
      const [lo, hi, end] = q;
      optional = lo === 0;
      if (hi === null || hi > 1) {
        if (inner.repeats || inner.alternates || inner.optional || inner.ways > 1) {
          const what = inner.repeats ? "a repetition" : inner.alternates ? "an alternation" : "an optional item";
          refuse(`${repr(p.slice(i, end))} at offset ${i} repeats ${what} (nested repetition backtracks exponentially)`);
        }
        inner = node(true, false, Math.max(inner.degree, 1));
      } else if (lo === 0 && hi === 1) {
        inner = node(inner.repeats, inner.alternates, inner.degree, capped(inner.ways + 1), true);
      }
      this.i = end;
    }
    return [inner, optional];
  }
}

/** Why a tokenizer regex is refused (the rule above), or null. */
export function patternProblem(pattern) {
  if (typeof pattern !== "string") return `a pattern must be a string, got ${pattern === null ? "NoneType" : typeof pattern}`;
  if (pattern.length > MAX_PATTERN_CHARS) return `the pattern has ${pattern.length} characters, over ${MAX_PATTERN_CHARS}`;
  const parser = new Parser(pattern);
  try {
    parser.alternation(0);
    if (parser.i < pattern.length) refuse(`unbalanced ')' at offset ${parser.i}`);
  } catch (e) {
    if (e instanceof PatternRefused) return e.message;
    throw e;
  }
  return null;
}

/** The longest replacement of a SentencePiece precompiled charsmap (base64: a little-endian
 * uint32 trie size, the trie, NUL-terminated UTF-8 strings); 1 when unreadable. */
function charsmapLongest(charsmap) {
  if (typeof charsmap !== "string") return 1;
  let blob;
  try {
    blob = Uint8Array.from(atob(charsmap), (c) => c.charCodeAt(0));
  } catch {
    return 1;
  }
  if (blob.length < 4) return 1;
  const trie = (blob[0] | (blob[1] << 8) | (blob[2] << 16) | (blob[3] << 24)) >>> 0;
  const decoder = new TextDecoder();
  let longest = 1;
  let start = 4 + trie;
  for (let i = start; i <= blob.length; i++) {
    if (i === blob.length || blob[i] === 0) {
      if (i > start) longest = Math.max(longest, [...decoder.decode(blob.subarray(start, i))].length);
      start = i + 1;
    }
  }
  return longest;
}

function leafExpansion(n) {
  if (n.type === "Replace") {
    const size = typeof n.content === "string" ? [...n.content].length : 0;
    const s = n.pattern?.String;
    if (typeof s === "string" && s.length) return Math.max(1, Math.ceil(size / [...s].length));
    return size + 1;
  }
  if (n.type === "Prepend") return 1 + (typeof n.prepend === "string" ? [...n.prepend].length : 0);
  if (n.type === "Precompiled") return Math.max(1, charsmapLongest(n.precompiled_charsmap));
  if (n.type === "ByteLevel") return 4;
  return 1;
}

/** Characters one input character may become in a tokenizer.json normalizer (capped). */
export function normalizerExpansion(normalizer) {
  let product = 1;
  let unicode = 1;
  const stack = [normalizer];
  while (stack.length) {
    const n = stack.pop();
    if (!n || typeof n !== "object" || Array.isArray(n)) continue;
    if (n.type === "Sequence") {
      if (Array.isArray(n.normalizers)) stack.push(...n.normalizers);
      continue;
    }
    unicode = Math.max(unicode, UNICODE_EXPANSION[n.type] ?? 1);
    product = Math.min(product * leafExpansion(n), MAX_NORMALIZER_EXPANSION + 1);
  }
  return Math.min(product * unicode, MAX_NORMALIZER_EXPANSION + 1);
}

/** The first refused Regex entry of a parsed tokenizer.json as "PATH: why", or a normalizer over
 * the expansion bound, or null. */
export function regexProblem(data) {
  if (!data || typeof data !== "object" || Array.isArray(data)) return null;
  return firstRegexProblem(data) ?? expansionProblem(data.normalizer);
}

function expansionProblem(normalizer) {
  if (normalizerExpansion(normalizer) <= MAX_NORMALIZER_EXPANSION) return null;
  return `normalizer expansion: one character may become more than ${MAX_NORMALIZER_EXPANSION} characters (its Replace / Prepend / charsmap expansions multiply)`;
}

function firstRegexProblem(data) {
  const stack = Object.entries(data).filter(([k]) => k !== "model" && k !== "added_tokens");
  while (stack.length) {
    const [path, n] = stack.pop();
    if (Array.isArray(n)) {
      for (let k = n.length - 1; k >= 0; k--) if (n[k] && typeof n[k] === "object") stack.push([`${path}[${k}]`, n[k]]);
    } else if (n && typeof n === "object") {
      if ("Regex" in n) {
        const problem = patternProblem(n.Regex);
        if (problem) return `${path ? `${path}.Regex` : "Regex"}: ${problem}`;
      }
      for (const [k, v] of Object.entries(n).reverse()) if (v && typeof v === "object") stack.push([path ? `${path}.${k}` : k, v]);
    }
  }
  return null;
}
