"""Reading a model package: the folder checked before anything runs (the runtime's side).

The format's names are core.format's, config.json's schema core.schema's; export/ writes
packages. What is checked, before any graph is loaded: every listed file's name (a plain name
inside the folder), presence and SHA-256; config.json's types, ranges and graph IO names.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.files import hub_id_hint, recover, sha256
from ..core.format import (
    CHECKPOINT_FORMAT,
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    GOLDEN_FILE,
    SOURCE_TOKENIZER_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
)
from ..core.generation_config import forced_first_token, generation_settings, ignored_fields
from ..core.schema import Golden, PackageConfig, PackageError, VariantEntry
from .onnx_refs import ProtobufError, external_files

__all__ = ["BUNDLED", "Package", "PackageError", "bundled_package", "load_package"]

# small trained packages installed with edgeformer (runtime/pretrained/, package data): a name
# here stands for its folder wherever a package path is taken, unless a folder of that name
# exists. Made by `make models` from the committed recipes (docs/pretrained.md).
PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
BUNDLED = {
    "m30k-en-de": "English -> German, trained on Multi30k's image captions only (the "
    "multi30k-en-de-cpu recipe): short descriptions of photos translate; other text comes out "
    "as German about pictures, not a translation (docs/pretrained.md)",
    "shakespeare": "a character-level LM trained on Tiny Shakespeare (the shakespeare-char-cpu "
    "recipe): it continues a text in the plays' style, nothing more (docs/pretrained.md)",
}
DEFAULT_PACKAGE = {"translate": "m30k-en-de", "generate": "shakespeare"}


EXPORT_IT = "make it a package, `edgeformer export DIR PACKAGE_DIR`, then give PACKAGE_DIR"


def bundled_package(name: str) -> Path | None:
    """The folder of a bundled package `name` (None: not a bundled name, or not installed)."""
    if name not in BUNDLED:
        return None
    path = PRETRAINED_DIR / name
    return path if (path / CONFIG_FILE).is_file() else None


def bundled_name(path: str | os.PathLike) -> str | None:
    """The bundled package name whose folder `path` is (None: not a bundled package)."""
    resolved = Path(path).resolve()
    return next((n for n in BUNDLED if (PRETRAINED_DIR / n).resolve() == resolved), None)


def resolve_package(path: str | os.PathLike) -> Path:
    """A package folder: `path` itself, or a bundled package's folder when `path` is one's name
    and no such folder exists here."""
    given = Path(path)
    if not given.exists() and str(path) in BUNDLED:
        return bundled_folder(str(path))
    return given


def bundled_folder(name: str) -> Path:
    """The installed folder of the bundled package `name`, or a PackageError saying it is not
    installed (a folder of that name in the working directory is never it)."""
    bundled = bundled_package(name)
    if bundled is None:
        raise PackageError(
            f"bundled model package {name!r} is not installed with this edgeformer "
            f"({PRETRAINED_DIR} has no {name}/): reinstall edgeformer, or `make models` in a "
            "clone"
        )
    return bundled


@dataclass
class Package:
    path: Path
    config: PackageConfig

    @property
    def family(self) -> str:
        return self.config.family

    @property
    def variants(self) -> list[str]:
        return list(self.config.variants)

    def variant(self, name: str) -> VariantEntry:
        if name not in self.config.variants:
            raise PackageError(
                f"package {self.path} has no variant {name!r}; it has {self.variants}"
            )
        return self.config.variants[name]

    def file(self, graph: str, variant: str = "fp32") -> Path:
        return self.path / self.variant(variant).files[graph]

    @property
    def source_tokenizer(self) -> Path:
        """The tokenizer of the sources: source_tokenizer.json when listed, else tokenizer.json."""
        own = SOURCE_TOKENIZER_FILE in self.config.files
        return self.path / (SOURCE_TOKENIZER_FILE if own else TOKENIZER_FILE)

    def generation_settings(self) -> tuple[dict, list[str]]:
        """generation_config.json, read once: its default decoding settings as GenerationOptions
        fields, and the fields the runtime does not apply (({}, []) for a package without one)."""
        if GENERATION_CONFIG_FILE not in self.config.files:
            return {}, []
        where = f"model package {self.path}: {GENERATION_CONFIG_FILE}"
        data = read_json(self.path / GENERATION_CONFIG_FILE, where)
        return generation_settings(data, self.config, where), ignored_fields(data, self.config)

    def forced_first_token(self) -> int | None:
        """generation_config.json's forced_bos_token_id (None: none, or no file)."""
        if GENERATION_CONFIG_FILE not in self.config.files:
            return None
        where = f"model package {self.path}: {GENERATION_CONFIG_FILE}"
        return forced_first_token(read_json(self.path / GENERATION_CONFIG_FILE, where),
                                  self.config, where)  # fmt: skip

    def tokenizer_config(self) -> dict:
        """tokenizer_config.json ({} for a package without one: encoder-decoders, older LMs)."""
        if TOKENIZER_CONFIG_FILE not in self.config.files:
            return {}
        where = f"model package {self.path}: {TOKENIZER_CONFIG_FILE}"
        data = read_json(self.path / TOKENIZER_CONFIG_FILE, where)
        if not isinstance(data, dict):
            raise PackageError(f"{where} is not a JSON object")
        return data

    def probes(self) -> list[dict]:
        """Export's tokenizer probes (golden.json; [] for packages exported before them)."""
        if GOLDEN_FILE not in self.config.files:
            return []
        return self.golden().probes

    def golden(self) -> Golden:
        """The exporter's PyTorch reference run (packages exported before it have none)."""
        if GOLDEN_FILE not in self.config.files:
            raise PackageError(
                f"model package {self.path} has no {GOLDEN_FILE} (exported by an older "
                "edgeformer): re-export it to verify it"
            )
        where = f"model package {self.path}: {GOLDEN_FILE}"
        data = read_json(self.path / GOLDEN_FILE, where)
        m = self.config.model
        return Golden.from_json(data, m.vocab_size, where, m.source_vocab)


