// Tokenizer regexes that could hang encoding, refused at load (issue 50: a hostile
// tokenizer.json must not block the event loop). JavaScript's RegExp, like Oniguruma in the
// Python tokenizers library, backtracks: a repeated group whose body can match the same text
// in several ways, `(a+)+`, `(a|a)*`, `(\w+\s?)+$`, takes time exponential in the input. The
// rule (the same in the Python runtime: /work/notes/issue50-js-helper.md) refuses
//   - a pattern longer than MAX_PATTERN_CHARS,
//   - a backreference (\1 .. \9, \k<name>),
//   - a group repeated by *, +, {n,} or {n,m} (m > 1) whose body holds a quantifier or an
//     alternation (star height > 1, or a repeated choice),
//   - a counted repetition above MAX_REPEAT.
// Every pre-tokenizer and normalizer pattern of the tokenizers Hugging Face ships (GPT-2,
// Llama 3, Qwen 2, Gemma, BERT, Marian) passes: their repeated groups hold single classes.

export const MAX_PATTERN_CHARS = 2000;
export const MAX_REPEAT = 1000;

/** Why a regex pattern could take exponential time (a sentence), or null. */
export function patternProblem(pattern) {
  if (pattern.length > MAX_PATTERN_CHARS) return `a regex of ${pattern.length} characters (at most ${MAX_PATTERN_CHARS})`;
  // one frame per open group: whether its body holds a quantifier / an alternation
  const stack = [{ quantified: false, alternation: false }];
  let i = 0;
  /** The quantifier at pattern[i] (null: none): {repeats, length}. */
  const quantifier = (at) => {
    const c = pattern[at];
    if (c === "*" || c === "+") return { repeats: true, length: 1 };
    if (c === "?") return { repeats: false, length: 1 };
    if (c === "{") {
      const m = /^\{(\d*)(,?)(\d*)\}/.exec(pattern.slice(at));
      if (!m || (m[1] === "" && m[3] === "")) return null; // a literal brace
      const low = Number(m[1] || 0);
      const high = m[2] ? (m[3] === "" ? Infinity : Number(m[3])) : low;
      if (Math.max(low, high === Infinity ? 0 : high) > MAX_REPEAT) return { error: `a counted repetition ${m[0]} above ${MAX_REPEAT}` };
      return { repeats: high > 1, length: m[0].length };
    }
    return null;
  };
  const afterAtom = (at) => {
    // an atom ended before `at`: a quantifier there marks the enclosing group
    const q = quantifier(at);
    if (!q) return [at, null];
    if (q.error) return [at, q.error];
    stack[stack.length - 1].quantified = true;
    let j = at + q.length;
    if (pattern[j] === "?" || pattern[j] === "+") j++; // lazy / possessive
    return [j, null];
  };
  while (i < pattern.length) {
    const c = pattern[i];
    let problem = null;
    if (c === "\\") {
      const n = pattern[i + 1] ?? "";
      if (/[1-9]/.test(n) || n === "k") return "a backreference (its matching time is unbounded)";
      let j = i + 2;
      if ((n === "p" || n === "P") && pattern[j] === "{") j = pattern.indexOf("}", j) + 1 || pattern.length;
      else if (n === "x" && pattern[j] === "{") j = pattern.indexOf("}", j) + 1 || pattern.length;
      else if (n === "u" && pattern[j] === "{") j = pattern.indexOf("}", j) + 1 || pattern.length;
      [i, problem] = afterAtom(j);
    } else if (c === "[") {
      let j = i + 1;
      if (pattern[j] === "^") j++;
      if (pattern[j] === "]") j++;
      let depth = 1;
      while (j < pattern.length && depth > 0) {
        if (pattern[j] === "\\") j += 2;
        else {
          if (pattern[j] === "[") depth++;
          else if (pattern[j] === "]") depth--;
          j++;
        }
      }
      [i, problem] = afterAtom(j);
    } else if (c === "(") {
      stack.push({ quantified: false, alternation: false });
      i++;
      if (pattern[i] === "?") {
        // (?:  (?=  (?!  (?<=  (?<!  (?<name>  (?i:  (?i)
        i++;
        while (i < pattern.length && !":=!)".includes(pattern[i]) && pattern[i] !== ">") {
          if (pattern[i] === "<" && (pattern[i + 1] === "=" || pattern[i + 1] === "!")) {
            i++;
            break;
          }
          i++;
        }
        if (pattern[i] === ")") {
          stack.pop(); // an inline flag group (?i): no body
          i++;
          continue;
        }
        i++;
      }
    } else if (c === ")") {
      const group = stack.length > 1 ? stack.pop() : { quantified: false, alternation: false };
      const q = quantifier(i + 1);
      if (q?.error) return q.error;
      if (q?.repeats && (group.quantified || group.alternation)) {
        const what = group.quantified ? "a quantifier" : "an alternation";
        return `a repeated group holding ${what} (nested repetition: matching can take exponential time)`;
      }
      const parent = stack[stack.length - 1];
      parent.quantified ||= group.quantified || !!q;
      parent.alternation ||= group.alternation && !q; // an unquantified group's choice is the parent's
      [i, problem] = afterAtom(i + 1);
    } else if (c === "|") {
      stack[stack.length - 1].alternation = true;
      i++;
    } else {
      [i, problem] = afterAtom(i + 1);
    }
    if (problem) return problem;
  }
  return null;
}

/** Why a tokenizer.json's regexes could hang encoding (the first bad one), or null: every
 * {"Regex": pattern} in it (pre-tokenizers, normalizers, decoders, at any depth). */
export function regexProblem(tokenizer) {
  const seen = [tokenizer];
  while (seen.length) {
    const node = seen.pop();
    if (Array.isArray(node)) seen.push(...node);
    else if (node && typeof node === "object") {
      for (const [k, v] of Object.entries(node)) {
        if (k === "Regex") {
          if (typeof v !== "string") return "a Regex that is not a string";
          const why = patternProblem(v);
          if (why) return `its regex ${JSON.stringify(v.slice(0, 60))}: ${why}`;
        } else seen.push(v);
      }
    }
  }
  return null;
}
