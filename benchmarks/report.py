"""Results: environment, targets, markdown table, JSON and the PNG plot."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from importlib import metadata
from pathlib import Path

from .artifacts import dir_size

# onnxruntime-genai int4, LM shape (Llama of equal size), W1: from shared/notes/onnx-facts.md,
# measured on this machine type with the same protocol. NOT measured by this benchmark run.
GENAI_INT4_LM_W1_MS = 0.88
FP32_RATIO_TARGET = 0.8  # edgeformer fp32 ms/token / fastest fp32 peer
EAGER_SPEEDUP_TARGET = 5.0  # PyTorch eager ms/token / edgeformer fp32
PACKAGES = (
    "edgeformer", "torch", "onnxruntime", "onnxruntime-gpu", "onnx", "numpy", "tokenizers",
    "optimum", "optimum-onnx", "transformers", "ctranslate2",
)  # fmt: skip


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment(threads: int) -> dict:
    return {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "platform": platform.platform(),
        "versions": versions(),
    }


def size_mb(files: list[Path]) -> float:
    return round(dir_size(files) / 2**20, 2)


def _ms(results: dict, shape: str, workload: str, stack: str) -> float | None:
    for r in results["workloads"]:
        if (r["shape"], r["workload"], r["stack"]) == (shape, workload, stack):
            return r["ms_per_token"]["median"]
    return None


def targets(results: dict) -> dict:
    """Measured ratios against the issue's targets (None where a stack did not run)."""
    out: dict = {"fp32_vs_fastest_peer": [], "speedup_vs_eager": [], "quantized_vs_genai": None}
    stacks = results["stacks"]
    for r in results["workloads"]:
        if r["stack"] != "edgeformer-fp32":
            continue
        shape, w, ours = r["shape"], r["workload"], r["ms_per_token"]["median"]
        peers = {
            name: _ms(results, shape, w, name)
            for name, s in stacks[shape].items()
            if s["group"] == "peers" and s["precision"] == "fp32" and s.get("status") == "ok"
        }
        peers = {k: v for k, v in peers.items() if v is not None}
        if peers:
            best = min(peers, key=peers.get)
            ratio = ours / peers[best]
            out["fp32_vs_fastest_peer"].append(
                {
                    "shape": shape,
                    "workload": w,
                    "ours_ms": ours,
                    "peer": best,
                    "peer_ms": peers[best],
                    "ratio": ratio,
                    "target": FP32_RATIO_TARGET,
                    "met": ratio <= FP32_RATIO_TARGET,
                }  # fmt: skip
            )
        for eager in ("edgeformer-torch", "hf-torch"):
            e = _ms(results, shape, w, eager)
            if e is not None:
                out["speedup_vs_eager"].append(
                    {
                        "shape": shape,
                        "workload": w,
                        "eager": eager,
                        "eager_ms": e,
                        "ours_ms": ours,
                        "speedup": e / ours,
                        "target": EAGER_SPEEDUP_TARGET,
                        "met": e / ours >= EAGER_SPEEDUP_TARGET,
                    }  # fmt: skip
                )
    quant = {
        r["stack"]: r["ms_per_token"]["median"]
        for r in results["workloads"]
        if r["shape"] == "lm" and r["workload"] == "W1"
        and stacks["lm"][r["stack"]]["group"] == "ours"
        and stacks["lm"][r["stack"]]["device"] == "cpu"
        and stacks["lm"][r["stack"]]["precision"] not in ("fp32", "fp16")
    }  # fmt: skip
    # the reference was measured on the full LM shape: no comparison for --quick or a package
    lm = results["shapes"].get("lm", {})
    standard = not results["settings"].get("quick") and not lm.get("package")
    if quant and standard:
        best = min(quant, key=quant.get)
        out["quantized_vs_genai"] = {
            "shape": "lm", "workload": "W1", "stack": best, "ours_ms": quant[best],
            "reference_ms": GENAI_INT4_LM_W1_MS, "ratio": quant[best] / GENAI_INT4_LM_W1_MS,
            "met": quant[best] <= GENAI_INT4_LM_W1_MS,
            "reference": "onnxruntime-genai int4, LM W1, from shared/notes/onnx-facts.md "
            "(a constant: not measured in this run)",
        }  # fmt: skip
    return out


# ---- markdown ----------------------------------------------------------------------------------


def _f(x, nd: int = 2) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def _rss(info: dict) -> str:
    m = info.get("memory") or {}
    if "peak_rss_mb" in m:
        return f"{m['peak_rss_mb']:.0f}"
    if "rss_delta_mb" in m:
        return f"+{m['rss_delta_mb']:.0f}"
    return "—" if "error" not in m else "err"


