"""Results: environment, targets, markdown table, JSON and the PNG plot."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from importlib import metadata
from pathlib import Path

from .artifacts import dir_size
from .files import FileBatching
from .targets import FP32_PEER, LLAMA_OURS, QUANT_PEER, QUANT_WORKLOADS
from .weights import REFERENCE

PACKAGES = (
    "edgeformer", "torch", "onnxruntime", "onnxruntime-gpu", "onnx", "numpy", "tokenizers",
    "optimum", "optimum-onnx", "transformers", "ctranslate2", "onnxruntime-genai",
)  # fmt: skip


def _cpuinfo(field: str) -> str | None:
    """The first `field : value` of Linux's /proc/cpuinfo (None where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


# the instruction sets that pick onnxruntime's and CTranslate2's kernels (int8 GEMMs on VNNI):
# results of hosts that differ here are not comparable
CPU_FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_features() -> str:
    """Which of CPU_FEATURES this CPU has ('' where /proc/cpuinfo lists no flags)."""
    flags = set((_cpuinfo("flags") or "").split())
    return " ".join(f for f in CPU_FEATURES if f in flags)


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def load_average() -> list[float] | None:
    """The host's 1, 5 and 15-minute load averages (None where the OS has none): on a shared
    host, what the timings ran beside."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def environment(threads: int) -> dict:
    return {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_average": load_average(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_features": cpu_features(),
        "threads": threads,
        "platform": platform.platform(),
        "versions": versions(),
    }


def size_mb(files: list[Path]) -> float:
    return round(dir_size(files) / 2**20, 2)


# ---- markdown ----------------------------------------------------------------------------------


def _fx(x, nd: int) -> str:
    """A number with thousands separators, — for None."""
    return "—" if x is None else f"{x:,.{nd}f}"


def _f(x, nd: int = 2) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def _rss(info: dict) -> tuple[str, str]:
    """(loaded, peak) RSS cells: the stack's process after loading; its peak (a fresh process
    running each workload once, else the worker after all its runs), or +growth while loading."""
    m = info.get("memory") or {}
    loaded = f"{m['loaded_rss_mb']:.0f}" if "loaded_rss_mb" in m else "—"
    if "peak_rss_mb" in m:
        peak = f"{m['peak_rss_mb']:.0f}"
    elif "run_peak_rss_mb" in m:
        peak = f"{m['run_peak_rss_mb']:.0f}"
    elif "rss_delta_mb" in m:
        peak = f"+{m['rss_delta_mb']:.0f}"
    else:
        peak = "err" if "error" in m else "—"
    return loaded, peak


def markdown(results: dict) -> str:
    meta, st = results["meta"], results["settings"]
    v = meta["versions"]
    vs = ", ".join(f"{k} {v[k]}" for k in v if v[k])
    lines = [
        "# edgeformer bench",
        "",
        f"{meta['date']} · {meta['cpu']} ({meta['cpu_count']} CPUs"
        + (f"; {meta['cpu_features']}" if meta.get("cpu_features") else "")
        + f") · {meta['threads']} threads"
        f" · {st['rounds']} rounds, {st['warmup']} warm-up"
        + (" · QUICK" if st["quick"] else "")
        + _load_md(meta),
        "",
        f"Versions: {vs}.",
        "",
        *_optimum_env_md(meta.get("optimum_env")),
    ]
    if results["shapes"]:  # the workloads' protocol
        lines += _protocol_md(st)
    for shape, cfg in results["shapes"].items():
        stacks = results["stacks"][shape]
        title = cfg.get("real") or f"{shape.upper()}: {_shape_line(cfg)}"
        lines += [f"## {title}", ""]
        for w in dict.fromkeys(r["workload"] for r in results["workloads"] if r["shape"] == shape):
            rows = [r for r in results["workloads"] if r["shape"] == shape and r["workload"] == w]
            r0 = rows[0]
            floor = any("floor_ms" in r for r in rows)
            lines += [
                f"### {w}: batch {r0['batch']}, {r0['src_len']}-token "
                f"{'source' if cfg['family'] == 'encoder-decoder' else 'prompt'}, "
                f"{r0['new_tokens']} new tokens",
                "",
                "| stack | ms/token | min–max | TTFT ms | decode ms/tok | encoder ms | total ms "
                "| tokens/s | agree | size MB | RSS loaded MB | RSS peak MB |"
                + (" step MB | floor ms | ÷ floor |" if floor else ""),
                "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" * 3 if floor else ""),
            ]
            for r in sorted(rows, key=lambda r: r["ms_per_token"]["median"]):
                m, s = r["ms_per_token"], stacks[r["stack"]]
                enc = r["encoder_ms"]["median"] if r["encoder_ms"] else None
                agree = _f(r["agreement"], 3) if r["agreement"] is not None else "—"
                loaded, peak = _rss(s)
                lines.append(
                    f"| {r['stack']} | {_f(m['median'], 3)} | {_f(m['min'], 3)}–{_f(m['max'], 3)}"
                    f" | {_f(r['ttft_ms']['median'])} | {_f(r['decode_ms_per_token']['median'], 3)}"
                    f" | {_f(enc)} | {_f(r['total_ms']['median'], 1)} | {_f(r['tokens_per_s'], 0)}"
                    f" | {agree} | {_f(s.get('size_mb'))} | {loaded} | {peak} |"
                    + (
                        f" {_f(s.get('step_mb'), 1)} | {_f(r.get('floor_ms'), 2)} "
                        f"| {_f(r.get('floor_ratio'), 2)} |"
                        if floor
                        else ""
                    )
                )
            lines.append("")
        bw = (results.get("bandwidth") or {}).get(shape)
        if bw and bw.get("best_gbps"):
            each = ", ".join(
                f"{m.get('best_gbps', 0):.1f}" for m in bw["measurements"] if "best_gbps" in m
            )
            lines += [
                f"Floor: the host's memory bandwidth {bw['best_gbps']:.1f} GB/s (best of the "
                f"STREAM-like measurements before and after this shape's workloads: {each}); "
                "floor ms = step MB (the weights one decode step reads, from the stack's files) "
                "÷ that; ÷ floor = decode ms/token ÷ floor ms (benchmarks/floor.py).",
                "",
            ]
        sweep = [r for r in results["sweep"] if r["shape"] == shape]
        if sweep:
            batches = sorted({r["batch"] for r in sweep})
            lines += [
                "### Throughput sweep (tokens/s, median; 16-token inputs, 32 new tokens)",
                "",
                "| stack | " + " | ".join(f"b{b}" for b in batches) + " |",
                "|---|" + "---|" * len(batches),
            ]
            tps = {(r["stack"], r["batch"]): r["tokens_per_s"]["median"] for r in sweep}
            for name in dict.fromkeys(r["stack"] for r in sweep):
                cells = [_f(tps.get((name, b)), 0) for b in batches]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            lines.append("")
        lines += _file_md([r for r in results.get("file", []) if r["shape"] == shape])
        skipped = {k: s for k, s in stacks.items() if s.get("status") != "ok"}
        for k, s in skipped.items():
            lines.append(f"- skipped {k}: {s.get('reason')}")
        for k, s in stacks.items():
            for w, e in (s.get("errors") or {}).items():
                lines.append(f"- {k} failed on {w}: {e}")
        lines.append("")
    if results.get("hf"):  # --hf: the real model's perplexity beside speed
        lines += hf_md(results)
    if results["shapes"]:  # the targets compare the workloads' stacks
        lines += _targets_md(results.get("targets") or {})
    if results.get("profile"):
        lines += _profile_md(results["profile"], results.get("workloads", []))
    if results.get("quality"):
        lines += _quality_md(results["quality"])
    if "frontier" in results:
        lines += frontier_md(results["frontier"], results.get("frontier_skipped", []))
    return "\n".join(lines).rstrip() + "\n"


def _load_md(meta: dict) -> str:
    """The host's load averages at the start and the end of the run, when recorded."""
    start, end = meta.get("load_average"), meta.get("load_average_end")
    if not start:
        return ""
    cpus = f" on {meta['cpu_count']} CPUs" if meta.get("cpu_count") else ""
    return f" · load average {start[0]:.1f} at the start, " + (
        f"{end[0]:.1f} at the end{cpus}" if end else f"end not recorded{cpus}"
    )


