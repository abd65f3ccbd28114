"""The package contract as data: what a runtime in another language needs to read a package.

The JavaScript runtime (runtime/js) imports `runtime/js/contract.mjs`, written by

    python -m edgeformer.core.contract --write runtime/js/contract.mjs

from the Python owners of each fact: format.py (versions, file names, graph IO names, variants
and the weights file each reads, graph metadata keys), schema.py (config.json's bounds, measured
keys), config.py (the model's fields, their config.json names and allowed values), variants.py
(variant "auto"'s bounds), generation_config.py and options.py (the generation_config.json
fields applied and the options' bounds), languages.py (a translator's task keys: its source
frame and language codes), patterns.py (the tokenizer regex rule's bounds).
tests/runtime/test_js.py fails when the committed file and this module disagree, and runs the
same hostile packages through both runtimes.

The file is JSON wrapped as an ES module (`export default {...};`): Debian 12's Node 18.19
cannot import a .json file (import attributes need Node 18.20), and every browser and bundler
imports an .mjs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from . import config as config_module
from . import (
    format,
    generation_config,
    language_names,
    languages,
    options,
    patterns,
    schema,
    variants,
)

GENERATED_BY = "python -m edgeformer.core.contract --write runtime/js/contract.mjs"
CONTRACT_FILE = "runtime/js/contract.mjs"
# how many threads a runtime's pool may ask for: 4 per core, at least 64 (thousands of threads
# crashed onnxruntime: --threads 100000 ended in a segfault); max_threads below
MAX_THREADS_PER_CORE = 4
MAX_THREADS_FLOOR = 64


def max_threads() -> int:
    """The most threads a pool may ask for: 4 per core, at least 64 (thousands of threads
    crashed onnxruntime: --threads 100000 ended in a segfault); the JS runtime's bound too
    (core.contract)."""
    return max(MAX_THREADS_FLOOR, MAX_THREADS_PER_CORE * (os.cpu_count() or 1))


def check_threads(value: object, name: str = "threads") -> int:
    """A thread count in [1, max_threads()], else a ValueError that says the limit."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be an integer")
    if not 1 <= value <= max_threads():
        raise ValueError(f"{name}={value} must be in [1, {max_threads()}] on this machine")
    return value


_LAYER = re.compile(r"\.([01])\.")


def _segments(two_layers: list[str]) -> list[dict[str, list[str]]]:
    """A list of IO names of a 2-layer model as segments: {"names": [...]} (as they are) or
    {"per_layer": [templates with "{i}"]} (the templates for layer 0, then for layer 1, ...)."""
    out: list[dict[str, list[str]]] = []
    i = 0
    while i < len(two_layers):
        name = two_layers[i]
        m = _LAYER.search(name)
        if m is None:
            if out and "names" in out[-1]:
                out[-1]["names"].append(name)
            else:
                out.append({"names": [name]})
            i += 1
            continue
        run: list[str] = []
        while i + len(run) < len(two_layers) and ".0." in two_layers[i + len(run)]:
            run.append(two_layers[i + len(run)])
        templates = [n.replace(".0.", ".{i}.", 1) for n in run]
        out.append({"per_layer": templates})
        i += 2 * len(run)
    return out


def expand(segments: list[dict[str, list[str]]], n_layers: int) -> list[str]:
    """The IO names of an n-layer model from segments (what the JS runtime does)."""
    names: list[str] = []
    for seg in segments:
        if "names" in seg:
            names.extend(seg["names"])
        else:
            for i in range(n_layers):
                names.extend(t.replace("{i}", str(i)) for t in seg["per_layer"])
    return names