def read_json(path: Path, where: str) -> object:
    """A package's JSON file; PackageError for invalid JSON, bad UTF-8 or nesting so deep that
    Python's parser gives up (a hostile file must not end in a RecursionError)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PackageError(f"{where} is not valid JSON ({e})") from None
    except RecursionError:
        raise PackageError(f"{where} is nested too deeply to be a package file") from None


def _inside(path: Path, name: object) -> Path:
    """The package file `name`: a plain file name that stays inside the package after symlinks
    are resolved. The error is the same whether or not an outside target exists."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or any(c in name for c in "/\\\0")
        or (path / name).resolve().parent != path.resolve()
    ):
        raise PackageError(
            f"model package {path}: {name!r} is not a file name inside the package "
            "(paths, '..' and links out of the package are refused)"
        )
    return path / name


def load_package(path: str | os.PathLike, verify: bool = True) -> Package:
    """Read and check a package folder: typed config, file names, every listed file present,
    checksums (verify=True). Nothing outside the folder is ever opened. `path` may name a
    bundled package (BUNDLED)."""
    path = resolve_package(path)
    if not path.exists():
        recover(path)  # an export killed while it swapped the new package in (core.files)
    if not path.is_dir():
        raise PackageError(
            f"model package not found: {path} is not a folder{hub_id_hint(path, EXPORT_IT)}"
        )
    cfg_path = path / CONFIG_FILE
    what = not_a_package(path)
    if what is not None:
        raise PackageError(
            f"{path} is {what}, not a model package: export it first "
            f"(edgeformer export {path} PACKAGE_DIR), then give PACKAGE_DIR"
        )
    if not cfg_path.is_file():
        raise PackageError(f"model package {path} has no {CONFIG_FILE}")
    data = read_json(cfg_path, f"model package {path}: {CONFIG_FILE}")
    config = PackageConfig.from_json(data, f"model package {path}: {CONFIG_FILE}")
    listed = config.files
    ort_graphs = {f for v in config.variants.values() for f in v.files.values() if not v.weights}
    referenced = [f for v in config.variants.values() for f in v.file_names]
    for name in [*listed, *referenced, TOKENIZER_FILE]:  # names checked before any file is read
        _inside(path, name)
        if name not in listed:
            raise PackageError(f"model package {path}: {name!r} is not in the checksum list")
    for name, digest in listed.items():
        f = path / name
        if not f.is_file():
            raise PackageError(f"model package {path} is missing {name}")
        if verify and sha256(f) != digest:
            raise PackageError(
                f"model package {path}: checksum mismatch for {name} (file changed or corrupt)"
            )
    for graph in {f for v in config.variants.values() for f in v.files.values()} - ort_graphs:
        try:
            external = external_files(path / graph)  # what onnxruntime would open besides
        except ProtobufError as e:
            where = f"model package {path}: {graph}"
            raise PackageError(f"{where} is not an ONNX graph ({e})") from None
        for data in sorted(external):
            if data not in listed:
                raise PackageError(
                    f"model package {path}: {graph} reads the weights file {data!r}, which is "
                    "not in the checksum list"
                )
    return Package(path, config)


def not_a_package(path: Path) -> str | None:
    """What a folder that `edgeformer export` takes is ("a training checkpoint", ...), or None
    for anything else: a package is expected and the user holds its source."""
    config: object = None
    if (path / CONFIG_FILE).is_file():
        try:
            config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
    if isinstance(config, dict):
        if config.get("format") == CHECKPOINT_FORMAT:
            return "a training checkpoint"
        if "format" not in config and ("model_type" in config or "architectures" in config):
            return "a Hugging Face model folder"
        return None
    if (path / "log.jsonl").is_file() or (path / "best" / CONFIG_FILE).is_file():
        return "a training run folder"
    return None
