"""Build every stack's model files on disk once per shape: the Hugging Face model of the shape
(MarianMTModel / GPT2LMHeadModel), its conversion into our checkpoint and package, its Optimum
ONNX export (fp32, dynamic int8) and its CTranslate2 conversion; and a Llama of the LM shape,
converted both into our checkpoint and package and by onnxruntime-genai's model builder. So every
stack of a row runs the same weights (our own random model only without transformers, or the
trained model of --package).

Everything is made from a config with random weights (fixed seed); nothing comes from a hub.
Each folder gets a stamp holding the config it was built from, so `--work DIR` can reuse it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from .shapes import SEED, Shape

OUR_SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]  # ids 0..3, as ModelConfig's defaults
READ_ONLY = False  # set in child processes: use what the parent built, never rebuild
# set in a stack's build process in an environment of its own (Optimum's): the HF model it
# converts is the one the bench's environment built (same weights), never made there
OWN_ENV = False


def _cached(path: Path, key: dict, build: Callable[[Path], None]) -> Path:
    """Run `build(path)` unless `path` holds a finished build of the same `key`. What is at
    `path` is replaced only when a build made it (its stamp, or the marker beside it of one
    that did not finish): a folder of the same name in a user's --work is refused instead."""
    stamp = path / ".bench-stamp.json"
    key = json.loads(json.dumps(key))  # as the stamp reads back: tuples are lists there
    if (stamp.is_file() and json.loads(stamp.read_text()) == key) or READ_ONLY:
        return path
    building = path.with_name(f".{path.name}.bench-building")
    there = path.is_symlink() or path.exists() and (not path.is_dir() or any(path.iterdir()))
    if there and not stamp.is_file() and not building.is_file():
        raise FileExistsError(
            f"{path} was not built by edgeformer bench (no {stamp.name}), so it is not "
            "replaced: remove it or give another --work"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    building.touch()
    shutil.rmtree(path, ignore_errors=True)
    build(path)
    path.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(key))
    building.unlink()
    return path


def shape_key(shape: Shape) -> dict:
    """What a shape's built files depend on: our config, and a real shape's HF config."""
    key = shape.cfg.to_dict()
    return {**key, "hf": shape.hf} if shape.hf is not None else key


def _word_tokenizer(vocab: list[str], unk: str):
    """A whitespace word-level `tokenizers` tokenizer over a fixed token list (ids = positions)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def hf_weights(job) -> bool:
    """Whether our ED / LM stacks run the peers' weights: without --package, the Hugging Face
    model of the shape (`hf_model_dir`) converted by `edgeformer.models.hf.convert_hf`, so that
    every stack of a row runs the same model and takes the same ("hf") token ids. It needs
    transformers to build that model; without it (or with --package) ours run our own model."""
    return job.package is None and installed("transformers")


def installed(module: str) -> bool:
    """Whether `module` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a None in sys.modules
        return False


def our_checkpoint(shape: Shape, work: Path) -> Path:
    """Our random-weight model (seed SEED, our vocabulary) saved as an edgeformer checkpoint: what
    our stacks run when transformers is not installed (no HF model to convert)."""

    def build(path: Path) -> None:
        import torch

        from edgeformer.models import build_model
        from edgeformer.models.checkpoint import save_checkpoint

        vocab = OUR_SPECIALS + [f"t{i}" for i in range(len(OUR_SPECIALS), shape.cfg.vocab_size)]
        tok_path = work / f"{shape.name}-tokenizer.json"
        _word_tokenizer(vocab, "[UNK]").save(str(tok_path))
        torch.manual_seed(SEED)
        save_checkpoint(path, build_model(shape.cfg).eval(), tok_path)

    return _cached(work / f"{shape.name}-checkpoint", shape_key(shape), build)


def converted_checkpoint(hf: Path, path: Path, key: dict) -> Path:
    """The Hugging Face folder `hf` converted into an edgeformer checkpoint at `path` (cached)."""

    def build(out: Path) -> None:
        from edgeformer.models.hf import convert_hf

        convert_hf(hf, out, force=True)

    return _cached(path, {**key, "converted": hf.name}, build)


