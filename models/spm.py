"""SentencePiece models -> `tokenizers` tokenizer.json, for converted Marian (OPUS-MT) and M2M100
models (their transformers tokenizers are SentencePiece-only: there is no tokenizer.json to copy).

A Marian folder holds source.spm and target.spm (two SentencePiece Unigram models) and vocab.json
(piece -> id, one vocabulary for both sides), or, with separate vocabularies (OPUS-MT "tc-big":
MarianTokenizer's separate_vocabs), vocab.json for the sources and target_vocab.json for the
targets, each with its own ids. transformers' MarianTokenizer encodes a text with
one of the spm models and maps each piece through vocab.json (a piece it lacks -> <unk>), then
appends </s>; it decodes ids -> pieces (vocab.json reversed) -> the spm model's decode_pieces.
`spm_tokenizer` writes the equivalent `tokenizers` tokenizer, whose ids are vocab.json's:

- normalizer: the spm model's own normalization table (`Precompiled`: nmt_nfkc and the like),
  then, with remove_extra_whitespaces, leading/trailing spaces stripped and runs collapsed;
- pre-tokenizer: `Metaspace` (spaces -> "▁", a "▁" prepended with add_dummy_prefix);
- model: `Unigram` over vocab.json's tokens in id order, each with its spm score. Tokens of the
  other side (in vocab.json, not in this spm model) get a score far below every piece, so a text
  uses them only where this model has no piece at all (where spm gives an unknown piece);
- special tokens: </s>, <unk>, <pad> (and the spm model's other control pieces), never split;
  `>>xx<<` language codes of vocab.json (multilingual models) are single tokens of the source;
- decoder: `Metaspace` ("▁" -> space, the first one dropped): decode gives detokenized text.

Only Unigram models with whitespace escaped as a prefix and no byte fallback (all OPUS-MT models)
are converted; anything else is a ValueError naming the spm field. The `sentencepiece` library
(the bench extra) parses the .spm protobuf here only: the runtime never imports it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..core.commandline import pip_extra

SPECIALS = ("</s>", "<unk>", "<pad>")  # Marian's (vocab.json); <s> is not used
FOREIGN_SCORE = -1e6  # vocab.json tokens the spm model lacks: below any real piece's score
LANGUAGE_CODE = re.compile(r">>.+<<")  # MarianTokenizer's language_code_re


def read_spm(path: str | os.PathLike):
    """The parsed ModelProto of a .spm file (sentencepiece's protobuf)."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError:
        raise ImportError(
            "converting a Marian model needs the `sentencepiece` package to read its .spm files: "
            "pip install sentencepiece (or " + pip_extra("bench") + ")"
        ) from None
    proto = getattr(pb, "ModelProto")()  # noqa: B009  (generated protobuf: mypy sees none)
    try:
        proto.ParseFromString(Path(path).read_bytes())
    except Exception as e:  # protobuf's DecodeError
        raise ValueError(f"{path} is not a SentencePiece model ({e})") from None
    return proto


SPM_TYPES = {1: "Unigram", 2: "BPE"}  # trainer_spec.model_type


def check_spm(proto, path: str | os.PathLike, model_type: int = 1) -> None:
    """Refuse what the tokenizers equivalent does not reproduce, naming the spm field."""
    t, n = proto.trainer_spec, proto.normalizer_spec

    def bad(field: str, value: object, supported: str) -> ValueError:
        return ValueError(
            f"unsupported SentencePiece model {path}: {field}={value!r} (edgeformer converts "
            f"{supported})"
        )

    if t.model_type != model_type:
        kind = SPM_TYPES[model_type]
        raise bad("trainer_spec.model_type", t.model_type, f"{kind} models ({model_type}) here")
    if t.byte_fallback:
        raise bad("trainer_spec.byte_fallback", True, "models without byte fallback")
    if t.treat_whitespace_as_suffix:
        raise bad("trainer_spec.treat_whitespace_as_suffix", True, "'▁' prefixes only")
    if n.HasField("escape_whitespaces") and not n.escape_whitespaces:
        raise bad("normalizer_spec.escape_whitespaces", False, "escaped whitespace ('▁')")
    if proto.HasField("denormalizer_spec") and proto.denormalizer_spec.precompiled_charsmap:
        raise bad("denormalizer_spec", "(a decoding table)", "models without one")


def spm_tokenizer(
    spm: str | os.PathLike, vocab: dict[str, int], language_codes: bool = False,
    vocab_file: str = "vocab.json",
) -> str:  # fmt: skip
    """The tokenizer.json text of `spm` with vocab.json's ids (`vocab`: token -> id; read from
    `vocab_file`, which errors name)."""
    from tokenizers import AddedToken, Tokenizer, models

    proto = read_spm(spm)
    check_spm(proto, spm)
    ids = sorted(vocab.values())
    if ids != list(range(len(vocab))):
        raise ValueError(f"{vocab_file}: ids must be 0 .. {len(vocab) - 1}, each once")
    for token in ("</s>", "<unk>"):
        if token not in vocab:
            raise ValueError(f"{vocab_file} has no {token} (Marian's EOS and unknown token)")
    scores = {p.piece: p.score for p in proto.pieces if p.type in (1, 4)}  # NORMAL, USER_DEFINED
    controls = {p.piece for p in proto.pieces if p.type in (2, 3)}  # UNKNOWN, CONTROL
    tokens = sorted(vocab, key=vocab.__getitem__)
    unigram = [(t, scores.get(t, 0.0 if t in controls else FOREIGN_SCORE)) for t in tokens]
    tok = Tokenizer(models.Unigram(unigram, unk_id=vocab["<unk>"], byte_fallback=False))

    set_spm_text_steps(tok, proto)
    specials = [t for t in tokens if t in SPECIALS or t in controls]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if language_codes:  # ">>fra<< text": the code is one token, the text is encoded after it
        codes = [t for t in tokens if LANGUAGE_CODE.fullmatch(t)]
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in codes])
    return tok.to_str()


