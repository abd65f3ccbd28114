"""The converter's table: one Loader per Hugging Face architecture (as CTranslate2's converters).

A loader knows three things of its architecture: how its config.json maps onto ModelConfig
(`config`, with the transformers class's defaults for missing keys), how its weights map onto
edgeformer's module names (`weights`), and which files make its tokenizers (`tokenizers`).
`convert.convert_hf` runs them: load -> validate -> map -> save. To add an architecture, write
a Loader subclass with @register (docs/contributing.md says which test to copy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from ...core.config import ModelConfig
from .fields import Fields

Weights = dict[str, torch.Tensor]
HF_TOKENIZER = "tokenizer.json"


class WeightReader(dict):
    """The Hugging Face tensors, base-model prefix dropped; remembers which ones were read."""

    def __init__(self, weights: Weights, prefix: str):
        # "transformer.h.0..." and "h.0..." (GPT-2), "model.layers.0..." (Llama) both occur
        super().__init__({k.removeprefix(prefix): v for k, v in weights.items()})
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> torch.Tensor:
        self.read.add(key)
        return super().__getitem__(key)


class Loader:
    """One architecture: config mapping, weight mapping, tokenizer files."""

    architectures: ClassVar[tuple[str, ...]] = ()  # config.json's "architectures" entry
    model_types: ClassVar[tuple[str, ...]] = ()  # its "model_type" values
    prefix: ClassVar[str] = "model."  # the base model's weight prefix, dropped when mapping
    # the transformers config class's defaults of the keys `config` reads (a config.json saved
    # by an older transformers omits keys at their default)
    defaults: ClassVar[dict[str, Any]] = {}

    def fields(self, hf: dict, arch: str) -> Fields:
        return Fields(hf, arch, self.defaults)

    def config(self, f: Fields) -> ModelConfig:
        """config.json -> ModelConfig, exactly; anything not modelled is a ValueError naming
        the field."""
        raise NotImplementedError

    def end_ids(self, f: Fields, cfg: ModelConfig) -> list[int]:
        """Every id that ends generation (eos_token_id may list several: Llama 3)."""
        return f.token_ids("eos_token_id", cfg.vocab_size)

    def weights(self, w: WeightReader, cfg: ModelConfig) -> tuple[Weights, set[str]]:
        """(our state dict, Hugging Face names deliberately not used)."""
        raise NotImplementedError

    def task(self, src: Path, tokenizer: Path, cfg: ModelConfig) -> dict[str, Any]:
        """The checkpoint task's fields beyond its kind (a translator's source frame and
        languages: seq2seq.translation_task)."""
        return {}

    def tokenizers(self, src: Path, tmp: Path, arch: str) -> tuple[Path, Path | None]:
        """(the tokenizer.json of the targets / the LM, the sources' own or None)."""
        tokenizer = src / HF_TOKENIZER
        if tokenizer.is_file():
            return tokenizer, None
        from .files import fast_tokenizer  # transformers converts the slow tokenizer's files

        return fast_tokenizer(src, tmp), None


LOADERS: dict[str, Loader] = {}  # architecture -> its loader


def register(cls: type[Loader]) -> type[Loader]:
    """Class decorator: the loader converts each of cls.architectures."""
    for arch in cls.architectures:
        if arch in LOADERS:
            raise ValueError(f"two loaders for {arch}")
        LOADERS[arch] = cls()
    return cls


def loader_for(hf: dict) -> tuple[str, Loader]:
    """(architecture, its loader) of a config.json; unsupported ones name the field. A
    config.json without `architectures` is read by its `model_type`, as transformers' Auto
    classes do."""
    archs = hf.get("architectures")
    if archs is None and "model_type" in hf:
        archs = [architecture_of(hf["model_type"])]
    if not isinstance(archs, list) or len(archs) != 1 or archs[0] not in LOADERS:
        raise ValueError(
            f"unsupported Hugging Face model: architectures={archs!r} "
            f"(edgeformer converts {', '.join(LOADERS)})"
        )
    arch = archs[0]
    loader = LOADERS[arch]
    if hf.get("model_type", loader.model_types[0]) not in loader.model_types:
        want = " or ".join(repr(t) for t in loader.model_types)
        raise ValueError(
            f"unsupported {arch} config: model_type={hf.get('model_type')!r} "
            f"(edgeformer supports {want})"
        )
    return arch, loader


def architecture_of(model_type: object) -> str:
    """The architecture a loader converts for `model_type` (T5's loader: "t5" ->
    T5ForConditionalGeneration, "mt5" -> MT5ForConditionalGeneration)."""
    for loader in dict.fromkeys(LOADERS.values()):
        if model_type in loader.model_types:
            i = loader.model_types.index(model_type)
            return loader.architectures[min(i, len(loader.architectures) - 1)]
    types = sorted({t for loader in LOADERS.values() for t in loader.model_types})
    raise ValueError(
        f"unsupported Hugging Face model: model_type={model_type!r} and no architectures "
        f"(edgeformer converts the model_types {', '.join(types)})"
    )