def frontier_md(points: list[dict], skipped: list[dict]) -> list[str]:
    """The frontier's table: one row per recipe and stack (benchmarks/frontier.py)."""
    lines = ["## Quality next to speed", ""]
    if points:
        p0 = points[0]
        lines += [
            f"BLEU: {p0['bleu_decoding']} ({p0['sentences']:,} sentences; cased beside it). "
            f"Speed: {p0['speed_decoding']}, text in and out, {p0['threads']} "
            f"thread{'s' if p0['threads'] > 1 else ''}, each "
            "stack in its own process: ms/sentence = each sentence alone (batch 1), mean; "
            "ms/token = that time over the tokens decoded (the package's tokenizer, EOS "
            "included); "
            "sentences/s = the whole file through the stack's batch path (ours translate_file, "
            "CTranslate2 translate_batch), its best batching. greedy BLEU = the batch-1 "
            "translations' (lowercased); = fp32 = the share of them equal to edgeformer-fp32's. "
            "CTranslate2 runs the package's fp32 weights, converted (int8: its quantization).",
            "",
            "| recipe | stack | BLEU | BLEU cased | ms/sentence (batch 1) | ms/token (batch 1) "
            "| sentences/s (file) | best batching | greedy BLEU | = fp32 | size MB |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in points:
            b = p["file_batching"]
            batching = FileBatching(b["max_batch_size"], b["batch_type"], b["inter_threads"])
            same = _f(p["same_as_fp32"], 3) if p["same_as_fp32"] is not None else "—"
            lines.append(
                f"| {p['recipe']} | {p['stack']} | **{_f(p['bleu'])}** | {_f(p['bleu_cased'])} "
                f"| {_f(p['ms_per_sentence'])} | {_f(p.get('ms_per_token'), 3)} "
                f"| {_f(p['sentences_per_s'], 1)} "
                f"| {batching.describe()} | {_f(p['bleu_greedy'])} | {same} "
                f"| {_f(p['size_mb'])} |"
            )
        lines.append("")
    else:
        lines += ["No point was measured.", ""]
    lines += [f"- skipped {s['recipe']} {s['stack']}: {s['reason']}" for s in skipped]
    return lines + ([""] if skipped else [])


def _protocol_md(st: dict) -> list[str]:
    """The paragraph on the workloads' protocol."""
    return [
        "Greedy, forced output length (EOS ignored), random weights unless a package is named. "
        "Same weights: every stack of a row runs one model, given the same token ids: ours "
        "(edgeformer-torch, edgeformer-fp32/int8/int4) the edgeformer conversion of the Marian "
        "/ GPT-2 model that hf-torch, Optimum and CTranslate2 run, and edgeformer-llama-* that "
        "of the Llama onnxruntime-genai converts (with --package, ours run that trained model; "
        "without transformers, a random model of their own). ms/token = total ÷ new tokens "
        "(per decoding step, whole batch); decode = (total − TTFT) ÷ (new − 1); TTFT = the same "
        "call with one new token; medians, min–max over interleaved rounds. agree = fraction "
        "of tokens equal to the reference stack's (Marian / GPT-2 rows: hf-torch, HF PyTorch; "
        "Llama rows: hf-torch-llama, the HF PyTorch Llama; ours with a --package: "
        "edgeformer-torch; — where the reference did not run). size = the model files the "
        "stack loads. RSS loaded = the stack's own process once loaded; RSS peak = "
        + (
            "a fresh process that loads the stack and runs each workload once (MB)."
            if st["memory"] == "subprocess"
            else "the stack's process after all its runs (MB), or +growth of peak RSS while "
            "loading (+MB, --isolation none)."
        ),
        "",
    ]


def _optimum_env_md(env: dict | None) -> list[str]:
    """The line naming Optimum's own environment and its versions, when its stacks ran there."""
    if not env:
        return []
    v = env.get("versions") or {}
    vs = ", ".join(f"{k} {v[k]}" for k in v if v[k])
    return [
        f"optimum-* stacks in their own environment ({env['interpreter']}): Python "
        f"{env.get('python')}, {vs or env.get('error', 'versions unknown')}.",
        "",
    ]


def _file_md(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    r0 = rows[0]

    def setting(x: dict) -> FileBatching:  # results before inter_threads ran one at a time
        return FileBatching(x["max_batch_size"], x["batch_type"], x.get("inter_threads", 1))

    settings = list(dict.fromkeys(setting(x) for x in r0["runs"]))
    lines = [
        f"### File translation: {r0['sentences']:,} sentences (test_2016_flickr source lengths), "
        f"{r0['new_tokens']} tokens each",
        "",
        "Sentences/s through the stack's batch path (ours: `Translator.translate_file`; "
        'CTranslate2: `translate_batch` with its `max_batch_size` / `batch_type`; "2 at '
        'once": `inter_threads=2` with 1 intra-op thread each, in both engines), best of the '
        "runs per setting; the stack's best setting in bold.",
        "",
        "| stack | best | sentences/s | tokens/s | "
        + " | ".join(s.describe() for s in settings)
        + " |",
        "|---|---|---|---|" + "---|" * len(settings),
    ]
    for r in sorted(rows, key=lambda r: -r["best"]["sentences_per_s"]):
        b = r["best"]
        cells = []
        for s in settings:
            ms = min(x["ms"] for x in r["runs"] if setting(x) == s)
            cells.append(_f(r["sentences"] / (ms / 1e3), 1))
        lines.append(
            f"| {r['stack']} | **{setting(b).describe()}** | "
            f"{_f(b['sentences_per_s'], 1)} | {_f(b['tokens_per_s'], 0)} | "
            + " | ".join(cells)
            + " |"
        )
    return lines + [""]


def _shape_line(cfg: dict) -> str:
    layers = (
        f"{cfg['n_encoder_layers']}+{cfg['n_decoder_layers']}"
        if cfg["family"] == "encoder-decoder"
        else str(cfg["n_decoder_layers"])
    )
    pkg = f", package {cfg['package']}" if cfg.get("package") else ", random weights"
    ffn = str(cfg["d_ff"])
    if cfg.get("decoder_d_ff") is not None:
        ffn += f" (decoder {cfg['decoder_d_ff']})"
    return (
        f"d_model {cfg['d_model']}, {layers} layers, {cfg['n_heads']} heads, FFN {ffn} "
        f"{cfg['activation']}, vocab {cfg['vocab_size']}, {cfg['norm']}-LN, "
        f"{cfg['positional']}{pkg}"
    )


def _met(r: dict) -> str:
    return "met" if r["met"] else "NOT met"


def _targets_md(t: dict) -> list[str]:
    lines = ["## Targets (measured ratios, this run)", ""]
    for r in t.get("fp32_vs_ct2", []):
        lines.append(
            f"- {r['shape'].upper()} {r['workload']}: edgeformer-fp32 {r['ours_ms']:.3f} ÷ "
            f"{r['peer']} {r['peer_ms']:.3f} ms/token = **{r['ratio']:.2f}** "
            f"(target ≤ {r['target']}: {_met(r)})"
        )
    if not t.get("fp32_vs_ct2"):
        lines.append(f"- edgeformer-fp32 vs {FP32_PEER}: not computed (one of them did not run)")
    for r in t.get("speedup_vs_eager", []):
        lines.append(
            f"- {r['shape'].upper()} {r['workload']}: speedup vs {r['eager']} (PyTorch eager) "
            f"{r['eager_ms']:.3f} ÷ {r['ours_ms']:.3f} = **{r['speedup']:.2f}×** "
            f"(target ≥ {r['target']:.0f}×: {_met(r)})"
        )
    if not t.get("speedup_vs_eager"):
        lines.append("- speedup vs PyTorch eager: not computed (edgeformer-fp32 or eager missing)")
    for r in t.get("quantized_vs_genai", []):
        lines.append(
            f"- {r['shape'].upper()} {r['workload']}: best quantized CPU variant {r['stack']} "
            f"{r['ours_ms']:.3f} ÷ {r['peer']} {r['peer_ms']:.3f} ms/token = "
            f"**{r['ratio']:.2f}** (target ≤ {r['target']}: {_met(r)}; same Llama weights)"
        )
    if not t.get("quantized_vs_genai"):
        where = " and ".join(f"{s.upper()} {w}" for s, w in QUANT_WORKLOADS)
        lines.append(
            f"- best quantized variant vs {QUANT_PEER} ({where}): not computed (a quantized "
            f"{LLAMA_OURS}* variant or {QUANT_PEER} did not run)"
        )
    for r in t.get("file_vs_ct2", []):
        lines.append(
            f"- ED file translation: {r['ours']} {r['ours_sps']:.1f} ÷ {r['peer']} "
            f"{r['peer_sps']:.1f} sentences/s = **{r['ratio']:.2f}** (target ≥ 1: {_met(r)})"
        )
    return lines + [""] + _real_md(t.get("real") or []) + _llama_md(t.get("llama_vs_genai") or [])


REAL_GOALS = {
    "best_vs_peers": "our best ÷ the best of genai-int4, ct2-int8, llama.cpp Q4_0 / Q4_K_M "
    "(ms/token)",
    "fp32_vs_floor": "edgeformer-fp32 decode ms/token ÷ its floor",
    "ttft_512": "our best TTFT ÷ the best peer's, 512-token prompt",
}


def _real_md(rows: list[dict]) -> list[str]:
    """The real-shape goals (targets.real_targets)."""
    if not rows:
        return []
    lines = [
        "### Real shapes, batch 1 (ratios of this run)",
        "",
        "| shape | workload | goal | ours | against | ratio | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours = f"{r['ours']} {r['ours_ms']:.2f}"
        against = (
            f"floor {r['floor_ms']:.2f}" if "floor_ms" in r else f"{r['peer']} {r['peer_ms']:.2f}"
        )
        lines.append(
            f"| {r['shape']} | {r['workload']} | {REAL_GOALS[r['goal']]} | {ours} | {against} "
            f"| **{r['ratio']:.2f}** | ≤ {r['target']} ({_met(r)}) |"
        )
    return lines + [""]


def _llama_md(rows: list[dict]) -> list[str]:
    """edgeformer and onnxruntime-genai side by side on the same Llama, fp32 and int4."""
    if not rows:
        return []
    lines = [
        "### edgeformer vs onnxruntime-genai, same Llama weights (ms/token, medians)",
        "",
        "| workload | edgeformer | ms/token | onnxruntime-genai | ms/token | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape'].upper()} {r['workload']} | {r['ours']} | {r['ours_ms']:.3f} "
            f"| {r['peer']} | {r['peer_ms']:.3f} | **{r['ratio']:.2f}** |"
        )
    return lines + [""]


def _profile_md(prof: dict, rows: list[dict]) -> list[str]:
    lines = ["## Profile", ""]
    for shape, p in prof.items():
        for name, f in (p.get("floor") or {}).items():
            if "error" in f:
                lines += [f"- {shape.upper()} {name} weight-streaming floor: {f['error']}", ""]
                continue
            fp32 = {  # the float32 stacks of this shape's W1 (the same bytes per step)
                r["stack"]: r["decode_ms_per_token"]["median"] for r in rows
                if r["shape"] == shape and r["workload"] == "W1"
                and (r["stack"].endswith("-fp32") or r["stack"].endswith("torch"))
            }  # fmt: skip
            vs = ", ".join(
                f"{k} {ms:.3f} ms ({ms / f['floor_ms']:.2f}×)"
                for k, ms in sorted(fp32.items(), key=lambda kv: kv[1])
            )
            lines += [
                f"- {shape.upper()} {name}, weight-streaming floor: its step's MatMul / Gemm "
                f"read {f['weights_mb']:.1f} MB of fp32 weights; one MatMul of one row over as "
                f"many takes **{f['floor_ms']:.3f} ms** (a fresh process). W1 decode per token, "
                f"÷ that floor: {vs or 'W1 not run'}",
                "",
            ]
        for name, d in (p.get("decode_step") or {}).items():
            if "error" in d:
                lines.append(f"- {shape.upper()} {name} decode step: {d['error']}")
                continue
            lines += [
                f"### {shape.upper()} {name}: one decode step of {d.get('graph', 'the decoder')} "
                f"(batch 1, past {d['past']}), {d['nodes_per_step']:.0f} nodes",
                "",
                f"session.run wall {d['session_run_wall_us_per_step']:.0f} µs, ORT model_run "
                f"{d['model_run_us_per_step']:.0f} µs, kernels {d['kernel_us_per_step']:.0f} µs",
                "",
                "| op type | µs/step | % of kernels |",
                "|---|---|---|",
            ]
            lines += [
                f"| {o['op_type']} | {o['us_per_step']:.1f} | {o['pct_of_kernels']:.1f} |"
                for o in d["ops"][:12]
            ]
            lines.append("")
        over = p.get("python_overhead_W1") or {}
        if over:
            lines += [
                f"### {shape.upper()} W1: time outside session.run (Python, numpy, copies)",
                "",
                "| stack | total ms | in session.run ms | outside ms | outside % | runs |",
                "|---|---|---|---|---|---|",
            ]
            for name, o in over.items():
                if "error" in o:
                    lines.append(f"| {name} | {o['error']} | | | | |")
                    continue
                lines.append(
                    f"| {name} | {o['total_ms']:.1f} | {o['in_session_run_ms']:.1f} | "
                    f"{o['outside_ms']:.1f} | {o['outside_pct']:.0f} | {o['session_runs']} |"
                )
            lines.append("")
    return lines


def _quality_md(q: dict) -> list[str]:
    lines = ["## Quality", ""]
    if "bleu" in q:
        b = q["bleu"]
        lines += [
            f"Multi30k test_2016_flickr {b.get('direction')}, {b.get('sentences')} sentences, "
            f"greedy, sacrebleu ({b['package']})",
            "",
            "| variant | BLEU | BLEU (lowercased) | = PyTorch greedy | seconds | sentences/s |",
            "|---|---|---|---|---|---|",
        ]
        for v, r in b["variants"].items():
            same = r.get("same_as_torch", "-")
            lines.append(
                f"| {v} | {r['bleu']} | {r['bleu_lc']} | {same} | {r['seconds']} "
                f"| {r['sentences_per_s']} |"
            )
        if "torch_bleu" in b:
            lines.append(f"| PyTorch (checkpoint) | {b['torch_bleu']} | | | | |")
        lines.append("")
    if "perplexity" in q:
        p = q["perplexity"]
        lines += [
            f"Tiny Shakespeare val (last 10 %), {p.get('tokens')} tokens predicted, "
            f"{p['windows']} windows ({p['package']})",
            "",
            "| variant | loss (nats/token) | perplexity | seconds | tokens/s |",
            "|---|---|---|---|---|",
        ]
        for v, r in p["variants"].items():
            lines.append(
                f"| {v} | {r['loss']} | {r['ppl']} | {r['seconds']} | {r['tokens_per_s']} |"
            )
        lines.append("")
    return lines


# ---- bench --hf: a real model, perplexity beside speed (benchmarks.weights) ------------------


def hf_rows(results: dict) -> list[dict]:
    """One row per stack of the --hf shape: perplexity (and ratio), W1 ms/token, decode,
    TTFT at W1 and W4, size, RSS; sorted by perplexity, then speed."""
    shape = results["hf"]["shape"]
    work = {(r["stack"], r["workload"]): r for r in results["workloads"] if r["shape"] == shape}
    out = []
    for name, s in results["stacks"][shape].items():
        if s.get("status") != "ok":
            continue
        w1, w4 = work.get((name, "W1")), work.get((name, "W4"))
        m = s.get("memory") or {}
        p = s.get("perplexity") or {}
        out.append({
            "stack": name,
            "ppl": p.get("ppl"),
            "ratio": p.get("ratio"),
            "ppl_error": p.get("error"),
            "ms_per_token": w1["ms_per_token"]["median"] if w1 else None,
            "decode_ms": w1["decode_ms_per_token"]["median"] if w1 else None,
            "ttft_ms": w1["ttft_ms"]["median"] if w1 else None,
            "ttft_long_ms": w4["ttft_ms"]["median"] if w4 else None,
            "agree": w1["agreement"] if w1 else None,
            "size_mb": s.get("size_mb"),
            "rss_mb": m.get("run_peak_rss_mb", m.get("peak_rss_mb", m.get("loaded_rss_mb"))),
        })  # fmt: skip
    return sorted(out, key=lambda r: (r["ppl"] is None, r["ppl"] or 0, r["ms_per_token"] or 0))


def hf_md(results: dict) -> list[str]:
    hf = results["hf"]
    w = hf["windows"]
    long = next((r for r in results["workloads"] if r["workload"] == "W4"), None)
    lines = [
        f"## Perplexity beside speed: {hf['source']}",
        "",
        f"Every stack runs this model's own weights ({hf['what']}). Perplexity: {w['windows']} "
        f"windows of {w['window_tokens']} tokens of {w['text']} ({w['predicted_tokens']:,} "
        f"tokens predicted, the same ids for every stack), teacher-forced in the stack's own "
        f"process; × fp32 = ÷ {REFERENCE}'s (transformers, fp32). Speed: batch 1, "
        f"{results['settings']['threads']} threads, the text's first ids as the prompt, greedy, "
        "forced length: ms/token and decode of W1 (16-token prompt, 32 new tokens), TTFT = "
        "prompt + first token"
        + (f" (W1; and W4's {long['src_len']}-token prompt)" if long else " (W1)")
        + ". agree = W1's tokens equal to hf-torch's. RSS = the stack's process after its runs.",
        "",
        "| stack | perplexity | × fp32 | ms/token | decode ms/token | TTFT ms | TTFT ms "
        "(512) | agree | size MB | RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in hf_rows(results):
        ppl = _fx(r["ppl"], 3) if r["ppl"] is not None else f"err: {r['ppl_error']}"
        lines.append(
            f"| {r['stack']} | {ppl} | {_fx(r['ratio'], 4)} | {_fx(r['ms_per_token'], 2)} "
            f"| {_fx(r['decode_ms'], 2)} | {_fx(r['ttft_ms'], 1)} | {_fx(r['ttft_long_ms'], 0)} "
            f"| {_fx(r['agree'], 3)} | {_fx(r['size_mb'], 1)} | {_fx(r['rss_mb'], 0)} |"
        )
    lines.append("")
    for c in hf_comparisons(results):
        lines.append(f"- {c}")
    return lines + [""]


# issue 57's int4 goal: perplexity no worse than llama.cpp Q4_K_M's, at <= 0.8x its ms/token
INT4_PEER, INT4_SPEED = "llamacpp-q4_k_m", 0.8


def hf_comparisons(results: dict) -> list[str]:
    """The ratios of this run that the frontier is read by: each of our quantized variants
    against llama.cpp's nearest quantization, and the gguf variant against the file."""
    by = {r["stack"]: r for r in hf_rows(results)}
    pairs = (
        ("edgeformer-int4", INT4_PEER), ("edgeformer-int4", "llamacpp-q4_0"),
        ("edgeformer-int8", "llamacpp-q8_0"), ("edgeformer-gguf", "llamacpp-gguf"),
        ("edgeformer-fp32", REFERENCE),
    )  # fmt: skip
    out = []
    for ours, peer in pairs:
        a, b = by.get(ours), by.get(peer)
        if not (a and b and a["ppl"] and b["ppl"] and a["ms_per_token"] and b["ms_per_token"]):
            continue
        text = (
            f"{ours} ÷ {peer}: perplexity {a['ppl'] / b['ppl']:.4f}×, ms/token "
            f"{a['ms_per_token'] / b['ms_per_token']:.2f}×"
        )
        if ours == "edgeformer-int4" and peer == INT4_PEER:
            met = a["ppl"] <= b["ppl"] and a["ms_per_token"] <= INT4_SPEED * b["ms_per_token"]
            text += (
                f" (issue 57's int4 goal: perplexity ≤ and ms/token ≤ {INT4_SPEED}×: "
                f"{'met' if met else 'NOT met'})"
            )
        out.append(text)
    return out


HF_MARKERS = {"edgeformer": "o", "hf": "P", "genai": "s", "llamacpp": "^"}


def hf_plot(results: dict, path: Path) -> Path | None:
    """Two panels: perplexity (× fp32) against W1 ms/token and against size on disk; a point
    per stack, a marker per engine, the Pareto front of speed and perplexity dashed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    pts = [r for r in hf_rows(results) if r["ratio"] is not None]
    if not pts:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    panels = (("ms_per_token", "ms per token, batch 1 (lower is better)"),
              ("size_mb", "size on disk, MB (lower is better)"))  # fmt: skip
    for ax, (key, label) in zip(axes, panels):
        shown = [r for r in pts if r[key]]
        for i, r in enumerate(shown):
            engine = r["stack"].split("-")[0]
            ax.scatter(r[key], r["ratio"], marker=HF_MARKERS.get(engine, "*"), s=70,
                       color=f"C{i % 10}", edgecolors="black", linewidths=0.5, zorder=3,
                       label=r["stack"])  # fmt: skip
            ax.annotate(r["stack"], (r[key], r["ratio"]), fontsize=7, xytext=(4, 4),
                        textcoords="offset points")  # fmt: skip
        front = pareto([(r[key], -r["ratio"]) for r in shown], faster_is_lower=True)
        ax.step([x for x, _ in front], [-y for _, y in front], where="post", color="grey",
                alpha=0.6, linestyle="--", zorder=2)  # fmt: skip
        ax.set_xlabel(label)
        ax.set_ylabel("perplexity ÷ transformers fp32 (lower is better)")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    hf, meta = results["hf"], results["meta"]
    axes[0].set_title("perplexity vs latency")
    axes[1].set_title("perplexity vs size")
    title = (
        f"{Path(hf['source']).name}: every stack on its weights · {hf['windows']['windows']} x "
        f"{hf['windows']['window_tokens']} tokens of Tiny Shakespeare val · {meta['cpu']} · "
        f"{meta['threads']} threads · {meta['date']}"
    )
    return _save(fig, path, title)


def _save(fig, path: Path, title: str) -> Path:
    """A two-panel figure with its small title, written to `path` and closed."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---- files -------------------------------------------------------------------------------------


def write(results: dict, out: Path, name: str = "latest") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.json", out / f"{name}.md"]
    paths[0].write_text(json.dumps(results, indent=1, default=str) + "\n")
    paths[1].write_text(markdown(results))
    if results.get("hf"):  # perplexity against ms/token and size
        png = hf_plot(results, out / f"{name}.png")
    else:
        png = plot(results, out / f"{name}.png")
    paths += [png] if png else []
    if results.get("frontier"):
        png = frontier_plot(results, out / f"{name}-frontier.png")
        paths += [png] if png else []
    return paths


def pareto(xy: list[tuple[float, float]], faster_is_lower: bool) -> list[tuple[float, float]]:
    """The (speed, BLEU) points that no other point beats on both, fastest first."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(xy, key=lambda p: (p[0] if faster_is_lower else -p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return front


FRONTIER_MARKERS = {"fp32": "o", "int8": "s", "int4": "^", "int8-dynamic": "D"}
PEER_MARKERS = {"fp32": "P", "int8": "X"}  # CTranslate2's


def frontier_plot(results: dict, path: Path) -> Path | None:
    """Two panels: BLEU against ms/sentence at batch 1 (log x) and against sentences/s of the
    file (log x); a marker per stack, a colour per recipe."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    except ImportError:
        return None
    points = results["frontier"]
    recipes = list(dict.fromkeys(p["recipe"] for p in points))
    stacks = list(dict.fromkeys(p["stack"] for p in points))
    colours = {r: f"C{i % 10}" for i, r in enumerate(recipes)}

    def marker(p: dict) -> str:
        table = PEER_MARKERS if p["engine"] == "ctranslate2" else FRONTIER_MARKERS
        return table.get(p["variant"], "*")

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    panels = (
        ("ms_per_sentence", "ms per sentence, batch 1 (lower is better)"),
        ("sentences_per_s", "sentences/s, whole test file (higher is better)"),
    )
    for ax, (key, label) in zip(axes, panels):
        for p in points:
            ax.scatter(p[key], p["bleu"], marker=marker(p), s=60, color=colours[p["recipe"]],
                       edgecolors="black", linewidths=0.5, zorder=3)  # fmt: skip
        for r in recipes:  # the recipe's Pareto front: no point both faster and better
            front = pareto([(p[key], p["bleu"]) for p in points if p["recipe"] == r],
                           faster_is_lower=key == "ms_per_sentence")  # fmt: skip
            ax.step([x for x, _ in front], [y for _, y in front], where="post",
                    color=colours[r], alpha=0.5, linestyle="--", zorder=2)  # fmt: skip
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(label)
        ax.set_ylabel("BLEU (beam 5, lowercased)")
        ax.grid(True, which="both", alpha=0.3)
    p0 = points[0]
    axes[0].set_title(f"BLEU vs latency ({p0['speed_decoding'].split(' (')[0]})")
    axes[1].set_title(f"BLEU vs file throughput ({p0['speed_decoding'].split(' (')[0]})")
    by_stack = {p["stack"]: p for p in points}
    handles = [Line2D([], [], linestyle="", marker=marker(by_stack[s]), color="grey",
                      markeredgecolor="black", label=s) for s in stacks]  # fmt: skip
    handles += [Line2D([], [], linestyle="--", marker="o", color=colours[r],
                       label=f"{r} (dashed: its Pareto front)") for r in recipes]  # fmt: skip
    axes[1].legend(handles=handles, fontsize=7, loc="best")
    meta = results["meta"]
    title = (
        f"Quality next to speed · {p0['sentences']:,} sentences of {p0['bleu_decoding']} · "
        f"speed: {p0['speed_decoding']} · {meta['cpu']} · {meta['threads']} "
        f"thread{'s' if meta['threads'] > 1 else ''}"
    )
    return _save(fig, path, title)


def plot(results: dict, path: Path) -> Path | None:
    """Per shape: ms/token by stack per workload (bars), tokens/s vs batch size (lines)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FormatStrFormatter, NullFormatter
    except ImportError:
        return None
    shapes = list(results["shapes"])
    if not shapes:
        return None
    fig, axes = plt.subplots(2, len(shapes), figsize=(7 * len(shapes), 9), squeeze=False)
    for j, shape in enumerate(shapes):
        ax = axes[0][j]
        rows = [r for r in results["workloads"] if r["shape"] == shape]
        works = list(dict.fromkeys(r["workload"] for r in rows))
        names = list(dict.fromkeys(r["stack"] for r in rows))
        width = 0.8 / max(len(names), 1)
        for i, name in enumerate(names):
            ys, lo, hi = [], [], []
            for w in works:
                m = next((r["ms_per_token"] for r in rows if (r["stack"], r["workload"]) ==
                          (name, w)), None)  # fmt: skip
                ys.append(m["median"] if m else 0)
                lo.append(m["median"] - m["min"] if m else 0)
                hi.append(m["max"] - m["median"] if m else 0)
            xs = [k + (i - (len(names) - 1) / 2) * width for k in range(len(works))]
            ax.bar(xs, ys, width, yerr=[lo, hi], label=name, capsize=2)
        ax.set_xticks(range(len(works)), works)
        ax.set_ylabel("ms per generated token (lower is better)")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{shape.upper()}: latency per token")
        ax.legend(fontsize=7, ncol=2)
        ax = axes[1][j]
        sweep = [r for r in results["sweep"] if r["shape"] == shape]
        for name in dict.fromkeys(r["stack"] for r in sweep):
            pts = sorted((r["batch"], r["tokens_per_s"]["median"]) for r in sweep
                         if r["stack"] == name)  # fmt: skip
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        batches = sorted({r["batch"] for r in sweep})
        if batches:
            ax.set_xticks(batches, [str(b) for b in batches])
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("batch size")
        ax.set_ylabel("tokens/s (higher is better)")
        ax.set_title(f"{shape.upper()}: throughput")
        if sweep:
            ax.legend(fontsize=7, ncol=2)
    meta = results["meta"]
    fig.suptitle(f"edgeformer bench · {meta['cpu']} · {meta['threads']} threads · {meta['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