def io_templates() -> dict[str, dict[str, dict[str, dict[str, list]]]]:
    """{family: {version: {graph: {inputs, outputs: segments}}}}, checked against
    format.io_names for 1 to 5 layers."""
    out: dict[str, dict[str, dict[str, dict[str, list]]]] = {}
    for family in config_module.FAMILIES:
        for version in format.READABLE_VERSIONS:
            graphs = {
                graph: {kind: _segments(names) for kind, names in ios.items()}
                for graph, ios in format.io_names(family, 2, version).items()
            }
            for n in range(1, 6):
                want = format.io_names(family, n, version)
                got = {g: {k: expand(s, n) for k, s in ios.items()} for g, ios in graphs.items()}
                if got != want:
                    raise AssertionError(f"io templates of {family} format {version}, {n} layers")
            out.setdefault(family, {})[str(version)] = graphs
    return out


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def model_fields() -> dict[str, dict[str, Any]]:
    """ModelConfig's fields: config.json's name (format 3+), default, allowed values."""
    out = {}
    for f in dataclasses.fields(config_module.ModelConfig):
        choices = f.metadata.get("choices")
        out[f.name] = {
            "stored": format.HF_NAMES.get(f.name, f.name),
            "default": _json_value(f.default),
            "choices": list(choices) if choices else None,
        }
    return out


def generation_options() -> dict[str, dict[str, Any]]:
    """GenerationOptions' fields: default, kind (int, float, bool, list, int?), hf name."""
    out = {}
    for f in dataclasses.fields(options.GenerationOptions):
        default = f.default
        kind = str(f.type)
        if kind.startswith("Sequence"):
            kind, default = "list", []
        elif kind.endswith("| None"):
            kind = kind.split(" |")[0] + "?"
        out[f.name] = {"default": default, "kind": kind, "hf": f.metadata.get("hf")}
    return out


