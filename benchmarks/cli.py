"""`edgeformer bench`: speed (and optionally quality) of our runtime against its peers.

    edgeformer bench                                  # ED + LM, all stacks, W1 W2 W3 + sweep
    edgeformer bench --quick                          # tiny shapes, few rounds (smoke test)
    edgeformer bench --shapes lm --stacks edgeformer,ct2 --workloads W1,W3 --rounds 9
    edgeformer bench --package packages/shakespeare --checkpoint runs/shakespeare/best
    edgeformer bench --quality-ed packages/multi30k --quality-lm packages/shakespeare
    edgeformer bench --frontier teacher=runs/m30k/package --frontier student=runs/kd/package
    edgeformer bench --hf MODEL.gguf --make-llama-env runs/llama-env   # a real model's weights

Writes OUT/latest.json, OUT/latest.md and OUT/latest.png (OUT: --out, default runs/bench; see
benchmarks/README.md), and OUT/latest-frontier.png with --frontier.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import shutil
import tempfile
import time
from pathlib import Path

from . import artifacts, files, llama_env, measure, optimum_env, report, targets, weights
from .child import (
    Worker,
    child_bandwidth,
    child_build,
    child_floor,
    child_overhead,
    child_peak_rss,
)
from .files import FileBatching
from .runners import quiet_libraries
from .settings import (
    DEFAULT_OUT,
    ISOLATION_MODES,
    MEMORY_MODES,
    SPINNING,
    Job,
    Settings,
    check_file_stem,
)
from .shapes import (
    REAL_SHAPES,
    SHAPE_GROUPS,
    WORKLOADS,
    Shape,
    fits,
    get_shape,
    languages,
    resolve_shape,
    sweep_workload,
)
from .stacks import (
    Stack,
    cuda_available,
    elsewhere,
    for_job,
    inputs_for,
    package_variants,
    select_stacks,
    skip_reason,
)


def add_arguments(p: argparse.ArgumentParser, command: str = "bench") -> None:
    groups = ", ".join(f"{g} ({', '.join(names)})" for g, names in SHAPE_GROUPS.items())
    p.add_argument(
        "--shapes",
        "--shape",
        default="ed,lm",
        help=f"comma-separated: ed, lm (small shapes), {groups}, "
        f"{', '.join(REAL_SHAPES)} (random weights at those models' shapes), or a Hugging Face "
        "config.json (random weights at its shape) (default: ed,lm)",
    )
    p.add_argument(
        "--hf",
        default=None,
        metavar="DIR|FILE.gguf",
        help="a real model (a Hugging Face folder, or a GGUF file: its weights dequantized): "
        "every stack runs its weights, each stack's perplexity on Tiny Shakespeare's val split "
        "beside its speed (ours fp32 / int8 / int4 / int8-dynamic / gguf, hf-torch, genai-int4, "
        "llama.cpp Q8_0 / Q4_0 / Q4_K_M and the file itself); replaces --shapes (default: none)",
    )
    p.add_argument(
        "--workloads",
        default=None,
        help="W1,W2,W3,W4,sweep,file (W4: a 512-token prompt; file: a test set through "
        "translate_file; none: quality only) (default: W1,W2,W3,sweep,file; real shapes "
        "W1,W2,W4; none with --frontier)",
    )
    p.add_argument(
        "--stacks",
        default="all",
        help="all | ours | peers | names or prefixes, comma-separated (edgeformer-fp32, "
        "edgeformer-torch, edgeformer-llama-int4, hf-torch, optimum-fp32, ct2-fp32, ct2-int8, "
        "genai-int4, hf-torch-llama, ...) (default: all)",
    )
    p.add_argument("--threads", type=int, default=2, help="threads for every stack (default: 2)")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timed rounds (default: 7; real shapes 3; --quick 2)",
    )
    p.add_argument("--warmup", type=int, default=None, help="untimed calls (default: 2; --quick 1)")
    p.add_argument(
        "--sweep-batches",
        default=None,
        help="batch sizes of the sweep (default: 1,2,4,8,16,32; --quick 1,4,16)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes and few rounds: a smoke test (default: off)",
    )
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help=f"results folder (default: {DEFAULT_OUT}; the committed results are "
        "benchmarks/results, written only when named)",
    )
    p.add_argument("--name", default="latest", help="results file stem (default: latest)")
    p.add_argument(
        "--package",
        action="append",
        default=[],
        help="a trained package to run as 'ours' instead of random weights (its family picks "
        "the shape; peers get that shape); repeat for ED and LM (default: none, random weights)",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        help="the checkpoint of a --package, for edgeformer-torch (default: none: that stack "
        "is skipped)",
    )
    p.add_argument(
        "--memory",
        choices=MEMORY_MODES,
        default=None,
        help="peak RSS per stack: subprocess (a fresh child process), delta (load-time growth), "
        "off (default: subprocess; --quick delta)",
    )
    p.add_argument(
        "--spinning",
        choices=tuple(SPINNING),
        default="default",
        help="onnxruntime intra-op spinning for ours and Optimum (default: the runtime's own for "
        "ours, decoder on and encoder off; off for Optimum)",
    )
    p.add_argument(
        "--isolation",
        choices=ISOLATION_MODES,
        default="process",
        help="process: each stack runs in a process of its own, as deployed; none: all in this "
        "process (engines' thread pools then slow each other down) (default: process)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="decode-step breakdown with onnxruntime's profiler (default: off)",
    )
    p.add_argument(
        "--work",
        default=None,
        help="keep built models here and reuse them (default: a temporary folder)",
    )
    p.add_argument(
        "--optimum-python",
        default=None,
        help="the interpreter (or virtual environment folder) of Optimum's own environment, "
        f"where the optimum-* stacks run (default: ${optimum_env.ENV_VAR}, else "
        f"{optimum_env.DEFAULT_ENV} if it exists, else this interpreter)",
    )
    p.add_argument(
        "--make-optimum-env",
        default=None,
        metavar="DIR",
        help="create Optimum's environment in DIR unless it is there (python -m venv, pip: "
        "minutes), then run the optimum-* stacks in it (default: none)",
    )
    p.add_argument(
        "--llama-python",
        default=None,
        help="the interpreter (or virtual environment folder) of llama.cpp's own environment, "
        f"where the llamacpp-* stacks run (default: ${llama_env.ENV_VAR}, else "
        f"{llama_env.DEFAULT_ENV} if it exists, else those stacks are skipped)",
    )
    p.add_argument(
        "--make-llama-env",
        default=None,
        metavar="DIR",
        help="create llama.cpp's environment in DIR unless it is there (builds llama-cpp-python "
        "from its sdist: many minutes on 2 cores, the wheel is kept in DIR/wheels), then run the "
        "llamacpp-* stacks in it (default: none)",
    )
    p.add_argument(
        "--quality-ed",
        default=None,
        help="translation package: its Multi30k BLEU next to its speed (default: none)",
    )
    p.add_argument(
        "--quality-lm",
        default=None,
        help="LM package: its Tiny Shakespeare perplexity (default: none)",
    )
    p.add_argument(
        "--quality-checkpoint",
        default=None,
        help="the --quality-ed package's checkpoint: count greedy outputs equal to PyTorch's "
        "(default: none)",
    )
    p.add_argument(
        "--quality-limit",
        type=int,
        default=None,
        help="quality and --frontier: first N sentences / windows (default: all)",
    )
    p.add_argument(
        "--embeddings",
        default=None,
        metavar="SHAPES",
        help="sentence embeddings instead (benchmarks/embeddings.py): minilm-l6 (the real "
        "all-MiniLM-L6-v2), bge-base (its shape, random weights), comma-separated; ours beside "
        "sentence-transformers, Optimum and CTranslate2's Encoder (default: none)",
    )
    p.add_argument(
        "--frontier",
        action="append",
        default=[],
        metavar="[NAME=]PACKAGE",
        help="a translation package (repeat: one per recipe) for the quality / speed frontier: "
        "test_2016_flickr BLEU (beam 5, lowercased) against ms/sentence at batch 1 and "
        "sentences/s of the test file (greedy), per variant and CTranslate2 on its weights; NAME "
        "labels the recipe (default: the folder's name; none)",
    )


def _shapes(settings: Settings, work: Path) -> list[tuple[Shape, Path | None, Path | None]]:
    """(shape, package, checkpoint) per requested shape; --package replaces our random model,
    --hf all of them (that model's own weights)."""
    from ..runtime.package import load_package

    if settings.hf:
        source = Path(settings.hf).absolute()
        return [(weights.hf_shape(source, artifacts.hf_folder(source, work)), None, None)]

    given: dict[str, tuple] = {}
    for i, p in enumerate(settings.packages):
        pkg = load_package(p, verify=False)
        name = "ed" if pkg.family == "encoder-decoder" else "lm"
        ckpt = Path(settings.checkpoints[i]) if i < len(settings.checkpoints) else None
        given[name] = (pkg.config.model, Path(p), ckpt)
    names = list(settings.shapes) if not settings.packages else list(given)
    out = []
    for name in names:
        cfg, pkg, ckpt = given.get(name, (None, None, None))
        shape = get_shape(name, settings.quick, cfg) if cfg else resolve_shape(name, settings.quick)
        out.append((shape, pkg, ckpt))
    return out


def run(args) -> int:
    if args.make_optimum_env:
        args.optimum_python = optimum_env.ensure(args.make_optimum_env)
    if args.make_llama_env:
        args.llama_python = llama_env.ensure(args.make_llama_env)
    if args.embeddings:
        return embed_bench(args)
    return bench(Settings.from_args(args))


def embed_bench(args) -> int:
    """`--embeddings SHAPES`: benchmarks/embeddings.py's rows (its own stacks; --stacks all,
    ours, peers or names)."""
    from . import embeddings

    names = [s.strip() for s in args.embeddings.split(",") if s.strip()]
    chosen = [s.strip() for s in args.stacks.split(",") if s.strip()]
    groups = {"all": embeddings.STACKS, "ours": [s for s in embeddings.STACKS if "edgeformer" in s],
              "peers": [s for s in embeddings.STACKS if "edgeformer" not in s]}  # fmt: skip
    stacks = tuple(s for c in chosen for s in groups.get(c, [c]))
    out = Path(args.out)
    if args.quick and out.resolve() == COMMITTED:
        raise SystemExit(f"edgeformer bench: a quick run does not write {COMMITTED}")
    name = "embeddings" if args.name == "latest" and out.resolve() == COMMITTED else args.name
    check_file_stem(name, "--name")
    embeddings.run_embeddings(embeddings.EmbedSettings(
        tuple(names), stacks, args.threads, rounds=args.rounds or (2 if args.quick else 5),
        warmup=max(1, args.warmup or (1 if args.quick else 2)), out=out, name=name,
        work=Path(args.work or tempfile.mkdtemp(prefix="edgeformer-embed-")),
        optimum_python=optimum_env.resolve(args.optimum_python),
    ))  # fmt: skip
    return 0


def bench(settings: Settings) -> int:
    """One benchmark run: every shape, every selected stack; writes the results."""
    t_start = time.time()
    _check_out(settings)
    quiet_libraries()
    cuda = cuda_available()
    stacks = select_stacks(settings.stacks, cuda)
    try:
        import torch

        torch.set_num_threads(settings.threads)
    except ImportError:
        pass

    work = Path(settings.work or tempfile.mkdtemp(prefix="edgeformer-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "meta": report.environment(settings.threads),
        "settings": {**settings.to_dict(), "selected": [s.name for s in stacks], "cuda": cuda},
        "shapes": {},
        "stacks": {},
        "workloads": [],
        "sweep": [],
        "file": [],
    }
    if settings.optimum_python and any(s.env == "optimum" for s in stacks):
        results["meta"]["optimum_env"] = optimum_env.describe(settings.optimum_python)
    if settings.llama_python and any(s.env == "llamacpp" for s in stacks):
        results["meta"]["llama_env"] = llama_env.describe(settings.llama_python)
    try:
        for shape, pkg, ckpt in _shapes(settings, work) if settings.workloads else []:
            fixed = [w for w in settings.fixed_workloads() if fits(w, shape)]
            variants = package_variants(stacks, gguf=weights.gguf_of(shape) is not None)
            job = Job(
                "", shape, work, settings, pkg, ckpt, variants,
                tuple((w.batch, w.src_len, w.new_tokens) for w in fixed),
            )  # fmt: skip
            _bench_shape(job, stacks, results)
        if settings.quality_ed or settings.quality_lm:
            results["quality"] = _quality(settings)
        if settings.frontier:
            from . import frontier

            results["frontier"], results["frontier_skipped"] = frontier.run(settings, work, stacks)
    finally:
        if not settings.work:
            shutil.rmtree(work, ignore_errors=True)
    results["targets"] = targets.targets(results)
    results["meta"]["wall_s"] = round(time.time() - t_start, 1)
    results["meta"]["load_average_end"] = report.load_average()
    paths = report.write(results, Path(settings.out), settings.name)
    print(report.markdown(results))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


COMMITTED = Path(__file__).resolve().parent / "results"  # the committed results


def _check_out(settings: Settings) -> None:
    """A quick run (--quick, --quality-limit) never writes the committed results: they are
    written only when named with --out, by a full run."""
    quick = settings.quick or settings.quality_limit is not None
    if quick and Path(settings.out).resolve() == COMMITTED:
        raise SystemExit(
            f"edgeformer bench: a quick run (--quick / --quality-limit) does not write the "
            f"committed results {COMMITTED}; choose another --out"
        )


def _bench_shape(job: Job, stacks: list[Stack], results: dict) -> None:
    shape, settings = job.shape, job.settings
    stacks = [for_job(s, job) for s in stacks]  # ours: the peers' weights and ids, unless --package
    print(f"== {shape.describe()}" + (f" (package {job.package})" if job.package else ""))
    results["shapes"][shape.name] = {**shape.cfg.to_dict(), "package": str(job.package or "")}
    if shape.hf is not None:  # a real shape: the HF config of its random-weight model
        results["shapes"][shape.name]["real"] = shape.describe()
        results["shapes"][shape.name]["hf_config"] = shape.hf
    info: dict[str, dict] = {}
    results["stacks"][shape.name] = info
    ready: list[Stack] = []
    for s in stacks:
        info[s.name] = {"group": s.group, "precision": s.precision, "device": s.device}
        info[s.name]["ref"] = s.ref
        reason = skip_reason(s, shape, job)
        if reason:
            _skip(info, s, reason)
            continue
        try:
            t = time.time()
            _build(s, job.with_stack(s.name))
            info[s.name]["build_s"] = round(time.time() - t, 1)
            ready.append(s)
        except Exception as e:  # a stack that cannot be built is reported, not fatal
            _skip(info, s, f"build failed: {_err(e)}")

    workloads = [w for w in settings.fixed_workloads() if fits(w, shape)]
    if settings.memory == "subprocess":
        for s in ready:
            info[s.name]["memory"] = child_peak_rss(job.with_stack(s.name))

    runners = {}
    for s in ready:
        try:
            r, memory = _load(s, job, workloads)
            if memory:
                info[s.name]["memory"] = {**info[s.name].get("memory", {}), **memory}
            info[s.name]["size_mb"] = report.size_mb(r.files)
            runners[s.name] = r
            info[s.name]["status"] = "ok"
        except Exception as e:
            _skip(info, s, f"load failed: {_err(e)}")
    for s in stacks:
        if info[s.name].get("status") != "ok":
            print(f"  skip {s.name}: {info[s.name]['reason']}")

    by_name = {s.name: s for s in stacks}
    if shape.real:  # the physical floor: bytes per step (files) and the host's bandwidth
        _step_bytes(runners, info)
        bandwidths = [child_bandwidth(job)]
    for w in workloads:
        live = _healthy(runners, shape, w, by_name, info)
        inputs = {k: inputs_for(by_name[k], shape, w.batch, w.src_len) for k in live}
        recs = measure.run_workload(live, inputs, w, settings.rounds, settings.warmup)
        for name, rec in recs.items():
            ref = recs.get(by_name[name].ref)
            rec["agreement"] = measure.agreement(rec["_outputs"], ref["_outputs"] if ref else None)
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
    if shape.real:
        bandwidths.append(child_bandwidth(job))  # before and after: the best of both
        results.setdefault("bandwidth", {})[shape.name] = _floors(
            bandwidths, info, [r for r in results["workloads"] if r["shape"] == shape.name]
        )
    if "sweep" in settings.workloads:
        for b in settings.sweep_batches:
            w = sweep_workload(b)
            live = _healthy(runners, shape, w, by_name, info)
            inputs = {k: inputs_for(by_name[k], shape, b, w.src_len) for k in live}
            recs = measure.run_sweep(live, inputs, w, settings.rounds, settings.warmup)
            for name, rec in recs.items():
                results["sweep"].append({"shape": shape.name, "stack": name, "batch": b, **rec})
    if "file" in settings.workloads and shape.is_ed and languages(shape) is not None:
        # its sources are words in a file, which NLLB's tokenizer of the random shape (words
        # without merges) does not read back, and they would need a language each
        print(f"  file: not run on {shape.name} (a multilingual shape: token ids only)")
    elif "file" in settings.workloads and shape.is_ed:
        _bench_files(runners, shape, settings, info, results)
    for name, r in runners.items():
        if r.rss and settings.memory != "off":  # the stack's process after all its runs
            try:
                info[name].setdefault("memory", {})["run_peak_rss_mb"] = r.rss()["peak_rss_mb"]
            except Exception as e:
                info[name].setdefault("memory", {})["run_peak_error"] = _err(e)
    if weights.weights_of(shape) is not None:  # --hf: after the RSS, which it would change
        windows = weights.windows_of(shape, settings.quick)
        print(f"  perplexity on {len(windows)} windows of the text, teacher-forced")
        weights.perplexity(runners, windows, info)
        results["hf"] = {
            "source": settings.hf, "shape": shape.name, "what": weights.what(shape),
            "windows": weights.describe_windows(windows),
        }  # fmt: skip
    for r in runners.values():
        if r.close:
            r.close()
    runners.clear()
    gc.collect()
    if settings.profile:
        results.setdefault("profile", {})[shape.name] = _profile(job, [s.name for s in ready])


def _step_bytes(runners: dict, info: dict) -> None:
    """Each loaded stack's bytes read per decode step, from its files (floor.step_bytes)."""
    from .floor import step_bytes

    for name, r in runners.items():
        try:
            found = step_bytes(list(r.files))
        except Exception as e:
            info[name]["step_bytes_error"] = _err(e)
            continue
        if found:
            info[name]["step_mb"], info[name]["step_bytes_from"] = found[0] / 1e6, found[1]


def _floors(bandwidths: list[dict], info: dict, rows: list[dict]) -> dict:
    """The host's bandwidth (the best of the measurements) and, on every workload row of a
    stack whose step bytes are known, its floor ms/token and decode ms/token ÷ floor."""
    good = [b for b in bandwidths if "best_gbps" in b]
    out = {"measurements": bandwidths}
    if not good:
        return out
    gbps = max(b["best_gbps"] for b in good)
    out["best_gbps"] = gbps
    for r in rows:
        mb = info.get(r["stack"], {}).get("step_mb")
        if mb:
            floor = mb / gbps  # MB / (GB/s) = ms
            r["floor_ms"] = floor
            r["floor_ratio"] = r["decode_ms_per_token"]["median"] / floor
    return out


def _bench_files(runners: dict, shape: Shape, settings: Settings, info: dict, results: dict):
    """The file-translation workload (benchmarks.files): every stack with a batch-translation
    path, each batching candidate in turn (stacks interleaved), best per stack."""
    work = files.file_workload(shape.cfg.vocab_size, settings.quick)
    live = {k: r for k, r in runners.items() if r.translate_file is not None}
    for name, r in list(live.items()):
        try:
            for b in {FileBatching(32, inter_threads=c.inter_threads) for c in work.candidates}:
                r.translate_file(work.sources[:32], 2, b)  # warm-up (and load), untimed
        except Exception as e:
            info[name].setdefault("errors", {})["file"] = _err(e)
            print(f"  {name} failed on file: {_err(e)}")
            del live[name]
    runs: dict[str, list[dict]] = {k: [] for k in live}
    for _ in range(1 if settings.quick else 2):
        for b in work.candidates:
            for name, r in live.items():
                time.sleep(measure.SETTLE_S)
                ms = r.translate_file(work.sources, work.new_tokens, b)
                runs[name].append({**dataclasses.asdict(b), "ms": ms})
    for name, rows in runs.items():
        best = min(rows, key=lambda row: row["ms"])
        results["file"].append(
            {
                "shape": shape.name,
                "stack": name,
                "sentences": work.sentences,
                "new_tokens": work.new_tokens,
                "best": {
                    **best,
                    "sentences_per_s": files.sentences_per_s(work.sentences, best["ms"]),
                    "tokens_per_s": files.sentences_per_s(work.sentences, best["ms"])
                    * work.new_tokens,
                },
                "runs": rows,
            }
        )


def _build(s: Stack, job: Job) -> None:
    """The stack's files: built here, or, for a stack in an environment of its own, the files
    it shares built here (the HF model: same weights) and its own built there."""
    if not elsewhere(s, job.settings):
        s.build(job)
        return
    if s.shared:
        s.shared(job)
    child_build(job)


def _load(s: Stack, job: Job, workloads) -> tuple:
    """(runner, memory record) for one stack: in its own process, or in this one (never for a
    stack of another environment)."""
    job = job.with_stack(s.name)
    if job.settings.isolation == "process" or elsewhere(s, job.settings):
        worker = Worker(job)
        r = worker.runner()
        mem = worker.memory()
        if job.settings.memory == "off":
            mem = {}
        elif job.settings.memory != "delta":
            mem.pop("rss_delta_mb", None)
        return r, mem
    delta = job.settings.memory == "delta"
    if delta:
        gc.collect()
        measure.reset_peak_rss()
        before = measure.rss_mb()
    r = s.load(job)
    if not delta:
        return r, {}
    w = max(workloads, key=lambda w: w.batch * w.new_tokens) if workloads else WORKLOADS["W1"]
    r.generate(inputs_for(s, job.shape, w.batch, w.src_len), w.new_tokens)
    return r, {"rss_delta_mb": measure.peak_rss_mb() - before}


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


def _profile(job: Job, names: list[str]) -> dict:
    """After the timing: the ORT profile of one decode step per variant of our runtime (in this
    process), the fp32 step's weight-streaming floor (in a fresh one), and each Python-driven
    onnxruntime stack's W1 time outside session.run."""
    from ..runtime.package import load_package
    from . import profile
    from .stacks import get_stack, package_of

    shape, threads = job.shape, job.settings.threads
    out: dict = {}
    for name in names:
        s = for_job(get_stack(name), job)
        if not s.variant or s.device != "cpu" or s.precision == "fp16":
            continue
        try:
            pkg = load_package(package_of(s, job), verify=False)
            out.setdefault("decode_step", {})[name] = profile.decode_step_ops(
                pkg.file("decoder", s.variant), shape.cfg, threads
            )
        except Exception as e:
            out.setdefault("decode_step", {})[name] = {"error": _err(e)}
        if s.variant == "fp32":  # in a fresh process: see profile.floor_ms
            out.setdefault("floor", {})[name] = child_floor(job.with_stack(name))
    w = WORKLOADS["W1"]
    for name in names:
        s = for_job(get_stack(name), job)
        if not (s.variant or name.startswith("optimum-")):
            continue
        if elsewhere(s, job.settings):  # its own environment: there
            out.setdefault("python_overhead_W1", {})[name] = child_overhead(job.with_stack(name))
            continue
        ids = inputs_for(s, shape, w.batch, w.src_len)
        try:
            r = s.load(job.with_stack(name))
            r.generate(ids, w.new_tokens)  # warm-up
            out.setdefault("python_overhead_W1", {})[name] = profile.python_overhead(
                r, ids, w.new_tokens
            )
        except Exception as e:
            out.setdefault("python_overhead_W1", {})[name] = {"error": _err(e)}
    return out


def _quality(settings: Settings) -> dict:
    from . import quality

    out = {}
    if settings.quality_ed:
        print(f"== quality: BLEU of {settings.quality_ed}")
        out["bleu"] = quality.bleu(
            settings.quality_ed,
            threads=settings.threads,
            limit=settings.quality_limit,
            checkpoint=settings.quality_checkpoint,
        )
    if settings.quality_lm:
        print(f"== quality: perplexity of {settings.quality_lm}")
        out["perplexity"] = quality.perplexity(
            settings.quality_lm, threads=settings.threads, limit=settings.quality_limit
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
