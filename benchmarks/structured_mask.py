"""What structured output costs a decode step: llguidance's token mask (runtime/structured.py)
as a share of one step of a SmolLM2-135M package (its real 49,152-token tokenizer), batch 1.

    python -m edgeformer.benchmarks.structured_mask PACKAGE [--tokens N] [--json OUT]

Per constraint: the mask's time per step (GrammarConstraint.apply + observe: the bitmask, its
unpacking, the -inf writes and the matcher's advance), the plain decode step's time (the same
package, unconstrained, ignore_eos), and their ratio. One run, one process: quote the ratios.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from edgeformer.runtime import Generator
from edgeformer.runtime.structured import GrammarConstraint

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
        "role": {"enum": ["admin", "user", "guest"]},
    },
    "required": ["name", "age", "role"],
    "additionalProperties": False,
}
CONSTRAINTS: dict[str, dict[str, Any]] = {
    "json_schema (5 fields)": dict(json_schema=SCHEMA),
    "json_object": dict(response_format={"type": "json_object"}),
    "regex (a date, then words)": dict(regex=r"[0-9]{4}-[0-9]{2}-[0-9]{2}( [a-z]+){1,30}\."),
    "lark grammar (arithmetic)": dict(
        grammar='start: expr\nexpr: term (("+" | "-") term)*\nterm: NUMBER | "(" expr ")"\n'
        "NUMBER: /[0-9]{1,6}/"
    ),
}
PROMPT = "Write the record of a new user as JSON."


class Timed:
    """Time spent in GrammarConstraint.apply / observe, and the steps it masked."""

    def __init__(self) -> None:
        self.seconds, self.steps = 0.0, 0
        self.apply, self.observe = GrammarConstraint.apply, GrammarConstraint.observe

    def __enter__(self) -> Timed:
        apply, observe = self.apply, self.observe

        def timed_apply(proc, logits, n):
            start = time.perf_counter()
            out = apply(proc, logits, n)
            self.seconds += time.perf_counter() - start
            self.steps += 1
            return out

        def timed_observe(proc, tokens):
            start = time.perf_counter()
            observe(proc, tokens)
            self.seconds += time.perf_counter() - start

        GrammarConstraint.apply = timed_apply  # type: ignore[method-assign]
        GrammarConstraint.observe = timed_observe  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        GrammarConstraint.apply = self.apply  # type: ignore[method-assign]
        GrammarConstraint.observe = self.observe  # type: ignore[method-assign]


def step_seconds(lm: Generator, tokens: int) -> float:
    """A plain decode step: `tokens` greedy steps (EOS ignored) after a warm-up, per step."""
    lm.generate(PROMPT, max_new_tokens=4, ignore_eos=True)
    start = time.perf_counter()
    lm.generate(PROMPT, max_new_tokens=tokens, ignore_eos=True)
    return (time.perf_counter() - start) / tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("package")
    p.add_argument("--tokens", type=int, default=64, help="new tokens per run (default: 64)")
    p.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0: its own)")
    p.add_argument("--json", type=Path, help="write the table as JSON to this file")
    args = p.parse_args(argv)
    lm = Generator(args.package, **({"threads": args.threads} if args.threads else {}))
    start = time.perf_counter()
    lm.model.grammars()
    tokenizer_s = time.perf_counter() - start
    step = step_seconds(lm, args.tokens)
    rows = []
    for name, options in CONSTRAINTS.items():
        start = time.perf_counter()
        lm.model.prepare(lm.model.options(max_new_tokens=1, **options), 1)  # compile: cached
        compile_s = time.perf_counter() - start
        for sampling in (False, True):
            with Timed() as t:
                lm.generate(PROMPT, max_new_tokens=args.tokens, sampling=sampling, seed=0,
                            **options)  # fmt: skip
            mask = t.seconds / max(t.steps, 1)
            rows.append(dict(constraint=name, sampling=sampling, steps=t.steps,
                             compile_ms=compile_s * 1e3, mask_ms=mask * 1e3,
                             step_ms=step * 1e3, share=mask / step))  # fmt: skip
    vocab = lm.model.tokenizer.get_vocab_size()
    print(f"{args.package}: vocab {vocab}, llguidance tokenizer {tokenizer_s * 1e3:.0f} ms "
          f"(once per model), plain step {step * 1e3:.2f} ms")  # fmt: skip
    print("| constraint | strategy | steps | compile ms | mask ms / step | share of a step |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['constraint']} | {'sampling' if r['sampling'] else 'greedy'} | {r['steps']} "
              f"| {r['compile_ms']:.1f} | {r['mask_ms']:.3f} | {r['share']:.1%} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(dict(package=str(args.package), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