def hf_checkpoint(shape: Shape, work: Path) -> Path:
    """The shape's Hugging Face model (Marian / GPT-2, `hf_model_dir`) as an edgeformer checkpoint:
    the weights and vocabulary of hf-torch, Optimum and CTranslate2."""
    from .weights import gguf_of

    gguf = gguf_of(shape)
    if gguf is not None:  # an --hf FILE.gguf run: the file itself, its blocks kept (gguf variant)
        return gguf_checkpoint(gguf, work / f"{shape.name}-gguf-checkpoint", shape_key(shape))
    hf = hf_model_dir(shape, work)
    return converted_checkpoint(hf, work / f"{shape.name}-hf-checkpoint", shape_key(shape))


def gguf_checkpoint(gguf: Path, path: Path, key: dict) -> Path:
    """The GGUF file converted into an edgeformer checkpoint (models.gguf: its weights
    dequantized as the --hf folder holds them, and its raw blocks beside them), cached."""

    def build(out: Path) -> None:
        from edgeformer.models.gguf import convert_gguf

        convert_gguf(gguf, out, force=True)

    return _cached(path, {**key, "converted": gguf.name}, build)


def exported_package(ckpt: Path, path: Path, key: dict, variants: tuple[str, ...]) -> Path:
    """`ckpt` exported with `edgeformer.export` (all `variants` in one package, cached; a new
    package format or variant recipe makes a new build)."""
    from dataclasses import asdict

    from ..core.format import FORMAT_VERSION
    from ..export.recipes import variant_spec

    family = json.loads((ckpt / "config.json").read_text())["model"]["family"]
    recipes = [asdict(variant_spec(v, family)) for v in variants]

    def build(out: Path) -> None:
        from edgeformer.export import export_package

        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            export_package(ckpt, out, variants=tuple(variants), force=True, verbose=False,
                           verify=False)  # fmt: skip

    key = {**key, "variants": list(variants), "format": FORMAT_VERSION, "recipes": recipes}
    return _cached(path, {**key, "exporter": exporter_digest()}, build)


def exporter_digest() -> str:
    """A digest of the export code (the graphs it writes), found without importing it (the
    package imports torch): an exporter change makes new packages, as a new recipe does."""
    import hashlib

    spec = importlib.util.find_spec("edgeformer.export")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    digest = hashlib.sha256()
    for f in sorted(folder.glob("*.py")):
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def our_package(
    shape: Shape, work: Path, variants: tuple[str, ...] = ("fp32",), from_hf: bool = False
) -> Path:
    """Our checkpoint of the shape exported: the converted HF model's (`from_hf`), else ours."""
    key = {"cfg": shape_key(shape)}
    if from_hf:
        ckpt, name = hf_checkpoint(shape, work), f"{shape.name}-hf-package"
    else:
        ckpt, name = our_checkpoint(shape, work), f"{shape.name}-package"
    return exported_package(ckpt, work / name, key, variants)


def package_for(job) -> Path:
    """The package a job's stack of our runtime runs (ED / LM): --package, else the converted
    HF model's (`hf_weights`), else our random-weight one."""
    return job.package or our_package(job.shape, job.work, job.variants, hf_weights(job))


def checkpoint_for(job) -> Path:
    """The checkpoint edgeformer-torch runs: --package's --checkpoint, else the converted HF
    model (`hf_weights`), else our random-weight one."""
    if job.package and not job.checkpoint:
        raise RuntimeError("a --package was given without its --checkpoint")
    if job.checkpoint:
        return job.checkpoint
    return (
        hf_checkpoint(job.shape, job.work)
        if hf_weights(job)
        else our_checkpoint(job.shape, job.work)
    )


# ---- peers: Hugging Face model of the same shape, and its conversions ---------------------------


def hf_config(shape: Shape):
    """MarianConfig / GPT2Config mirroring our shape (Marian conventions: pad = last id)."""
    c = shape.cfg
    V = c.vocab_size
    if shape.is_ed:
        from transformers import MarianConfig

        return MarianConfig(
            vocab_size=V, d_model=c.d_model, encoder_layers=c.n_encoder_layers,
            decoder_layers=c.n_decoder_layers, encoder_attention_heads=c.n_heads,
            decoder_attention_heads=c.n_heads, encoder_ffn_dim=c.d_ff,
            decoder_ffn_dim=c.decoder_ffn, activation_function=c.activation,
            max_position_embeddings=c.max_len,
            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=True,
            pad_token_id=V - 1, eos_token_id=0, decoder_start_token_id=V - 1,
            forced_eos_token_id=None, share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True,
        )  # fmt: skip
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=V, n_positions=c.max_len, n_embd=c.d_model, n_layer=c.n_decoder_layers,
        n_head=c.n_heads, n_inner=c.d_ff, activation_function="gelu", resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=V - 1, eos_token_id=V - 1,
        pad_token_id=V - 1,
    )  # fmt: skip


