"""generation_config.json: a package's default decoding settings, in Hugging Face's file format.

The runtime reads the fields that have a GenerationOptions counterpart (decoding.py declares the
mapping on each field); a converted model keeps its own file, a trained one gets greedy search.
"""

from __future__ import annotations

from .decoding import GenerationOptions
from .flags import hf_names
from .schema import PackageConfig, PackageError, _obj

# Hugging Face's generation_config.json fields the runtime reads -> GenerationOptions fields,
# declared on the fields themselves (`hf=`)
GENERATION_FIELDS = hf_names(GenerationOptions)
HF_SAMPLING_TOP_K = 50  # transformers' top_k when do_sample is set and top_k is not


def default_generation_config(config: PackageConfig) -> dict:
    """What export writes for a model without its own generation_config.json: the special ids
    and greedy search (GenerationOptions' other defaults apply)."""
    sp = config.special_tokens
    ids = {"bos_token_id": sp.bos_id, "eos_token_id": sp.eos_id, "pad_token_id": sp.pad_id}
    if config.family == "encoder-decoder":
        ids["decoder_start_token_id"] = sp.bos_id
    return ids | {"do_sample": False, "num_beams": 1}


# fields that need no setting: bookkeeping, and the special ids (config.json's special_tokens
# are the ones decoding uses; export writes both from the same model)
UNDERSTOOD = {
    "_from_model_config", "transformers_version", "bos_token_id", "pad_token_id",
    "decoder_start_token_id", "eos_token_id", "max_length",
}  # fmt: skip


# fields that change no token: what generate returns besides them, and its cache switch
NO_EFFECT = {
    "output_attentions", "output_hidden_states", "output_scores", "output_logits",
    "return_dict_in_generate", "use_cache",
}  # fmt: skip
# Hugging Face's values that leave decoding as it is (a file may spell them out)
NEUTRAL = {
    "num_beam_groups": 1, "diversity_penalty": 0.0, "typical_p": 1.0, "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0, "encoder_repetition_penalty": 1.0, "encoder_no_repeat_ngram_size": 0,
    "remove_invalid_values": False, "min_length": 0,
}  # fmt: skip


# an encoder-decoder's fields read besides GenerationOptions': the token forced after the
# decoder start (a translator's target language, BART's <s>: the translator's target prefix) and
# min_length (min_new_tokens + 1, the decoder start counted)
ENCODER_DECODER_FIELDS = {"forced_bos_token_id", "min_length"}


def forced_first_token(data: object, config: PackageConfig, where: str) -> int | None:
    """An encoder-decoder's forced_bos_token_id (None when unset); PackageError when it is not
    a token id of the vocabulary."""
    token = data.get("forced_bos_token_id") if isinstance(data, dict) else None
    if isinstance(token, list) and len(token) == 1:
        token = token[0]
    vocab = config.model.vocab_size
    if token is not None and not (
        isinstance(token, int) and not isinstance(token, bool) and 0 <= token < vocab
    ):
        raise PackageError(f"{where}: forced_bos_token_id must be a token id < {vocab}")
    return token


def ignored_fields(data: object, config: PackageConfig) -> list[str]:
    """generation_config.json's fields the runtime does not apply (named at load and by
    `edgeformer info`, never dropped silently)."""
    if not isinstance(data, dict):
        return []
    known = set(GENERATION_FIELDS) | UNDERSTOOD | NO_EFFECT
    if config.family == "encoder-decoder":
        known |= ENCODER_DECODER_FIELDS
    out = sorted(
        k for k, v in data.items()
        if k not in known and v is not None and not (k in NEUTRAL and v == NEUTRAL[k])
    )  # fmt: skip
    if config.family == "decoder-only" and data.get("max_length") is not None:
        out.append("max_length (counts the prompt: use max_new_tokens)")
    return out


def generation_settings(data: object, config: PackageConfig, where: str) -> dict:
    """generation_config.json -> {GenerationOptions field: value} for the fields it sets (see
    GENERATION_FIELDS; eos_token_id lists add end tokens; an encoder-decoder's max_length is
    max_new_tokens + 1, the decoder start; ignored_fields names the rest), checked: settings
    GenerationOptions refuses are a PackageError naming `where`."""
    data = _obj(where, "the top level", data)
    out: dict = {}
    for hf, ours in GENERATION_FIELDS.items():
        if data.get(hf) is not None:
            out[ours] = data[hf]
    if out.get("early_stopping") == "never":
        out["early_stopping"] = False
    if out.get("sampling") and "top_k" not in out:
        out["top_k"] = HF_SAMPLING_TOP_K
    if isinstance(out.get("suppress_sequences"), list):
        out["suppress_sequences"] = [tuple(s) for s in out["suppress_sequences"]]
    eos = data.get("eos_token_id")
    if isinstance(eos, list):  # several end tokens: those besides the model's EOS
        out["end_token"] = [i for i in eos if i != config.special_tokens.eos_id]
    forced = out.get("forced_end_token")
    if isinstance(forced, list) and len(forced) == 1:  # transformers allows a list of one
        out["forced_end_token"] = forced[0]
    length = data.get("max_length")
    if config.family == "encoder-decoder" and "max_new_tokens" not in out and length is not None:
        if not isinstance(length, int) or isinstance(length, bool) or length < 2:
            raise PackageError(f"{where}: max_length must be an integer >= 2, got {length!r}")
        out["max_new_tokens"] = length - 1  # transformers counts the decoder start token
    shortest = data.get("min_length")
    if config.family == "encoder-decoder" and "min_new_tokens" not in out and shortest:
        if not isinstance(shortest, int) or isinstance(shortest, bool) or shortest < 0:
            raise PackageError(f"{where}: min_length must be an integer >= 0, got {shortest!r}")
        out["min_new_tokens"] = max(shortest - 1, 0)  # the decoder start counted
    try:
        GenerationOptions(**out)
    except (TypeError, ValueError) as e:
        raise PackageError(f"{where}: {e}") from None
    return out
