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


def generation_settings(data: object, config: PackageConfig, where: str) -> dict:
    """generation_config.json -> {GenerationOptions field: value} for the fields it sets (see
    GENERATION_FIELDS; eos_token_id lists add end tokens; other fields are ignored), checked:
    settings GenerationOptions refuses are a PackageError naming `where`."""
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
    try:
        GenerationOptions(**out)
    except (TypeError, ValueError) as e:
        raise PackageError(f"{where}: {e}") from None
    return out