def contract() -> dict[str, Any]:
    """Every fact of the package contract the JavaScript runtime reads."""
    return {
        "generated_by": GENERATED_BY,
        "package_format": format.PACKAGE_FORMAT,
        "format_version": format.FORMAT_VERSION,
        "readable_versions": list(format.READABLE_VERSIONS),
        "min_onnxruntime": format.MIN_ONNXRUNTIME,
        "families": list(config_module.FAMILIES),
        "files": {
            "config": format.CONFIG_FILE,
            "tokenizer": format.TOKENIZER_FILE,
            "source_tokenizer": format.SOURCE_TOKENIZER_FILE,
            "golden": format.GOLDEN_FILE,
            "generation_config": format.GENERATION_CONFIG_FILE,
            "tokenizer_config": format.TOKENIZER_CONFIG_FILE,
            "genai_config": format.GENAI_CONFIG_FILE,
        },
        "ort_suffix": format.ORT_SUFFIX,
        "variants": list(format.VARIANTS),
        # the weights file a web variant's graphs read: its base variant's
        "web_variants": dict(format.WEB_VARIANTS),
        "variant_files": {
            v: {
                "graphs": {g: format.graph_file(g, v) for g in ("encoder", "decoder")},
                "weights": format.weights_file(format.WEB_VARIANTS.get(v, v)),
            }
            for v in format.VARIANTS
        },
        "graph_names": {f: list(format.graph_names(f)) for f in config_module.FAMILIES},
        "io": io_templates(),
        "ed_lengths": list(format.ED_LENGTHS),
        "logits_3d": format.LOGITS_3D,
        "graph_metadata": {
            "prefix": format.METADATA_PREFIX,
            "keys": {k: format.HF_NAMES.get(k, k) for k in format.GRAPH_METADATA},
            "attention_head_size": format.ATTENTION_HEAD_SIZE_KEY,
            "attention_head_multiple": format.ATTENTION_HEAD_MULTIPLE,
        },
        "model": {
            "fields": model_fields(),
            "limits": dict(schema.MODEL_LIMITS),  # ours: each an integer in [1, limit]
            "omitted_at_default": {k: v for k, v in format.OMITTED_AT_DEFAULT.items()},
        },
        "special_tokens": {"required": ["pad_id", "bos_id", "eos_id"], "optional": ["unk_id"]},
        "measured_keys": list(schema.MEASURED_KEYS),
        "held_out_keys": list(schema.HELD_OUT_KEYS),
        "variant_auto": {
            "max_quality_loss": variants.MAX_QUALITY_LOSS,
            "max_bleu_loss": variants.MAX_BLEU_LOSS,
            "max_perplexity_increase": variants.MAX_PERPLEXITY_INCREASE,
            "speed_margin": variants.SPEED_MARGIN,
            "preference": list(variants.PREFERENCE),
        },
        "generation_config": {
            "fields": dict(generation_config.GENERATION_FIELDS),  # hf name -> option
            "understood": sorted(generation_config.UNDERSTOOD),
            "no_effect": sorted(generation_config.NO_EFFECT),
            "neutral": dict(generation_config.NEUTRAL),
            "hf_sampling_top_k": generation_config.HF_SAMPLING_TOP_K,
            "encoder_decoder_fields": sorted(generation_config.ENCODER_DECODER_FIELDS),
        },
        "translation": {
            "task_keys": list(languages.TASK_KEYS),
            "target_positions": list(languages.TARGET_POSITIONS),
            "default_position": languages.AFTER_START,
            "max_frame_ids": languages.MAX_FRAME_IDS,
            "max_code_chars": languages.MAX_CODE_CHARS,
            "close_matches": {
                "n": languages.CLOSE_N,
                "cutoff": languages.CLOSE_CUTOFF,
                "same_start": languages.SAME_START,
                "fallback": languages.FALLBACK_CODES,
                "sample": languages.SAMPLE_CODES,
                "name_cutoff": languages.NAME_CUTOFF,
            },
            "language_table": language_names.TABLE,
        },
        # encoder (sentence-embedding) packages: runtime/js/embed.mjs (schema.EncoderPackageConfig)
        "encoder": {
            "family": format.ENCODER_FAMILY,
            "io": format.encoder_io_names(),
            "classifier_io": format.encoder_io_names(classifier=True),
            "pooling_modes": list(format.POOLING_MODES),
            "model_keys": list(format.ENCODER_MODEL_KEYS),
            "limits": dict(schema.ENCODER_LIMITS),
            "activations": list(format.ENCODER_ACTIVATIONS),
            "classifier_activations": list(format.CLASSIFIER_ACTIVATIONS),
            "measured_keys": list(schema.ENCODER_MEASURED_KEYS),
            "max_labels": schema.MAX_LABELS,
        },
        "generation_options": generation_options(),
        "bounds": {
            "max_beams": options.MAX_BEAMS,
            "max_length_penalty": options.MAX_LENGTH_PENALTY,
            "min_temperature": options.MIN_TEMPERATURE,
            "max_threads_per_core": MAX_THREADS_PER_CORE,
            "max_threads_floor": MAX_THREADS_FLOOR,
        },
        # the tokenizer regex rule's bounds (core/patterns.py; runtime/js/regex.mjs ports it)
        "patterns": {
            "max_pattern_chars": patterns.MAX_PATTERN_CHARS,
            "max_repeat_count": patterns.MAX_REPEAT_COUNT,
            "max_degree": patterns.MAX_DEGREE,
            "max_nesting": patterns.MAX_NESTING,
            "max_ways": patterns.MAX_WAYS,
            "max_normalizer_expansion": patterns.MAX_NORMALIZER_EXPANSION,
            "unicode_expansion": patterns.UNICODE_EXPANSION,
        },
    }


def render() -> str:
    """contract() as the ES module the JS runtime imports."""
    body = json.dumps(contract(), indent=1, sort_keys=True)
    return (
        f"// GENERATED by `{GENERATED_BY}`: do not edit.\n"
        "// The package contract (edgeformer.core.contract), read by the JavaScript runtime.\n"
        f"export default {body};\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--write"] and len(args) == 2:
        Path(args[1]).write_text(render(), encoding="utf-8")
        return 0
    if args:
        print("usage: python -m edgeformer.core.contract [--write FILE]", file=sys.stderr)
        return 2
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
