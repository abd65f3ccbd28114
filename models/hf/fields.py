"""Reading a Hugging Face config.json as its transformers config class reads it.

A key missing from config.json takes the class's default (each loader lists the defaults of the
keys it reads: `Loader.defaults`, checked against transformers by tests/models/test_hf_families.py);
every refusal names the field, its value and what works, and is a ValueError.
"""

from __future__ import annotations

from typing import Any

# rope_parameters keys the rotary scalings read (transformers' modeling_rope_utils); others are
# ignored there, and here
ROPE_KEYS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim", "truncate"),
    "longrope": ("short_factor", "long_factor", "factor", "attention_factor",
                 "original_max_position_embeddings"),
}  # fmt: skip


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Fields:
    """A config.json with its class's defaults; every refusal names the field and its value."""

    def __init__(self, hf: dict, arch: str, defaults: dict[str, Any]):
        self.hf, self.arch, self.defaults = hf, arch, defaults

    def bad(self, name: str, value: object, supported: str) -> ValueError:
        return ValueError(
            f"unsupported {self.arch} config: {name}={value!r} (edgeformer supports {supported})"
        )

    def get(self, name: str, default: object = None) -> object:
        """The value transformers would read: config.json's, else the class default."""
        if name in self.hf:
            return self.hf[name]
        return self.defaults.get(name, default)

    def positive(self, name: str, default: int | None = None) -> int:
        value = self.get(name, default)
        if not _is_int(value) or value < 1:  # type: ignore[operator]
            raise self.bad(name, value, "a positive integer")
        return value  # type: ignore[return-value]

    def optional_positive(self, name: str) -> int | None:
        return None if self.get(name) is None else self.positive(name)

    def number(self, name: str, default: float | None = None, positive: bool = True) -> float:
        value = self.get(name, default)
        if not _is_number(value) or (positive and not value > 0):  # type: ignore[operator]
            raise self.bad(name, value, "a positive number" if positive else "a number")
        return float(value)  # type: ignore[arg-type]

    def optional_number(self, name: str) -> float | None:
        return None if self.get(name) is None else self.number(name)

    def require(self, name: str, allowed: tuple, default: object = None) -> object:
        value = self.get(name, default)
        if value not in allowed:
            raise self.bad(name, value, " or ".join(repr(a) for a in allowed))
        return value

    def flag(self, name: str, default: bool = False) -> bool:
        return bool(self.require(name, (True, False), default))

    def token_ids(self, name: str, vocab: int) -> list[int]:
        """A token id or a list of them (eos_token_id), each in the vocabulary; [] for none."""
        value = self.get(name)
        if value is None:
            return []
        ids: list = value if isinstance(value, list) else [value]
        if not ids or not all(_is_int(i) and 0 <= i < vocab for i in ids):
            raise self.bad(name, value, f"token ids in [0, {vocab})")
        return list(dict.fromkeys(ids))

    def token_id(self, name: str, vocab: int) -> int | None:
        ids = self.token_ids(name, vocab)
        if len(ids) > 1:
            raise self.bad(name, self.get(name), "one token id")
        return ids[0] if ids else None

    def special_ids(self, vocab: int) -> dict[str, Any]:  # ints (Any: ModelConfig's **)
        """bos/eos/pad ids: eos_id is the first EOS id (the others end generation too: the
        loader's end_ids). Without a pad token (GPT-2, Llama) padding uses EOS: it is only a
        filler under the attention mask and never chosen as such."""
        eos = self.token_ids("eos_token_id", vocab)
        if not eos:
            raise self.bad("eos_token_id", self.get("eos_token_id"), "one token id or a list")
        bos = self.token_id("bos_token_id", vocab)
        bos = eos[0] if bos is None else bos
        pad = self.token_id("pad_token_id", vocab)
        if pad is None or (pad == bos and bos != eos[0]):
            pad = eos[0]
        return {"pad_id": pad, "bos_id": bos, "eos_id": eos[0]}

    def refuse_set(self, names: tuple[str, ...], supported: str) -> None:
        """Fields that must be absent, null or false."""
        for name in names:
            if self.get(name) not in (None, False):
                raise self.bad(name, self.get(name), supported)


def rope_settings(f: Fields, head_dim: int, max_len: int) -> dict[str, Any]:
    """ModelConfig's rotary fields (rope_theta, rotary_dim, rope_scaling) from a flat rope
    config, as transformers 5 reads it (RotaryEmbeddingConfigMixin): rope_parameters (or
    transformers 4's rope_scaling) with rope_theta and partial_rotary_factor inside or beside
    it; original_max_position_embeddings beside it wins (Phi-3). Per-layer-type (nested)
    rope_parameters are the loader's to split first (Gemma 3)."""
    name = "rope_scaling" if f.get("rope_scaling") is not None else "rope_parameters"
    params = f.get(name) or {}
    if not isinstance(params, dict):
        raise f.bad(name, params, "a JSON object")
    return rope_from(f, name, dict(params), head_dim, max_len)


def rope_from(f: Fields, name: str, params: dict, head_dim: int, max_len: int) -> dict[str, Any]:
    """rope_settings of one rope_parameters object (`name`: where it was, for messages)."""
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ("default", *ROPE_KEYS):
        raise f.bad(f"{name}.rope_type", kind, "'default', " + ", ".join(map(repr, ROPE_KEYS)))
    theta = params.get("rope_theta", f.get("rope_theta", 10000.0))
    if not _is_number(theta) or not theta > 0:
        raise f.bad("rope_theta", theta, "a positive number")
    partial = params.get("partial_rotary_factor", f.get("partial_rotary_factor", 1.0))
    if partial is None:
        partial = 1.0
    if not _is_number(partial) or not 0 < partial <= 1:
        raise f.bad("partial_rotary_factor", partial, "a number in (0, 1]")
    dims = int(head_dim * partial)
    if dims < 2 or dims % 2:
        raise f.bad("partial_rotary_factor", partial, f"an even number of the {head_dim} head dims")
    out: dict[str, Any] = {"rope_theta": float(theta), "rotary_dim": None, "rope_scaling": None}
    if dims != head_dim:
        out["rotary_dim"] = dims
    if kind == "default":
        return out
    scaling: dict[str, Any] = {"rope_type": kind}
    for key in ROPE_KEYS[kind]:
        if params.get(key) is not None:
            scaling[key] = params[key]
    if "original_max_position_embeddings" in ROPE_KEYS[kind]:
        top = f.hf.get("original_max_position_embeddings")
        if top is None:
            top = f.defaults.get("original_max_position_embeddings")
        if top is None:
            top = scaling.get("original_max_position_embeddings", max_len)
        scaling["original_max_position_embeddings"] = top
        if not _is_int(top) or top < 1:
            raise f.bad("original_max_position_embeddings", top, "a positive integer")
    if kind == "yarn" and scaling.get("factor") is None:  # DeepSeek-style: the ratio
        scaling["factor"] = max_len / scaling["original_max_position_embeddings"]
    for key in ("factor", "low_freq_factor", "high_freq_factor", "attention_factor"):
        if key in scaling and not (_is_number(scaling[key]) and scaling[key] > 0):
            raise f.bad(f"{name}.{key}", scaling[key], "a positive number")
    for key in ("short_factor", "long_factor"):
        if key in ROPE_KEYS[kind]:
            value = scaling.get(key)
            if not (isinstance(value, list) and len(value) == dims // 2
                    and all(_is_number(v) and v > 0 for v in value)):  # fmt: skip
                raise f.bad(f"{name}.{key}", value, f"{dims // 2} positive numbers")
    out["rope_scaling"] = scaling
    return out