def hf_vocab(shape: Shape) -> list[str]:
    """Token strings by id: ED '</s>' 0, '<unk>' 1, '<pad>' last; LM '<unk>' 0, eos last."""
    V = shape.cfg.vocab_size
    if shape.is_ed:
        return ["</s>", "<unk>"] + [f"t{i}" for i in range(2, V - 1)] + ["<pad>"]
    return ["<unk>"] + [f"t{i}" for i in range(1, V - 1)] + ["<|endoftext|>"]


def real_specials(hf: dict) -> dict[int, str]:
    """A real shape's special tokens by id, from its config (the rest are words t<id>)."""
    names = {}
    fields = (("pad_token_id", "<pad>"), ("bos_token_id", "<s>"), ("eos_token_id", "</s>"))
    for key, token in fields:
        ids = hf.get(key)
        for i in ids if isinstance(ids, list) else [ids]:
            if isinstance(i, int) and 0 <= i < hf["vocab_size"]:
                names[i] = token  # eos wins when it is bos too (GPT-2, SmolLM2, Qwen2.5 base)
    if hf.get("model_type") == "marian":
        names.setdefault(1, "<unk>")
    return names


def real_vocab(hf: dict) -> list[str]:
    specials = real_specials(hf)
    return [specials.get(i, f"t{i}") for i in range(hf["vocab_size"])]


def hf_folder(source: Path, work: Path) -> Path:
    """The Hugging Face folder of an --hf input (benchmarks.weights): the folder itself, or a
    GGUF file's weights dequantized (models.gguf.convert.write_hf_folder: config, float32
    weights, transformers' conversion of its tokenizer) under `work`, once per file content."""
    from .weights import check_source, digest, is_gguf

    check_source(source)
    if not is_gguf(source):
        return source

    def build(path: Path) -> None:
        from edgeformer.models.gguf.convert import write_hf_folder
        from edgeformer.models.gguf.reader import GGUFFile

        path.mkdir(parents=True)
        write_hf_folder(GGUFFile(source), path)

    key = {"gguf": str(source), "digest": digest(source)}
    return _cached(work / f"{source.stem}-{key['digest']}-hf", key, build)


def real_model(shape: Shape, path: Path) -> None:
    """A real shape's random-weight model (seed SEED, float32, the architecture's own init) and a
    word-level tokenizer over its vocabulary with its special tokens at the config's ids."""
    import torch
    import transformers

    assert shape.hf is not None
    hf = {k: v for k, v in shape.hf.items() if not k.startswith("_")}
    config = transformers.AutoConfig.for_model(**hf)
    cls = getattr(transformers, hf["architectures"][0])
    torch.manual_seed(SEED)
    model = cls(config).float().eval()
    model.config.dtype = torch.float32
    model.save_pretrained(path)
    if shape.hf.get("_bench_languages"):
        nllb_tokenizer(shape.hf, path)
    else:
        real_tokenizer(hf, path)


def nllb_tokenizer(hf: dict, path: Path) -> None:
    """transformers' NllbTokenizer (fast) over NLLB's layout (shapes.nllb_layout): <s> <pad>
    </s> <unk>, the words `▁t<id>` up to the language codes, the codes, <mask>; saved with
    save_pretrained (tokenizer.json, tokenizer_config.json with the codes), so that every
    converter reads the languages as from NLLB's own files. The words have no merges: the
    bench gives every stack token ids, never text."""
    from transformers import NllbTokenizer

    from .shapes import SOURCE_LANG, nllb_codes

    layout = hf["_bench_languages"]
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    words = [f"\u2581t{i}" for i in range(len(specials), layout["words"])]
    # the codes and <mask> in the vocabulary at NLLB-200's ids (transformers would add <mask>
    # before the codes)
    tokens = [*specials, *words, *nllb_codes(), "<mask>"]
    tok = NllbTokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=[], src_lang=SOURCE_LANG)
    for side in ("source", "target"):
        code, want = layout[side]
        if tok.convert_tokens_to_ids(code) != want:  # transformers numbered them otherwise
            got = tok.convert_tokens_to_ids(code)
            raise RuntimeError(f"NllbTokenizer put {code} at id {got}, not {want}")
    if len(tok) > hf["vocab_size"]:
        raise RuntimeError(f"NllbTokenizer has {len(tok)} tokens, vocab_size {hf['vocab_size']}")
    tok.save_pretrained(path)


