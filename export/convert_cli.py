"""`edgeformer convert hf SRC_DIR OUT_CHECKPOINT [--force]`: a local Hugging Face model folder
(GPT2LMHeadModel, LlamaForCausalLM: config.json, model.safetensors, tokenizer.json;
MarianMTModel: source.spm, target.spm and vocab.json instead of tokenizer.json) -> an
edgeformer checkpoint, which `edgeformer export` turns into a package (export also takes the
Hugging Face folder directly). Nothing is downloaded and transformers is not needed.

`edgeformer convert gguf MODEL.gguf OUT_CHECKPOINT`: a GGUF file (llama, qwen2, qwen3, phi3,
gemma2, gemma3, gpt2) -> a checkpoint that keeps the file's quantized blocks for export's `gguf`
variant (its tokenizer is transformers' conversion of the file's: transformers is needed for
it).

The flags of edgeformer.export.convert_hf (models/hf/convert.py) and models.gguf.convert_gguf,
which do the whole job."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, command: str = "convert") -> None:
    parser.add_argument(
        "source", choices=["hf", "gguf"],
        help="source format: hf (Hugging Face folder) or gguf (llama.cpp's file)",
    )  # fmt: skip
    parser.add_argument("src_dir", help="local Hugging Face model folder, or the .gguf file")
    parser.add_argument("out_checkpoint", help="edgeformer checkpoint folder to create")
    parser.add_argument(
        "--force", action="store_true", help="replace an existing checkpoint (default: refuse)"
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress line (default: progress on stderr)"
    )


def run(args: argparse.Namespace) -> int:
    from ..models.gguf import convert_gguf
    from ..models.hf import convert_hf

    convert = convert_gguf if args.source == "gguf" else convert_hf
    path = convert(args.src_dir, args.out_checkpoint, force=args.force, verbose=not args.quiet)
    print(path)
    return 0