def set_spm_text_steps(tok, proto) -> None:
    """What SentencePiece does around its model, as `tokenizers` steps on `tok`: the
    normalization table, whitespace stripped and collapsed, spaces -> "▁" (one prepended), and
    back when decoding."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers

    n = proto.normalizer_spec
    steps: list = []
    if n.precompiled_charsmap:
        steps.append(normalizers.Precompiled(n.precompiled_charsmap))
    if not n.HasField("remove_extra_whitespaces") or n.remove_extra_whitespaces:
        steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    if steps:
        tok.normalizer = normalizers.Sequence(steps)
    prefix = not n.HasField("add_dummy_prefix") or n.add_dummy_prefix
    scheme = "always" if prefix else "never"
    split = not proto.trainer_spec.HasField("split_by_whitespace") or (
        proto.trainer_spec.split_by_whitespace
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=scheme, split=split)
    tok.decoder = decoders.Metaspace(prepend_scheme=scheme, split=split)


def read_vocab(path: Path) -> dict[str, int]:
    """A Marian vocab.json / target_vocab.json: token -> id."""
    try:
        vocab = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a vocabulary") from None
    if not isinstance(vocab, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in vocab.items()
    ):
        raise ValueError(f"{path} must map tokens to integer ids")
    return vocab


def marian_tokenizers(
    src: Path, separate: bool = False, sizes: tuple[int, int] | None = None
) -> tuple[str, str]:
    """(source tokenizer.json, target tokenizer.json) texts of a Marian folder: one shared
    vocab.json, or (separate: config.json's share_encoder_decoder_embeddings false) vocab.json
    for the sources and target_vocab.json for the targets. sizes: config.json's (vocab_size,
    decoder_vocab_size), which each vocabulary must fit."""
    target_file = "target_vocab.json" if separate else "vocab.json"
    need = ("source.spm", "target.spm", "vocab.json", target_file)
    missing = [f for f in dict.fromkeys(need) if not (src / f).is_file()]
    if not separate and (src / "target_vocab.json").is_file():
        raise ValueError(
            f"{src} has target_vocab.json (separate source and target vocabularies) but "
            "config.json's share_encoder_decoder_embeddings is true (one shared vocab.json)"
        )
    if missing:
        why = " (config.json's share_encoder_decoder_embeddings is false)" if separate else ""
        raise FileNotFoundError(
            f"{src} has no {', '.join(missing)}: a Marian folder needs "
            f"{', '.join(dict.fromkeys(need))}{why} (MarianTokenizer.save_pretrained writes them)"
        )
    if separate and _tokenizer_flag(src, "separate_vocabs") is False:
        raise ValueError(
            f"unsupported Marian tokenizer: {src / 'tokenizer_config.json'} has "
            "separate_vocabs=False but config.json's share_encoder_decoder_embeddings is false "
            "(edgeformer converts separate_vocabs=True)"
        )
    vocab = read_vocab(src / "vocab.json")
    target = read_vocab(src / target_file) if separate else vocab
    if sizes is not None:
        fields = ("vocab_size", "decoder_vocab_size" if separate else "vocab_size")
        for file, table, field, size in zip(("vocab.json", target_file), (vocab, target),
                                            fields, sizes):  # fmt: skip
            if len(table) > size:
                raise ValueError(
                    f"unsupported MarianMTModel config: {field}={size} but {src / file} has "
                    f"{len(table)} tokens"
                )
    source = spm_tokenizer(src / "source.spm", vocab, language_codes=True)
    return source, spm_tokenizer(src / "target.spm", target, vocab_file=target_file)


def _tokenizer_flag(src: Path, key: str) -> object:
    """tokenizer_config.json's `key` (None without the file or the key)."""
    path = src / "tokenizer_config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    return data.get(key) if isinstance(data, dict) else None