def real_tokenizer(hf: dict, path: Path) -> None:
    """A word-level tokenizer over a real shape's vocabulary, its special tokens at the
    config's ids, saved with transformers (tokenizer.json, tokenizer_config.json)."""
    from transformers import PreTrainedTokenizerFast

    vocab = real_vocab(hf)
    specials = {v: k for k, v in real_specials(hf).items()}
    named = {"<pad>": "pad_token", "<s>": "bos_token", "</s>": "eos_token", "<unk>": "unk_token"}
    kw = {named[t]: t for t in specials}
    # an LM config names no unknown token: EOS stands in (CTranslate2's converter needs one);
    # nor a padding one: EOS too (HF generate pads with it), else a model's tokenizer class
    # adds its own (Qwen2Tokenizer: '<|endoftext|>', a 151,937th token CTranslate2 refuses)
    kw["unk_token"] = kw.get("unk_token") or kw.get("eos_token") or vocab[0]
    kw["pad_token"] = kw.get("pad_token") or kw.get("eos_token") or vocab[0]
    if "bos_token_id" in hf and hf.get("bos_token_id") == hf.get("eos_token_id"):
        kw["bos_token"] = kw["eos_token"]  # one token both (SmolLM2, Qwen2.5 base, GPT-2)
    tok = _word_tokenizer(vocab, kw["unk_token"])
    PreTrainedTokenizerFast(tokenizer_object=tok, **kw).save_pretrained(path)


