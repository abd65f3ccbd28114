"""What speculative decoding gains: tokens per call of the target and its speed-up over plain
greedy decoding, on chat tasks that copy their input (rewrite, summarise, extract) and on tasks
that do not (translate, write), batch 1.

    python -m edgeformer.benchmarks.speculative PACKAGE [--draft PKG | --draft-variant V]
        [--tokens N] [--rounds R] [--json OUT]

Per task and method (plain; prompt lookup with k = 3 and 6 drafted tokens; a draft package,
k = 4: another package with the same tokenizer, or this package's quantized variant drafting for
the target variant), interleaved rounds in one process: ms per new token (the median round),
tokens per target call, the share of drafted tokens kept, the speed-up over plain decoding of
the same round, and whether the greedy ids equal plain decoding's (they must). One run on a
shared host: quote the ratios, not the milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from edgeformer.core.decoding import GenerationOptions
from edgeformer.runtime import Generator

TEXT = (
    "The city council met on Tuesday to discuss the new public library. The building, which "
    "will open next spring, has three floors, a reading garden on the roof and a room where "
    "children can learn to code. The council agreed to keep the old library open until the new "
    "one is ready, and to move its books in the summer, when fewer people visit."
)
TYPOS = TEXT.replace("discuss", "discus").replace("building", "bulding").replace(
    "children", "childern").replace("summer", "sumer")  # fmt: skip
FIX, SUMMARISE = "Fix the spelling mistakes in this text and write it out again", "Summarise"
TASKS = {  # name -> (user message, whether the answer copies the prompt)
    "rewrite (fix typos)": (f"{FIX}:\n\n{TYPOS}", True),
    "summarise": (f"{SUMMARISE} this text in two sentences:\n\n{TEXT}", True),
    "extract (JSON)": (f"List the places this text names as a JSON array:\n\n{TEXT}", True),
    "translate (to French)": (f"Translate into French:\n\n{TEXT}", False),
    "write (open)": ("Write a short story about a lighthouse keeper and a storm.", False),
}
# name -> the options of a request (draft_tokens 0: the draft unused)
METHODS: dict[str, dict[str, Any]] = {
    "plain": dict(draft_tokens=0),
    "prompt lookup k=3": dict(prompt_lookup=3),
    "prompt lookup k=6": dict(prompt_lookup=6),
    "draft k=4": dict(draft_tokens=4),
}


def timed(lm: Generator, ids: list[int], opts: GenerationOptions) -> tuple[list[int], float, dict]:
    """(new ids, seconds, the speculation counts of this request)."""
    before = asdict(lm.speculation_stats)
    start = time.perf_counter()
    out = lm.generate_ids([ids], opts)[0]
    seconds = time.perf_counter() - start
    after = asdict(lm.speculation_stats)
    return out, seconds, {k: after[k] - before[k] for k in after}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("package")
    p.add_argument("--variant", default="fp32", help="the target's variant (default: fp32)")
    p.add_argument("--draft", help="a draft package (the same tokenizer)")
    p.add_argument(
        "--draft-variant",
        default="int4",
        help="without --draft: this package's variant that drafts (default: int4)",
    )
    p.add_argument("--tokens", type=int, default=96, help="new tokens at most (default: 96)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    p.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0: its own)")
    p.add_argument("--json", type=Path, help="write the rows as JSON to this file")
    args = p.parse_args(argv)
    threads = {"threads": args.threads} if args.threads else {}
    draft_path = args.draft or args.package
    draft_variant = "fp32" if args.draft else args.draft_variant
    draft = Generator(draft_path, variant=draft_variant, **threads)
    lm = Generator(args.package, variant=args.variant, draft=draft, **threads)
    prompts = {t: lm.chat_ids([{"role": "user", "content": m}]) for t, (m, _) in TASKS.items()}
    times: dict[tuple[str, str], list[float]] = {}
    counts: dict[tuple[str, str], dict] = {}
    outputs: dict[tuple[str, str], list[int]] = {}
    for ids in prompts.values():  # warm-up: sessions, decoders of every size
        for options in METHODS.values():
            lm.generate_ids([ids], GenerationOptions(max_new_tokens=4, **options))
    for _ in range(args.rounds):
        for task, ids in prompts.items():
            for method, options in METHODS.items():
                opts = GenerationOptions(max_new_tokens=args.tokens, **options)
                out, seconds, n = timed(lm, ids, opts)
                key = (task, method)
                times.setdefault(key, []).append(seconds / max(len(out), 1))
                counts[key], outputs[key] = n, out
    rows = []
    for task, (_, copies) in TASKS.items():
        plain = statistics.median(times[(task, "plain")])
        for method in METHODS:
            key = (task, method)
            ms = statistics.median(times[key])
            n = counts[key]
            calls = n["verifications"] + n["steps"]
            rows.append(dict(
                task=task, copies_prompt=copies, method=method, new_tokens=len(outputs[key]),
                ms_per_token=ms * 1e3, tokens_per_call=n["tokens"] / calls if calls else 1.0,
                accepted=n["accepted"] / n["drafted"] if n["drafted"] else None,
                speedup=plain / ms, same_as_plain=outputs[key] == outputs[(task, "plain")],
            ))  # fmt: skip
    print(f"{args.package} ({args.variant}); draft {draft_path} ({draft_variant}); at most "
          f"{args.tokens} new tokens, median of {args.rounds} interleaved rounds")  # fmt: skip
    print("| task | method | new tokens | ms / token | tokens / call | drafts kept | speed-up "
          "| = plain |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        kept = "-" if r["accepted"] is None else f"{r['accepted']:.0%}"
        print(f"| {r['task']} | {r['method']} | {r['new_tokens']} | {r['ms_per_token']:.2f} "
              f"| {r['tokens_per_call']:.2f} | {kept} | x{r['speedup']:.2f} "
              f"| {'yes' if r['same_as_plain'] else 'NO'} |")  # fmt: skip
    if args.json:
        meta = dict(
            package=str(args.package), variant=args.variant, draft=str(draft_path),
            draft_variant=draft_variant, tokens=args.tokens, rounds=args.rounds,
        )  # fmt: skip
        args.json.write_text(json.dumps(dict(**meta, rows=rows), indent=1))
    return 0 if all(r["same_as_plain"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
