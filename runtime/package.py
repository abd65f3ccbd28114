"""The model package: the contract between `edgeformer export` and the runtime.

A package is a folder:

    config.json                      this contract's metadata (below)
    tokenizer.json                   the `tokenizers` tokenizer
    encoder.onnx                     encoder-decoder only
    decoder.onnx                     first decoder pass, no past (ED: BOS step; LM: prompt prefill)
    decoder_with_past.onnx           one decoder step with past keys/values
    {graph}.{variant}.onnx           quantized variants (int4, int8, int8-dynamic, fp16)

Graph inputs/outputs (Optimum's names; B batch, S source, T new, P past, H heads, D head dim):

  encoder            in  input_ids (B,S) int64, attention_mask (B,S) int64
                     out encoder_hidden_states (B,S,C)
  ED decoder         in  input_ids (B,T), encoder_hidden_states (B,S,C),
                         encoder_attention_mask (B,S)
                     out logits (B,T,V), present.{i}.decoder.key|value (B,H,T,D),
                         present.{i}.encoder.key|value (B,H,S,D)
  ED decoder_with_past
                     in  input_ids (B,T), encoder_attention_mask (B,S),
                         past_key_values.{i}.decoder.key|value (B,H,P,D),
                         past_key_values.{i}.encoder.key|value (B,H,S,D)
                     out logits (B,T,V), present.{i}.decoder.key|value (B,H,P+T,D)
  LM decoder         in  input_ids (B,T), attention_mask (B,T)   (prompts left-padded)
                     out logits (B,T,V), present.{i}.key|value (B,H,T,D)
  LM decoder_with_past
                     in  input_ids (B,T), attention_mask (B,P+T), past_key_values.{i}.key|value
                     out logits (B,T,V), present.{i}.key|value (B,H,P+T,D)

Masks are 1 for a real token, 0 for padding. Float tensors are float32 except where a variant's
`io_dtype` says float16.

config.json keys: format ("edgeformer-package"), format_version, family, task (from the
checkpoint, e.g. {kind, src_lang, tgt_lang}), model (the ModelConfig dict), special_tokens
{pad_id, bos_id, eos_id, unk_id}, opset, graphs {name: {inputs, outputs}}, variants {variant:
{files: {graph: file}, io_dtype, description}}, files {file: sha256}, min_onnxruntime.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE_FORMAT = "edgeformer-package"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
FAMILIES = ("encoder-decoder", "decoder-only")
VARIANTS = ("fp32", "int4", "int8", "int8-dynamic", "fp16")


def graph_names(family: str) -> tuple[str, ...]:
    if family == "encoder-decoder":
        return ("encoder", "decoder", "decoder_with_past")
    return ("decoder", "decoder_with_past")


def graph_file(graph: str, variant: str) -> str:
    return f"{graph}.onnx" if variant == "fp32" else f"{graph}.{variant}.onnx"


def past_names(family: str, n_layers: int, prefix: str = "past_key_values") -> list[str]:
    """Per-layer cache names in graph order: ED self then cross ('decoder', 'encoder'); LM plain."""
    names = []
    for i in range(n_layers):
        if family == "encoder-decoder":
            kinds = ("decoder", "encoder") if prefix == "past_key_values" else ("decoder",)
            names += [f"{prefix}.{i}.{kind}.{kv}" for kind in kinds for kv in ("key", "value")]
        else:
            names += [f"{prefix}.{i}.{kv}" for kv in ("key", "value")]
    return names


def io_names(family: str, n_layers: int) -> dict[str, dict[str, list[str]]]:
    """The input and output names of every graph of a package of this family."""
    if family == "encoder-decoder":
        present_self = past_names(family, n_layers, "present")
        present_all = [
            f"present.{i}.{kind}.{kv}"
            for i in range(n_layers)
            for kind in ("decoder", "encoder")
            for kv in ("key", "value")
        ]
        return {
            "encoder": {
                "inputs": ["input_ids", "attention_mask"],
                "outputs": ["encoder_hidden_states"],
            },
            "decoder": {
                "inputs": ["input_ids", "encoder_hidden_states", "encoder_attention_mask"],
                "outputs": ["logits", *present_all],
            },
            "decoder_with_past": {
                "inputs": ["input_ids", "encoder_attention_mask", *past_names(family, n_layers)],
                "outputs": ["logits", *present_self],
            },
        }
    return {
        "decoder": {
            "inputs": ["input_ids", "attention_mask"],
            "outputs": ["logits", *past_names(family, n_layers, "present")],
        },
        "decoder_with_past": {
            "inputs": ["input_ids", "attention_mask", *past_names(family, n_layers)],
            "outputs": ["logits", *past_names(family, n_layers, "present")],
        },
    }


def sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class PackageError(ValueError):
    """A model package that is missing, incomplete, corrupt or of the wrong kind."""


@dataclass
class Package:
    path: Path
    config: dict

    @property
    def family(self) -> str:
        return self.config["family"]

    @property
    def variants(self) -> list[str]:
        return list(self.config["variants"])

    def file(self, graph: str, variant: str = "fp32") -> Path:
        if variant not in self.config["variants"]:
            raise PackageError(
                f"package {self.path} has no variant {variant!r}; it has {self.variants}"
            )
        return self.path / self.config["variants"][variant]["files"][graph]


def load_package(path: str | os.PathLike, verify: bool = True) -> Package:
    """Read and check a package folder: config, every listed file present, checksums."""
    path = Path(path)
    if not path.is_dir():
        raise PackageError(f"model package not found: {path} is not a folder")
    cfg_path = path / CONFIG_FILE
    if not cfg_path.is_file():
        raise PackageError(f"model package {path} has no {CONFIG_FILE}")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise PackageError(f"model package {path}: {CONFIG_FILE} is not valid JSON ({e})") from None
    if config.get("format") != PACKAGE_FORMAT:
        raise PackageError(f"{path} is not an edgeformer model package ({CONFIG_FILE} format)")
    if config.get("format_version") != FORMAT_VERSION:
        raise PackageError(
            f"model package {path} has format_version {config.get('format_version')}; "
            f"this runtime reads version {FORMAT_VERSION}"
        )
    if config.get("family") not in FAMILIES:
        raise PackageError(f"model package {path}: unknown family {config.get('family')!r}")
    for name, digest in config.get("files", {}).items():
        f = path / name
        if not f.is_file():
            raise PackageError(f"model package {path} is missing {name}")
        if verify and sha256(f) != digest:
            raise PackageError(
                f"model package {path}: checksum mismatch for {name} (file changed or corrupt)"
            )
    if TOKENIZER_FILE not in config.get("files", {}):
        raise PackageError(f"model package {path}: {CONFIG_FILE} lists no {TOKENIZER_FILE}")
    return Package(path, config)