def hf_model_dir(shape: Shape, work: Path) -> Path:
    """The random-weight HF model (seed SEED) and a matching fast tokenizer, save_pretrained:
    a real shape's architecture from its config (`real_model`), else Marian / GPT-2; an --hf
    run's own folder (benchmarks.weights), as it is."""
    from .weights import weights_of

    own = weights_of(shape)
    if own is not None:
        return own

    def build(path: Path) -> None:
        if OWN_ENV:
            raise RuntimeError(f"{path} is built by the bench's own environment, not this one")
        if shape.hf is not None:
            real_model(shape, path)
            return
        import torch
        from transformers import GPT2LMHeadModel, MarianMTModel, PreTrainedTokenizerFast

        torch.manual_seed(SEED)
        cls = MarianMTModel if shape.is_ed else GPT2LMHeadModel
        cls(hf_config(shape)).eval().save_pretrained(path)
        vocab = hf_vocab(shape)
        specials = (
            dict(eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
            if shape.is_ed
            else dict(bos_token=vocab[-1], eos_token=vocab[-1], unk_token="<unk>")
        )
        tok = _word_tokenizer(vocab, specials["unk_token"])
        PreTrainedTokenizerFast(tokenizer_object=tok, **specials).save_pretrained(path)

    return _cached(work / f"{shape.name}-hf", shape_key(shape), build)


def optimum_dir(shape: Shape, work: Path, int8: bool = False) -> Path:
    """Optimum's ONNX export of the HF model; `int8`: ORTQuantizer dynamic int8 (avx2 config)."""
    hf = hf_model_dir(shape, work)

    def export(path: Path) -> None:
        from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSeq2SeqLM

        cls = ORTModelForSeq2SeqLM if shape.is_ed else ORTModelForCausalLM
        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            cls.from_pretrained(hf, export=True).save_pretrained(path)
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (hf / f).is_file():
                shutil.copy(hf / f, path / f)

    fp32 = _cached(work / f"{shape.name}-optimum-fp32", shape_key(shape), export)
    if not int8:
        return fp32

    def quantize(path: Path) -> None:
        from optimum.onnxruntime import ORTQuantizer
        from optimum.onnxruntime.configuration import AutoQuantizationConfig

        qcfg = AutoQuantizationConfig.avx2(is_static=False, per_channel=False)
        path.mkdir(parents=True)
        for f in sorted(fp32.glob("*.onnx")):
            with warnings.catch_warnings(), _quiet():
                warnings.simplefilter("ignore")
                q = ORTQuantizer.from_pretrained(fp32, file_name=f.name)
                q.quantize(save_dir=path, quantization_config=qcfg)
        for f in fp32.iterdir():
            if f.suffix == ".json":
                shutil.copy(f, path / f.name)

    return _cached(work / f"{shape.name}-optimum-int8", shape_key(shape), quantize)


def ct2_dir(shape: Shape, work: Path, int8: bool = False) -> Path:
    """CTranslate2's TransformersConverter output, weights stored as float32 or int8."""
    hf = hf_model_dir(shape, work)

    def convert(path: Path) -> None:
        import ctranslate2

        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            ctranslate2.converters.TransformersConverter(str(hf)).convert(
                str(path), quantization="int8" if int8 else None, force=True
            )

    name = f"{shape.name}-ct2-{'int8' if int8 else 'fp32'}"
    return _cached(work / name, shape_key(shape), convert)


def ct2_vocab(path: Path) -> list[str]:
    """The token strings by id of a CTranslate2 model folder (its shared or target vocabulary,
    as its converter wrote them: a real shape's tokenizer's, padded to vocab_size)."""
    for name in ("shared_vocabulary.json", "target_vocabulary.json", "vocabulary.json"):
        if (path / name).is_file():
            return json.loads((path / name).read_text(encoding="utf-8"))
    raise FileNotFoundError(f"{path}: no CTranslate2 vocabulary file")


# ---- CTranslate2 on a trained package's own weights (the frontier) ----------------------------

# our ModelConfig.activation -> CTranslate2's (swiglu: a gated FFN, not converted here)
CT2_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH"}


def package_weights(package: Path) -> dict:
    """The float32 initializers of a package's fp32 encoder and decoder graphs, by name."""
    import onnx
    from onnx import numpy_helper

    from ..runtime.package import load_package

    pkg = load_package(package, verify=False)
    weights = {}
    for graph in ("encoder", "decoder"):
        path = pkg.file(graph, "fp32")
        if path.suffix != ".onnx":
            raise NotImplementedError(f"{path}: the weights are read from .onnx graphs")
        for t in onnx.load(str(path)).graph.initializer:
            weights[t.name] = numpy_helper.to_array(t).copy()  # writable: ct2 quantizes in place
    return weights


def ct2_package_spec(package: Path):
    """A CTranslate2 TransformerSpec holding the weights of `package`'s fp32 graphs.

    Reads the exporter's weights as they are stored (export/builder.py): the linear layers'
    (in, out) `*.weight_t` (CTranslate2 takes (out, in)), the packed self-attention QKV and
    cross-attention KV, the embedding table with sqrt(d_model) folded in (so CTranslate2 does not
    scale it again), a tied head's last norm divided by that scale (`*.head`: multiplied back
    here; the head is the unscaled table), the position table indexed from 0 as CTranslate2's.
    Rotary positions: CTranslate2's own, on the whole head, 'rotate half' layout (not
    interleaved), in both self-attentions. Not converted (NotImplementedError): a gated FFN,
    heads zero-padded to a multiple of 8."""
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec

    from ..core.format import TOKENIZER_FILE, attention_head_size
    from ..runtime.package import load_package

    pkg = load_package(package, verify=False)
    cfg, special = pkg.config.model, pkg.config.special_tokens
    if cfg.family != "encoder-decoder":
        raise NotImplementedError("CTranslate2 conversion of a package: encoder-decoder only")
    if cfg.activation not in CT2_ACTIVATIONS:
        raise NotImplementedError(
            f"CTranslate2 conversion of a package: no {cfg.activation} FFN (relu, gelu, silu)"
        )
    if attention_head_size(cfg.head_dim) != cfg.head_dim:
        raise NotImplementedError(
            f"CTranslate2 conversion of a package: head dim {cfg.head_dim} is zero-padded in "
            "the graphs (not a multiple of 8)"
        )
    from ..core.format import OMITTED_AT_DEFAULT

    unmapped = [k for k, v in OMITTED_AT_DEFAULT.items() if getattr(cfg, k) is not v]
    if [k for k in unmapped if k not in ("decoder_d_ff", "src_vocab_size")]:
        raise NotImplementedError(f"CTranslate2 conversion of a package: {unmapped} not mapped")
    w = package_weights(package)
    scale = np.float32(np.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0)
    rotary = cfg.positional == "rotary"
    sides = dict(
        num_heads=cfg.n_heads, pre_norm=cfg.norm == "pre", rms_norm=cfg.norm_type == "rmsnorm",
        activation=getattr(common_spec.Activation, CT2_ACTIVATIONS[cfg.activation]),
    )  # fmt: skip
    if rotary:  # models/layers.py's Rotary: 'rotate half', all of a head's dims
        sides |= dict(rotary_dim=cfg.head_dim, rotary_interleave=False, rotary_base=cfg.rope_theta)
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(cfg.n_encoder_layers, **sides),
        transformer_spec.TransformerDecoderSpec(cfg.n_decoder_layers, **sides),
    )

    def linear(s, name: str) -> None:
        s.weight = np.ascontiguousarray(w[f"{name}.weight_t"].T)
        if f"{name}.bias" in w:
            s.bias = w[f"{name}.bias"]

    def norm(s, name: str) -> None:
        k = np.float32(1.0)
        if f"{name}.head.weight" in w:  # the tied head's norm, divided by the table's scale
            name, k = f"{name}.head", scale
        s.gamma = w[f"{name}.weight"] * k
        if f"{name}.bias" in w:
            s.beta = w[f"{name}.bias"] * k

    table = w["embed.table"]
    for side in (spec.encoder, spec.decoder):
        side.scale_embeddings = False  # folded into the table
    if rotary:  # the encoder spec declares a position table even with rotary (the decoder's not)
        del spec.encoder.position_encodings
    else:
        spec.encoder.position_encodings.encodings = w["pos.table"]
        spec.decoder.position_encodings.encodings = w["pos.table"]
    spec.encoder.embeddings[0].weight = w.get("src_embed.table", table)  # its own, if any
    spec.decoder.embeddings.weight = table
    if cfg.tie_embeddings:
        spec.decoder.projection.weight = table / scale
    else:
        spec.decoder.projection.weight = w["lm_head.weight"]
    if "logits.bias" in w:
        spec.decoder.projection.bias = w["logits.bias"]
    for i, layer in enumerate(spec.encoder.layer):
        linear(layer.self_attention.linear[0], f"enc.{i}.attn.qkv")
        linear(layer.self_attention.linear[1], f"enc.{i}.attn.out")
        norm(layer.self_attention.layer_norm, f"enc.{i}.attn_norm")
        linear(layer.ffn.linear_0, f"enc.{i}.ffn.up")
        linear(layer.ffn.linear_1, f"enc.{i}.ffn.down")
        norm(layer.ffn.layer_norm, f"enc.{i}.ffn_norm")
    for i, layer in enumerate(spec.decoder.layer):
        linear(layer.self_attention.linear[0], f"dec.{i}.attn.qkv")
        linear(layer.self_attention.linear[1], f"dec.{i}.attn.out")
        norm(layer.self_attention.layer_norm, f"dec.{i}.attn_norm")
        linear(layer.attention.linear[0], f"dec.{i}.cross.q")
        linear(layer.attention.linear[1], f"dec.{i}.cross.kv")  # packed K, V
        linear(layer.attention.linear[2], f"dec.{i}.cross.out")
        norm(layer.attention.layer_norm, f"dec.{i}.cross_norm")
        linear(layer.ffn.linear_0, f"dec.{i}.ffn.up")
        linear(layer.ffn.linear_1, f"dec.{i}.ffn.down")
        norm(layer.ffn.layer_norm, f"dec.{i}.ffn_norm")
    if cfg.norm == "pre":
        norm(spec.encoder.layer_norm, "enc.final_norm")
        norm(spec.decoder.layer_norm, "dec.final_norm")

    target = package_vocab(pkg.path / TOKENIZER_FILE, cfg.vocab_size)
    spec.register_source_vocabulary(package_vocab(pkg.source_tokenizer, cfg.source_vocab))
    spec.register_target_vocabulary(target)
    c = spec.config
    c.bos_token = c.decoder_start_token = target[special.bos_id]  # the decoder starts with BOS
    c.eos_token = target[special.eos_id]
    c.unk_token = target[special.pad_id if special.unk_id is None else special.unk_id]
    c.layer_norm_epsilon = cfg.layer_norm_eps
    return spec