def markdown(results: dict) -> str:
    meta, st = results["meta"], results["settings"]
    v = meta["versions"]
    vs = ", ".join(f"{k} {v[k]}" for k in v if v[k])
    lines = [
        "# edgeformer bench",
        "",
        f"{meta['date']} · {meta['cpu']} ({meta['cpu_count']} CPUs) · {meta['threads']} threads"
        f" · {st['rounds']} rounds, {st['warmup']} warm-up" + (" · QUICK" if st["quick"] else ""),
        "",
        f"Versions: {vs}.",
        "",
        "Greedy, forced output length (EOS ignored), random weights unless a package is named. "
        "ms/token = total ÷ new tokens (per decoding step, whole batch); decode = (total − TTFT) "
        "÷ (new − 1); TTFT = the same call with one new token; medians, min–max over "
        "interleaved rounds. agree = fraction of tokens equal to the reference stack's (ours: "
        "edgeformer-torch; peers: hf-torch). RSS: "
        + (
            "peak RSS of a fresh process that loads the stack and runs each workload once (MB)."
            if st["memory"] == "subprocess"
            else "growth of peak RSS while loading the stack and running once (+MB)."
        ),
        "",
    ]
    for shape, cfg in results["shapes"].items():
        stacks = results["stacks"][shape]
        lines += [f"## {shape.upper()}: {_shape_line(cfg)}", ""]
        for w in dict.fromkeys(r["workload"] for r in results["workloads"] if r["shape"] == shape):
            rows = [r for r in results["workloads"] if r["shape"] == shape and r["workload"] == w]
            r0 = rows[0]
            lines += [
                f"### {w}: batch {r0['batch']}, {r0['src_len']}-token "
                f"{'source' if shape == 'ed' else 'prompt'}, {r0['new_tokens']} new tokens",
                "",
                "| stack | ms/token | min–max | TTFT ms | decode ms/tok | encoder ms | total ms "
                "| tokens/s | agree | size MB | RSS MB |",
                "|---|---|---|---|---|---|---|---|---|---|---|",
            ]
            for r in sorted(rows, key=lambda r: r["ms_per_token"]["median"]):
                m, s = r["ms_per_token"], stacks[r["stack"]]
                enc = r["encoder_ms"]["median"] if r["encoder_ms"] else None
                agree = _f(r["agreement"], 3) if r["agreement"] is not None else "—"
                lines.append(
                    f"| {r['stack']} | {_f(m['median'], 3)} | {_f(m['min'], 3)}–{_f(m['max'], 3)}"
                    f" | {_f(r['ttft_ms']['median'])} | {_f(r['decode_ms_per_token']['median'], 3)}"
                    f" | {_f(enc)} | {_f(r['total_ms']['median'], 1)} | {_f(r['tokens_per_s'], 0)}"
                    f" | {agree} | {_f(s.get('size_mb'))} | {_rss(s)} |"
                )
            lines.append("")
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
        skipped = {k: s for k, s in stacks.items() if s.get("status") != "ok"}
        for k, s in skipped.items():
            lines.append(f"- skipped {k}: {s.get('reason')}")
        for k, s in stacks.items():
            for w, e in (s.get("errors") or {}).items():
                lines.append(f"- {k} failed on {w}: {e}")
        lines.append("")
    lines += _targets_md(results.get("targets") or {})
    if results.get("profile"):
        lines += _profile_md(results["profile"])
    if results.get("quality"):
        lines += _quality_md(results["quality"])
    return "\n".join(lines).rstrip() + "\n"


def _shape_line(cfg: dict) -> str:
    layers = (
        f"{cfg['n_encoder_layers']}+{cfg['n_decoder_layers']}"
        if cfg["family"] == "encoder-decoder"
        else str(cfg["n_decoder_layers"])
    )
    pkg = f", package {cfg['package']}" if cfg.get("package") else ", random weights"
    return (
        f"d_model {cfg['d_model']}, {layers} layers, {cfg['n_heads']} heads, FFN {cfg['d_ff']} "
        f"{cfg['activation']}, vocab {cfg['vocab_size']}, {cfg['norm']}-LN, "
        f"{cfg['positional']}{pkg}"
    )


def _targets_md(t: dict) -> list[str]:
    lines = ["## Targets (measured ratios)", ""]
    for r in t.get("fp32_vs_fastest_peer", []):
        lines.append(
            f"- {r['shape'].upper()} {r['workload']}: edgeformer-fp32 {r['ours_ms']:.3f} ÷ "
            f"{r['peer']} {r['peer_ms']:.3f} ms/token = **{r['ratio']:.2f}** "
            f"(target ≤ {r['target']}: {'met' if r['met'] else 'NOT met'})"
        )
    for r in t.get("speedup_vs_eager", []):
        lines.append(
            f"- {r['shape'].upper()} {r['workload']}: speedup vs {r['eager']} (PyTorch eager) "
            f"{r['eager_ms']:.3f} ÷ {r['ours_ms']:.3f} = **{r['speedup']:.1f}×** "
            f"(target ≥ {r['target']:.0f}×: {'met' if r['met'] else 'NOT met'})"
        )
    q = t.get("quantized_vs_genai")
    if q:
        met = "met" if q["met"] else "NOT met"
        lines.append(
            f"- LM W1 best quantized CPU variant: {q['stack']} {q['ours_ms']:.3f} ms/token vs "
            f"{q['reference_ms']} ms/token = **{q['ratio']:.2f}** ({met}; reference: "
            f"{q['reference']})"
        )
    if len(lines) == 2:
        lines.append("- (no target could be computed: edgeformer-fp32 or the peers did not run)")
    return lines + [""]


def _profile_md(prof: dict) -> list[str]:
    lines = ["## Profile", ""]
    for shape, p in prof.items():
        for name, d in (p.get("decode_step") or {}).items():
            if "error" in d:
                lines.append(f"- {shape.upper()} {name} decode step: {d['error']}")
                continue
            lines += [
                f"### {shape.upper()} {name}: one decoder_with_past step (batch 1, past "
                f"{d['past']}), {d['nodes_per_step']:.0f} nodes",
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


# ---- files -------------------------------------------------------------------------------------


def write(results: dict, out: Path, name: str = "latest") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.json", out / f"{name}.md"]
    paths[0].write_text(json.dumps(results, indent=1, default=str) + "\n")
    paths[1].write_text(markdown(results))
    png = plot(results, out / f"{name}.png")
    return paths + ([png] if png else [])


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