def spm_merges(proto) -> list[tuple[str, str]]:
    """A SentencePiece BPE model's merges, in the order it applies them: every split of a piece
    into two pieces, the pieces by id (spm's BPE merges the pair whose result scores highest:
    its pieces' scores fall with their ids), as transformers' converters extract them
    (convert_slow_tokenizer.generate_merges)."""
    rank = {p.piece: i for i, p in enumerate(proto.pieces)}
    merges: list[tuple[int, int, int, str, str]] = []
    for piece, i in rank.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in rank and right in rank:
                merges.append((i, len(left), len(right), left, right))
    # transformers sorts each piece's splits by (left id, right id), then all stably by
    # (piece id, left length, right length): the same order as this key
    merges.sort(key=lambda m: (m[0], m[1], m[2], rank[m[3]], rank[m[4]]))
    return [(m[3], m[4]) for m in merges]


# M2M100Tokenizer's language codes (transformers' FAIRSEQ_LANGUAGE_CODES, tokenizer_config.json's
# `language_codes`): their tokens `__xx__` take the ids after vocab.json's, in this order
M2M100_LANGUAGES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg "
        "mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw "
        "ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


def m2m100_language_token(code: str) -> str:
    return f"__{code}__"


def m2m100_tokenizer(src: Path, vocab_size: int) -> tuple[str, int]:
    """(tokenizer.json text, pieces of the spm model vocab.json lacks) of an M2M100 folder:
    sentencepiece.bpe.model (a BPE model) and vocab.json (fairseq's dictionary: piece -> id),
    as transformers' M2M100Tokenizer encodes: the spm pieces mapped through vocab.json, the
    language tokens `__xx__` after it, a source framed as `__en__ text </s>` (tokenizer_config's
    src_lang). A piece vocab.json lacks is <unk> for transformers; here its merge is dropped, so
    such a piece comes out as its parts (counted: real M2M100 dictionaries have every piece)."""
    from tokenizers import AddedToken, Tokenizer, models, processors

    spm, vocab_file = src / "sentencepiece.bpe.model", src / "vocab.json"
    missing = [f.name for f in (spm, vocab_file) if not f.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{src} has no tokenizer.json and no {', '.join(missing)}: an M2M100 folder "
            "needs sentencepiece.bpe.model and vocab.json (M2M100Tokenizer.save_pretrained "
            "writes them)"
        )
    proto = read_spm(spm)
    check_spm(proto, spm, model_type=2)
    vocab = read_vocab(vocab_file)
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError(f"{vocab_file}: ids must be 0 .. {len(vocab) - 1}, each once")
    for token in ("<s>", "<pad>", "</s>", "<unk>"):
        if token not in vocab:
            raise ValueError(f"{vocab_file} has no {token} (M2M100's special tokens)")
    setting = _tokenizer_flag(src, "language_codes") or "m2m100"
    if setting not in M2M100_LANGUAGES:
        raise ValueError(
            f"unsupported M2M100 tokenizer: {src / 'tokenizer_config.json'} has "
            f"language_codes={setting!r} (edgeformer knows {', '.join(M2M100_LANGUAGES)})"
        )
    codes = M2M100_LANGUAGES[str(setting)]
    inside = [t for t in map(m2m100_language_token, codes) if t in vocab]
    if inside:  # transformers numbers them after vocab.json all the same: ids would differ
        raise ValueError(
            f"{vocab_file} holds the language token {inside[0]!r} (id {vocab[inside[0]]}): "
            "M2M100Tokenizer gives language tokens the ids after vocab.json's, so this "
            "vocabulary's ids would not be transformers'; remove the language tokens from it"
        )
    if len(vocab) + len(codes) > vocab_size:
        raise ValueError(
            f"unsupported M2M100ForConditionalGeneration config: vocab_size={vocab_size} but "
            f"{vocab_file} has {len(vocab)} tokens and {len(codes)} language codes follow them"
        )
    source_lang = _tokenizer_flag(src, "src_lang") or "en"
    if source_lang not in codes:
        raise ValueError(
            f"{src / 'tokenizer_config.json'}: src_lang={source_lang!r} is not one of its "
            f"{setting} language codes"
        )
    merges = [(a, b) for a, b in spm_merges(proto) if a in vocab and b in vocab and a + b in vocab]
    pieces = {p.piece for p in proto.pieces if p.type in (1, 4)}  # NORMAL, USER_DEFINED
    lacking = len(pieces - vocab.keys())
    bpe = models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=False)
    tok = Tokenizer(bpe)
    set_spm_text_steps(tok, proto)
    specials = sorted(("<s>", "<pad>", "</s>", "<unk>"), key=vocab.__getitem__)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    languages = [m2m100_language_token(c) for c in codes]  # ids len(vocab) + i, in order
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in languages])
    first = m2m100_language_token(str(source_lang))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{first} $A </s>", pair=f"{first} $A $B </s>",
        special_tokens=[(first, len(vocab) + codes.index(str(source_lang))),
                        ("</s>", vocab["</s>"])],
    )  # fmt: skip
    return tok.to_str(), lacking