def package_vocab(tokenizer: Path, vocab_size: int) -> list[str]:
    """Token strings by id of a package's tokenizer (`<id N>` for an id it has no token for):
    the words CTranslate2's vocabulary maps to the same ids."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    tokens = [tok.id_to_token(i) or f"<id {i}>" for i in range(vocab_size)]
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"{tokenizer}: its token strings are not unique")
    return tokens


def ct2_package_dir(package: Path, work: Path, int8: bool = False) -> Path:
    """`package`'s fp32 weights converted to CTranslate2 (ct2_package_spec), stored as float32
    or int8 (CTranslate2's own quantization, as ct2_dir): the ct2-* stacks of the frontier."""
    import hashlib

    from ..runtime.package import load_package

    pkg = load_package(package, verify=False)
    fp32 = pkg.variant("fp32")
    sums = {f: pkg.config.files[f] for f in fp32.file_names if f in pkg.config.files}
    key = {"package": str(Path(package).resolve()), "files": sums, "int8": int8, "v": 1}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]

    def convert(path: Path) -> None:
        spec = ct2_package_spec(Path(package))
        spec.validate()
        spec.optimize(quantization="int8" if int8 else None)
        path.mkdir(parents=True)
        spec.save(str(path))

    name = f"ct2-package-{digest}-{'int8' if int8 else 'fp32'}"
    return _cached(work / name, key, convert)


