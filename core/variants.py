"""Which variant `variant="auto"` runs: the fastest one export measured within the quality bounds.

Export records per variant (schema.VariantEntry.measured) its agreement with PyTorch's golden run,
its ms/token on the export machine and, for a checkpoint trained on the bundled data, held-out
BLEU / perplexity. The bounds below are the project's: held-out quality within MAX_BLEU_LOSS /
MAX_PERPLEXITY_INCREASE of fp32's where it was measured, else agreement >= 1 - MAX_QUALITY_LOSS.
"""

from __future__ import annotations

from .format import WEB_VARIANTS
from .schema import HELD_OUT_KEYS, PackageConfig

# variant="auto": the largest quality loss (1 - agreement with PyTorch's golden run) accepted
# by default where held-out quality was not measured (pick_variant)
MAX_QUALITY_LOSS = 0.05
# ... and, where held-out quality was measured, the project's bounds against fp32's
MAX_BLEU_LOSS = 0.5  # BLEU points
MAX_PERPLEXITY_INCREASE = 0.03  # relative
# speed ties: variants within this fraction of the fastest's ms/token count as equally fast, and
# the first of them in PREFERENCE runs. One export's timings move by a few percent from run to
# run on a busy machine; without a margin, `auto` picked int8 in one export of a checkpoint and
# fp32 in the next (2026-11-29)
SPEED_MARGIN = 0.10
PREFERENCE = ("fp32", "gguf", "int8", "int8-dynamic", "int4")  # the more exact first


def held_out_loss(measured: dict[str, dict[str, float]], variant: str) -> str | None:
    """Why `variant`'s held-out quality is outside the project's bounds against fp32 (None: it
    is within them, or nothing was measured)."""
    m, ref = measured[variant], measured.get("fp32", {})
    if "bleu" in m and "bleu" in ref and ref["bleu"] - m["bleu"] > MAX_BLEU_LOSS:
        return f"BLEU {m['bleu'] - ref['bleu']:+.2f} (bound -{MAX_BLEU_LOSS})"
    if "perplexity" in m and "perplexity" in ref:
        rise = m["perplexity"] / ref["perplexity"] - 1
        if rise > MAX_PERPLEXITY_INCREASE:
            return f"perplexity {rise:+.1%} (bound +{MAX_PERPLEXITY_INCREASE:.0%})"
    return None


def pick_variant(config: PackageConfig, max_quality_loss: float | None = None) -> tuple[str, str]:
    """(variant, why) for variant="auto": the fastest variant export measured within the quality
    bounds; fp32 when nothing was measured (a package exported before measurements) or nothing
    else qualifies.

    The bounds: held-out BLEU / perplexity, where export measured them (a checkpoint trained on
    the bundled data), within MAX_BLEU_LOSS / MAX_PERPLEXITY_INCREASE of fp32's; and the loss
    1 - agreement with PyTorch on golden.json at most `max_quality_loss`. None (the default):
    held-out quality alone decides where it was measured (agreement on three short inputs is a
    coarse proxy that a variant inside the BLEU bound can fail), agreement at most
    MAX_QUALITY_LOSS where it was not."""
    if max_quality_loss is not None and not 0 <= max_quality_loss <= 1:
        raise ValueError(f"max_quality_loss={max_quality_loss} must be in [0, 1]")
    measured = {
        k: v.measured for k, v in config.variants.items() if v.measured and k not in WEB_VARIANTS
    }
    if "fp32" not in measured:
        return "fp32", "no export measurements in this package: fp32"
    held = {k: held_out_loss(measured, k) for k in measured}
    has_held_out = any(key in measured["fp32"] for key in HELD_OUT_KEYS)
    bound = max_quality_loss
    if bound is None:
        bound = 1.0 if has_held_out else MAX_QUALITY_LOSS

    def agreement_loss(k: str) -> str | None:  # why k fails the agreement bound
        loss = 1 - measured[k]["agreement"]
        return f"1 - agreement {loss:.3f}" if loss > bound + 1e-12 else None

    why_not = {k: held[k] or agreement_loss(k) for k in measured}
    ok = {k: m for k, m in measured.items() if why_not[k] is None}
    if not ok:  # fp32 itself failed its agreement bound (it disagreed with PyTorch at export)
        return "fp32", f"no variant within the bounds ({why_not['fp32']}): fp32"
    best = fastest_within_margin({k: m["ms_per_token"] for k, m in ok.items()})
    left = sorted(set(measured) - set(ok))
    others = "; too lossy: " + ", ".join(f"{k} {why_not[k]}" for k in left) if left else ""
    rules = []
    if has_held_out:
        key = next(k for k in HELD_OUT_KEYS if k in measured["fp32"])
        name, bound_text = ("BLEU", f"-{MAX_BLEU_LOSS}") if key == "bleu" else (
            "perplexity", f"+{MAX_PERPLEXITY_INCREASE:.0%}"
        )  # fmt: skip
        value = f"{ok[best][key]:.2f} " if key in ok[best] else ""
        rules.append(
            f"held-out {name} {value}against fp32's {measured['fp32'][key]:.2f} "
            f"(bound {bound_text})"
        )
    if bound < 1:
        rules.append(f"1 - agreement with PyTorch <= {bound:g} ({1 - ok[best]['agreement']:.3f})")
    within = " and ".join(rules) or "no quality bound"
    fastest = min(ok, key=lambda k: ok[k]["ms_per_token"])
    tie = (
        f", within {SPEED_MARGIN:.0%} of {fastest}'s {ok[fastest]['ms_per_token']:.3f}"
        if fastest != best else ""
    )  # fmt: skip
    why = (
        f"{best}: fastest at export ({ok[best]['ms_per_token']:.3f} ms/token{tie}) with "
        f"{within}{others}"
    )
    return best, why


def fastest_within_margin(ms_per_token: dict[str, float]) -> str:
    """The variant `auto` runs among those within the bounds: of the ones within SPEED_MARGIN of
    the fastest, the first in PREFERENCE (then by name)."""
    fastest = min(ms_per_token.values())
    tied = [k for k, ms in ms_per_token.items() if ms <= fastest * (1 + SPEED_MARGIN)]
    order = {k: i for i, k in enumerate(PREFERENCE)}
    return min(tied, key=lambda k: (order.get(k, len(order)), k))
