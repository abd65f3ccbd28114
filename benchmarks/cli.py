"""`edgeformer bench`: speed (and optionally quality) of our runtime against its peers.

    edgeformer bench                                  # ED + LM, all stacks, W1 W2 W3 + sweep
    edgeformer bench --quick                          # tiny shapes, few rounds (smoke test)
    edgeformer bench --shapes lm --stacks edgeformer,ct2 --workloads W1,W3 --rounds 9
    edgeformer bench --package packages/shakespeare --checkpoint runs/shakespeare/best
    edgeformer bench --quality-ed packages/multi30k --quality-lm packages/shakespeare

Writes OUT/latest.json, OUT/latest.md and OUT/latest.png (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import gc
import logging
import shutil
import tempfile
import time
import warnings
from pathlib import Path

from . import measure, report
from .shapes import QUICK_SWEEP_BATCHES, SWEEP_BATCHES, WORKLOADS, Shape, get_shape, sweep_workload
from .stacks import (
    Sources,
    Stack,
    cuda_available,
    inputs_for,
    load,
    missing_modules,
    package_variants,
    prepare,
    select_stacks,
)
from .worker import Worker


def add_arguments(p: argparse.ArgumentParser, command: str = "bench") -> None:
    p.add_argument("--shapes", default="ed,lm", help="ed,lm (default both)")
    p.add_argument(
        "--workloads", default="W1,W2,W3,sweep", help="W1,W2,W3,sweep (none: quality only)"
    )
    p.add_argument(
        "--stacks",
        default="all",
        help="all | ours | peers | names or prefixes, comma-separated (edgeformer-fp32, "
        "edgeformer-torch, hf-torch, optimum-fp32, optimum-int8, ct2-fp32, ct2-int8, ...)",
    )
    p.add_argument("--threads", type=int, default=2, help="threads for every stack (default 2)")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 7; quick 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls (default 2; quick 1)")
    p.add_argument("--sweep-batches", default=None, help="default 1,2,4,8,16,32 (quick 1,4,16)")
    p.add_argument("--quick", action="store_true", help="tiny shapes and few rounds (smoke test)")
    p.add_argument("--out", default="benchmarks/results", help="results folder")
    p.add_argument("--name", default="latest", help="results file stem (default latest)")
    p.add_argument(
        "--package",
        action="append",
        default=[],
        help="a trained package to run as 'ours' instead of random weights (its family picks "
        "the shape; peers get that shape); repeat for ED and LM",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        help="the checkpoint of a --package, for edgeformer-torch (else that stack is skipped)",
    )
    p.add_argument(
        "--memory",
        choices=("subprocess", "delta", "off"),
        default=None,
        help="peak RSS per stack: fresh child process (default), in-process delta (quick), off",
    )
    p.add_argument(
        "--spinning",
        choices=("default", "on", "off"),
        default="default",
        help="onnxruntime intra-op spinning for ours and Optimum (default: off for both; ours "
        "through the runtime's own default)",
    )
    p.add_argument(
        "--isolation",
        choices=("process", "none"),
        default="process",
        help="process (default): each stack runs in a process of its own, as deployed; none: "
        "all in this process (engines' thread pools then slow each other down)",
    )
    p.add_argument("--profile", action="store_true", help="decode-step breakdown (ORT profiler)")
    p.add_argument("--work", default=None, help="keep built models here and reuse them")
    p.add_argument("--quality-ed", default=None, help="translation package: Multi30k BLEU")
    p.add_argument("--quality-lm", default=None, help="LM package: Tiny Shakespeare perplexity")
    p.add_argument(
        "--quality-checkpoint",
        default=None,
        help="the --quality-ed package's checkpoint: count greedy outputs equal to PyTorch's",
    )
    p.add_argument("--quality-limit", type=int, default=None, help="sentences / windows (quick)")


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _shapes(args) -> list[tuple[Shape, Path | None, Path | None]]:
    """(shape, package, checkpoint) per requested shape; --package replaces our random model."""
    from edgeformer.models.config import ModelConfig
    from edgeformer.runtime.package import load_package

    given: dict[str, tuple] = {}
    for i, p in enumerate(args.package):
        pkg = load_package(p, verify=False)
        name = "ed" if pkg.family == "encoder-decoder" else "lm"
        ckpt = Path(args.checkpoint[i]) if i < len(args.checkpoint) else None
        given[name] = (ModelConfig.from_dict(pkg.config["model"]), Path(p), ckpt)
    names = _csv(args.shapes) if not args.package else list(given)
    out = []
    for name in names:
        if name not in ("ed", "lm"):
            raise ValueError(f"unknown shape {name!r}; expected ed, lm")
        cfg, pkg, ckpt = given.get(name, (None, None, None))
        out.append((get_shape(name, args.quick, cfg), pkg, ckpt))
    return out


def _quiet_libraries() -> None:
    for name in ("optimum", "transformers", "onnxruntime", "root"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except ImportError:
        pass
    warnings.filterwarnings("ignore")


def run(args) -> int:
    t_start = time.time()
    _quiet_libraries()
    rounds = args.rounds or (2 if args.quick else 7)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    memory_mode = args.memory or ("delta" if args.quick else "subprocess")
    sweep = [int(b) for b in _csv(args.sweep_batches)] if args.sweep_batches else None
    sweep = sweep or list(QUICK_SWEEP_BATCHES if args.quick else SWEEP_BATCHES)
    workloads = [w for w in _csv(args.workloads) if w.lower() != "none"]  # none: quality only
    for w in workloads:
        if w not in WORKLOADS and w != "sweep":
            raise ValueError(f"unknown workload {w!r}; expected W1, W2, W3, sweep")
    if args.threads < 1:
        raise ValueError("--threads must be >= 1")
    cuda = cuda_available()
    stacks = select_stacks(args.stacks, cuda)
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        pass

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="edgeformer-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "meta": report.environment(args.threads),
        "settings": {
            "quick": args.quick,
            "rounds": rounds,
            "warmup": warmup,
            "memory": memory_mode,
            "workloads": workloads,
            "sweep_batches": sweep,
            "stacks": [s.name for s in stacks],
            "cuda": cuda,
            "spinning": args.spinning,
            "isolation": args.isolation,
        },
        "shapes": {},
        "stacks": {},
        "workloads": [],
        "sweep": [],
    }
    try:
        spinning = {"default": None, "on": True, "off": False}[args.spinning]
        for shape, pkg, ckpt in _shapes(args) if workloads else []:
            src = Sources(shape, work, pkg, ckpt, package_variants(stacks), spinning)
            _bench_shape(
                shape, src, stacks, args, results,
                rounds, warmup, memory_mode, workloads, sweep,
            )  # fmt: skip
        if args.quality_ed or args.quality_lm:
            results["quality"] = _quality(args)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    results["targets"] = report.targets(results)
    results["meta"]["wall_s"] = round(time.time() - t_start, 1)
    paths = report.write(results, Path(args.out), args.name)
    print(report.markdown(results))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _bench_shape(
    shape, src, stacks, args, results, rounds, warmup, memory_mode, workloads, sweep
) -> None:
    print(f"== {shape.describe()}" + (f" (package {src.package})" if src.package else ""))
    results["shapes"][shape.name] = {**shape.cfg.to_dict(), "package": str(src.package or "")}
    info: dict[str, dict] = {}
    results["stacks"][shape.name] = info
    ready: list[Stack] = []
    for s in stacks:
        info[s.name] = {"group": s.group, "precision": s.precision, "device": s.device}
        info[s.name]["ref"] = s.ref
        missing = missing_modules(s)
        if missing:
            _skip(info, s, f"not installed: {', '.join(missing)} (pip install edgeformer[bench])")
            continue
        if s.name == "edgeformer-torch" and src.package and not src.checkpoint:
            _skip(info, s, "--package given without its --checkpoint")
            continue
        try:
            t = time.time()
            prepare(s, src)
            info[s.name]["build_s"] = round(time.time() - t, 1)
            ready.append(s)
        except Exception as e:  # a stack that cannot be built is reported, not fatal
            _skip(info, s, f"build failed: {_err(e)}")

    jobs = [WORKLOADS[w] for w in workloads if w in WORKLOADS]
    jobs = [w for w in jobs if shape.family in w.families]
    specs = {
        s.name: {
            "stack": s.name,
            "shape": shape.name,
            "cfg": shape.cfg.to_dict(),
            "work": str(src.work),
            "threads": args.threads,
            "package": str(src.package or ""),
            "checkpoint": str(src.checkpoint or ""),
            "workloads": [[w.batch, w.src_len, w.new_tokens] for w in jobs],
            "variants": list(src.variants),
            "spinning": src.spinning,
        }
        for s in ready
    }
    if memory_mode == "subprocess":
        for s in ready:
            info[s.name]["memory"] = measure.child_peak_rss(specs[s.name])

    runners = {}
    isolated = args.isolation == "process"
    for s in ready:
        try:
            delta = memory_mode == "delta"
            if isolated:
                worker = Worker(specs[s.name])
                r = worker.runner()
                if delta:  # the stack's own process: its load, libraries too
                    info[s.name]["memory"] = {"rss_delta_mb": worker.rss_delta_mb}
            else:
                if delta:
                    gc.collect()
                    measure.reset_peak_rss()
                    before = measure.rss_mb()
                r = load(s, src, args.threads)
                if delta:
                    w = max(jobs, key=lambda w: w.batch * w.new_tokens) if jobs else WORKLOADS["W1"]
                    r.generate(inputs_for(s, shape, w.batch, w.src_len), w.new_tokens)
                    info[s.name]["memory"] = {"rss_delta_mb": measure.peak_rss_mb() - before}
            info[s.name]["size_mb"] = report.size_mb(r.files)
            runners[s.name] = r
            info[s.name]["status"] = "ok"
        except Exception as e:
            _skip(info, s, f"load failed: {_err(e)}")
    for s in stacks:
        if info[s.name].get("status") != "ok":
            print(f"  skip {s.name}: {info[s.name]['reason']}")

    by_name = {s.name: s for s in stacks}
    for w in jobs:
        live = _healthy(runners, shape, w, by_name, info)
        inputs = {k: inputs_for(by_name[k], shape, w.batch, w.src_len) for k in live}
        recs = measure.run_workload(live, inputs, w, rounds, warmup)
        for name, rec in recs.items():
            ref = recs.get(by_name[name].ref)
            rec["agreement"] = measure.agreement(rec["_outputs"], ref and ref["_outputs"])
        for name, rec in recs.items():
            rec.pop("_outputs")
            results["workloads"].append(
                {
                    "shape": shape.name,
                    "workload": w.name,
                    "stack": name,
                    "batch": w.batch,
                    "src_len": w.src_len,
                    "new_tokens": w.new_tokens,
                    **rec,
                }  # fmt: skip
            )
    if "sweep" in workloads:
        for b in sweep:
            w = sweep_workload(b)
            live = _healthy(runners, shape, w, by_name, info)
            inputs = {k: inputs_for(by_name[k], shape, b, w.src_len) for k in live}
            for name, rec in measure.run_sweep(live, inputs, w, rounds, warmup).items():
                results["sweep"].append({"shape": shape.name, "stack": name, "batch": b, **rec})
    for r in runners.values():
        if r.close:
            r.close()
    runners.clear()
    gc.collect()
    if args.profile:
        ready_names = [s.name for s in ready]
        results.setdefault("profile", {})[shape.name] = _profile(
            shape, src, ready_names, by_name, args
        )


def _healthy(runners, shape, w, by_name, info) -> dict:
    """The runners that survive one untimed call of workload `w` (failures are reported)."""
    live = {}
    for name, r in runners.items():
        try:
            r.generate(inputs_for(by_name[name], shape, w.batch, w.src_len), 2)
            live[name] = r
        except Exception as e:
            info[name].setdefault("errors", {})[w.name] = _err(e)
            print(f"  {name} failed on {w.name}: {_err(e)}")
    return live


def _profile(shape, src, names: list[str], by_name, args) -> dict:
    """In this process, after the timing: the ORT profile of one decode step per variant, and
    each onnxruntime stack's W1 time outside session.run."""
    from . import profile

    out: dict = {}
    for name in ("edgeformer-fp32", "edgeformer-int4", "edgeformer-int8"):
        if name not in names:
            continue
        try:
            from edgeformer.runtime.package import load_package

            pkg = load_package(src.our_package(), verify=False)
            graph = pkg.file("decoder_with_past", by_name[name].variant)
            out.setdefault("decode_step", {})[name] = profile.decode_step_ops(
                graph, shape.cfg, args.threads
            )
        except Exception as e:
            out.setdefault("decode_step", {})[name] = {"error": _err(e)}
    w = WORKLOADS["W1"]
    for name in names:
        if not (name.startswith("edgeformer-") or name.startswith("optimum-")):
            continue
        if name == "edgeformer-torch":
            continue
        ids = inputs_for(by_name[name], shape, w.batch, w.src_len)
        try:
            r = load(by_name[name], src, args.threads)
            r.generate(ids, w.new_tokens)  # warm-up
            out.setdefault("python_overhead_W1", {})[name] = profile.python_overhead(
                r, ids, w.new_tokens
            )
        except Exception as e:
            out.setdefault("python_overhead_W1", {})[name] = {"error": _err(e)}
    return out


def _quality(args) -> dict:
    from . import quality

    out = {}
    if args.quality_ed:
        print(f"== quality: BLEU of {args.quality_ed}")
        out["bleu"] = quality.bleu(
            args.quality_ed,
            threads=args.threads,
            limit=args.quality_limit,
            checkpoint=args.quality_checkpoint,
        )
    if args.quality_lm:
        print(f"== quality: perplexity of {args.quality_lm}")
        out["perplexity"] = quality.perplexity(
            args.quality_lm, threads=args.threads, limit=args.quality_limit
        )
    return out


def _skip(info: dict, s: Stack, reason: str) -> None:
    info[s.name].update(status="skipped", reason=reason)


def _err(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="edgeformer bench", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