# ---- onnxruntime-genai: a Llama of the LM shape, converted by its model builder ---------------

LLAMA_SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2 (pad = unk, as many Llama tokenizers)


def llama_intermediate(d_ff: int) -> int:
    """The SwiGLU width with the parameters of a 2-matrix FFN of width d_ff (3·d·I = 2·d·d_ff),
    rounded to a multiple of 32 (MatMulNBits blocks): 1536 -> 1024, 256 -> 160."""
    return max(32, round(2 * d_ff / 3 / 32) * 32)


def llama_config(shape: Shape):
    """LlamaConfig with our LM shape: width, layers, heads (no GQA), context, vocabulary; the FFN
    width chosen for an equal parameter count (13.7 M for the LM shape, GPT-2's is 13.8 M);
    rotary positions and RMSNorm are Llama's; embeddings tied, as GPT-2's."""
    from transformers import LlamaConfig

    c = shape.cfg
    return LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.d_model,
        intermediate_size=llama_intermediate(c.d_ff), num_hidden_layers=c.n_decoder_layers,
        num_attention_heads=c.n_heads, num_key_value_heads=c.n_heads,
        max_position_embeddings=c.max_len, tie_word_embeddings=True, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, attention_dropout=0.0,
    )  # fmt: skip


def llama_vocab(shape: Shape) -> list[str]:
    return LLAMA_SPECIALS + [f"t{i}" for i in range(len(LLAMA_SPECIALS), shape.cfg.vocab_size)]


def llama_dir(shape: Shape, work: Path) -> Path:
    """The random-weight LlamaForCausalLM (seed SEED) and its tokenizer, save_pretrained."""
    if shape.is_ed:
        raise ValueError("onnxruntime-genai's builder has no encoder-decoder text model")
    if shape.hf is not None:  # a real shape's model is the one every stack runs
        return hf_model_dir(shape, work)

    def build(path: Path) -> None:
        import torch
        from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

        torch.manual_seed(SEED)
        LlamaForCausalLM(llama_config(shape)).eval().save_pretrained(path)
        tok = _word_tokenizer(llama_vocab(shape), "<unk>")
        specials = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>")
        PreTrainedTokenizerFast(tokenizer_object=tok, **specials).save_pretrained(path)

    return _cached(work / f"{shape.name}-llama-hf", shape_key(shape), build)


LLAMA_VARIANTS = ("fp32", "int8", "int4")  # the variants of our Llama package (CPU)


def llama_checkpoint(shape: Shape, work: Path) -> Path:
    """The Llama that onnxruntime-genai converts (`llama_dir`), as an edgeformer checkpoint."""
    hf = llama_dir(shape, work)
    return converted_checkpoint(hf, work / f"{shape.name}-llama-checkpoint", shape_key(shape))


def llama_package_for(job) -> Path:
    """The package of the edgeformer-llama-* stacks: the converted Llama exported with the
    variants of LLAMA_VARIANTS that the run's stacks need (fp32 always)."""
    variants = tuple(v for v in job.variants if v in LLAMA_VARIANTS) or ("fp32",)
    ckpt = llama_checkpoint(job.shape, job.work)
    key = {"cfg": shape_key(job.shape)}
    return exported_package(ckpt, job.work / f"{job.shape.name}-llama-package", key, variants)


def genai_dir(shape: Shape, work: Path, precision: str) -> Path:
    """onnxruntime-genai's model builder on the Llama folder, for the CPU: `precision` fp32, or
    int4 (MatMulNBits, the builder's CPU defaults: block 32, accuracy level 4). Nothing is
    downloaded (HF_HUB_OFFLINE)."""
    hf = llama_dir(shape, work)

    def build(path: Path) -> None:
        cache = path.with_name(path.name + "-cache")
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf),
               "-o", str(path), "-p", precision, "-e", "cpu", "-c", str(cache)]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        if p.returncode or not (path / "genai_config.json").is_file():
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"onnxruntime-genai builder exit {p.returncode}: {tail[0][:300]}")

    key = {"cfg": shape_key(shape), "precision": precision}
    return _cached(work / f"{shape.name}-genai-{precision}", key, build)


# ---- llama.cpp: the same model converted by its own converter, quantized by its quantizer ----


def gguf_f32(shape: Shape, work: Path, vendor: Path) -> Path:
    """llama.cpp's convert_hf_to_gguf.py (`vendor`: the llama.cpp sources) on the model of the
    Llama stacks (`llama_dir`: the small LM's Llama, or a real shape's own model), f32, under
    this interpreter (benchmarks.llamacpp); the llamacpp-* stacks quantize it."""
    from .weights import weights_of

    hf = llama_dir(shape, work)
    real = weights_of(shape) is not None  # a real tokenizer: the converter's own readers

    def build(path: Path) -> None:
        if OWN_ENV:
            raise RuntimeError(f"{path} is built by the bench's own environment, not this one")
        path.mkdir(parents=True)
        cmd = [sys.executable, "-m", "edgeformer.benchmarks.llamacpp", "convert", str(vendor),
               str(hf), str(path / "model.gguf"), *(["--real"] if real else [])]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        if p.returncode or not (path / "model.gguf").is_file():
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"convert_hf_to_gguf exit {p.returncode}: {tail[0][:300]}")

    key = {"cfg": shape_key(shape), "converter": str(vendor)}
    return _cached(work / f"{shape.name}-gguf-f32", key, build)


def gguf_original(shape: Shape) -> Path:
    """The GGUF file an --hf run was given: llamacpp-gguf runs it as it is."""
    from .weights import NO_GGUF, gguf_of

    path = gguf_of(shape)
    if path is None or not path.is_file():
        raise RuntimeError(NO_GGUF.format(what="original file"))
    return path


def gguf_quantized(shape: Shape, work: Path, quant: str, threads: int = 2) -> Path:
    """`gguf_f32` quantized by llama.cpp (benchmarks.llamacpp.quantize; in llama.cpp's
    environment): the folder holding model.gguf."""
    src = work / f"{shape.name}-gguf-f32"

    def build(path: Path) -> None:
        from .llamacpp import quantize

        if not (src / "model.gguf").is_file():
            raise RuntimeError(f"{src} missing: the f32 GGUF is converted first")
        path.mkdir(parents=True)
        quantize(src / "model.gguf", path / "model.gguf", quant, threads)

    key = {"cfg": shape_key(shape), "quant": quant}
    return _cached(work / f"{shape.name}-llamacpp-{quant}", key, build)


@contextlib.contextmanager
def _quiet():
    """Silence the exporters' progress prints (stdout only; errors still raise)."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def dir_size(paths: list[Path]) -> int:
    """Bytes on disk of files and folders (recursively)."""
    total = 0
    for p in paths:
        if p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        elif p.is_file():
            total += p.stat().st_size
    return total
