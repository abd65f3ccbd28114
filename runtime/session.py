"""How a package runs (RuntimeSettings) and the one session factory (CPU provider, threads and
spinning: SessionSettings).

RuntimeSettings is the one declaration of variant, threads, provider, spinning and the quality
bound of variant="auto": Translator / Generator take it (settings=, or its fields as keyword
arguments), the commands' runtime flags are derived from it (core.flags) and `edgeformer serve`
holds one (ServeConfig.runtime). Packages decode on the CPU provider (runtime.model.cpu_only
says why); PROVIDERS are the names a caller may ask for.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import onnxruntime as ort

from ..core.contract import check_threads
from ..core.flags import ON_OFF, doc
from ..core.format import VARIANTS
from ..core.variants import MAX_QUALITY_LOSS

PROVIDERS = ("auto", "cpu", "cuda")
CPU = "CPUExecutionProvider"


# Which sessions' idle intra-op threads spin by default: the decoder's, called step after step,
# keeps its threads hot; the encoder's, called once per request, must not spin while the decoder
# works (on 2 cores, two spinning pools made decoding up to 2.3x slower: docs/design-notes.md,
# 2026-11-23: session options).
SPINNING = {"decoder": True, "encoder": False}
NO_FUSION = "SkipLayerNormFusion"


def session_options(threads: int | None, spinning: bool | None) -> ort.SessionOptions:
    """threads: intra-op threads (None: onnxruntime's default, one per physical core).
    spinning: let idle intra-op threads spin (None: off, unless a caller passes its default)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.inter_op_num_threads = 1
    if threads is not None:
        so.intra_op_num_threads = check_threads(threads)
    spin = bool(spinning)
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    # the graphs write residual Add + LayerNormalization unfused on purpose (export.builder
    # Builder.skip_norm): onnxruntime's fusion would bring back the slower SkipLayerNormalization
    so.add_session_config_entry("optimization.disable_specified_optimizers", NO_FUSION)
    so.log_severity_level = 3  # errors only (create_session follows the edgeformer log level)
    return so


Providers = Sequence[str | tuple[str, dict]]


@dataclass(frozen=True)
class SessionSettings:
    """How a package's sessions are made (Translator / Generator keyword arguments)."""

    threads: int | None = None  # intra-op threads; None: onnxruntime's default (physical cores)
    spinning: bool | None = None  # idle intra-op threads spin; None: per graph (SPINNING)
    options: ort.SessionOptions | None = None  # a caller's SessionOptions, used as given
    providers: Providers | None = None  # onnxruntime providers; None: the CPU provider

    def __post_init__(self) -> None:
        if self.threads is not None:
            check_threads(self.threads)
        if self.options is not None and (self.threads is not None or self.spinning is not None):
            raise ValueError(
                "session_options given together with threads / spinning: set intra-op threads "
                "and 'session.intra_op.allow_spinning' on your SessionOptions instead"
            )
        if self.options is not None and not isinstance(self.options, ort.SessionOptions):
            raise ValueError(
                f"session_options must be an onnxruntime.SessionOptions, got "
                f"{type(self.options).__name__}"
            )
        if self.providers is not None:
            if isinstance(self.providers, str) or not self.providers:
                raise ValueError(
                    f"providers={self.providers!r}: expected a non-empty list of onnxruntime "
                    "provider names or (name, options) pairs"
                )
            known = ort.get_available_providers()
            for p in self.providers:
                name = p[0] if isinstance(p, tuple) else p
                if name not in known:
                    raise ValueError(
                        f"provider {name!r} is not available in this onnxruntime "
                        f"({ort.__version__}: {', '.join(known)})"
                    )

    def one_thread(self) -> SessionSettings:
        """These settings on one intra-op thread (a small encoder's one-row runs)."""
        return dataclasses.replace(self, threads=1)

    def session(self, path: str | os.PathLike, graph: str) -> ort.InferenceSession:
        spinning = SPINNING[graph] if self.spinning is None else self.spinning
        return create_session(path, self.threads, spinning, self.options, self.providers)


RUNNING = ("translate", "generate", "serve")  # the commands with every runtime flag


@dataclass(frozen=True)
class RuntimeSettings:
    """How a package runs: which variant, on how many threads, which provider, whether idle
    threads spin, the quality bound of variant="auto". The one declaration: Translator /
    Generator take it (settings=RuntimeSettings(...), or these fields as keyword arguments),
    the commands' --variant / --threads / --provider / --spinning / --max-quality-loss flags are
    its fields (core.flags, these help texts), `edgeformer serve` runs every package with one.
    Checked when made (a ValueError naming the field); the variant's name is checked against
    the package when it loads."""

    variant: str = doc(
        "fp32", "which of the package's variants runs; auto: the fastest export measured within "
        "the quality bounds (edgeformer info shows its choice)", choices=(*VARIANTS, "auto"),
    )  # fmt: skip
    threads: int | None = doc(
        None, "onnxruntime intra-op threads", metavar="N", shown="one per core"
    )
    provider: str = doc(
        "auto", "onnxruntime execution provider; auto is the CPU provider, the one the "
        "package's graphs are built for", choices=("auto", "cpu"), commands=RUNNING,
    )  # fmt: skip
    spinning: bool | None = doc(
        None, "let idle onnxruntime threads spin between calls", choices=ON_OFF,
        shown="on for the decoder, off for the encoder: measured fastest", commands=RUNNING,
    )  # fmt: skip
    max_quality_loss: float | None = doc(
        None, "--variant auto: the largest 1 - agreement with PyTorch accepted", metavar="X",
        shown="none where export measured held-out quality, whose bounds decide; else "
        f"{MAX_QUALITY_LOSS}", commands=RUNNING,
    )  # fmt: skip
    # the Python API's only (no flags): a caller's onnxruntime SessionOptions / providers
    session_options: ort.SessionOptions | None = None
    providers: Providers | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.variant, str) or not self.variant:
            raise ValueError(f"variant={self.variant!r} must be a variant's name or 'auto'")
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider={self.provider!r}, expected one of {PROVIDERS}")
        if self.spinning is not None and not isinstance(self.spinning, bool):
            raise ValueError(f"spinning={self.spinning!r} must be True, False or None")
        loss = self.max_quality_loss
        if loss is not None and (
            isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 <= loss <= 1
        ):
            raise ValueError(f"max_quality_loss={loss!r} must be a number in [0, 1]")
        if self.providers is not None and self.provider != "auto":
            raise ValueError(f"provider={self.provider!r} and providers=[...] given: choose one")
        self.sessions()  # threads, session options and providers, checked there

    def sessions(self) -> SessionSettings:
        """How this package's sessions are made."""
        return SessionSettings(self.threads, self.spinning, self.session_options, self.providers)


def runtime_settings(settings: RuntimeSettings | None = None, **fields: object) -> RuntimeSettings:
    """`settings`, or RuntimeSettings of the keyword arguments that are not None (Translator /
    Generator's: variant=..., threads=..., the fields' names); both: a ValueError."""
    given = {k: v for k, v in fields.items() if v is not None}
    if settings is None:
        return RuntimeSettings(**given)  # type: ignore[arg-type]
    if not isinstance(settings, RuntimeSettings):
        raise ValueError(f"settings must be a RuntimeSettings, got {type(settings).__name__}")
    if given:
        raise ValueError(
            f"settings=RuntimeSettings(...) and {', '.join(f'{k}=' for k in given)} given: put "
            "them in the settings"
        )
    return settings


def ort_log_severity(level: int) -> int:
    """onnxruntime's log severity for a `logging` level: its warnings at DEBUG only (at INFO
    they would bury edgeformer's own lines under graph-optimizer notices)."""
    return 2 if level <= logging.DEBUG else 3


def create_session(
    path: str | os.PathLike,
    threads: int | None = None,
    spinning: bool | None = None,
    options: ort.SessionOptions | None = None,
    providers: Providers | None = None,
) -> ort.InferenceSession:
    """A session over the graph at `path`: the CPU provider and our options by default.

    options: a caller's SessionOptions, used as given (plain onnxruntime's contract; threads and
    spinning are then its own business). providers: onnxruntime provider names or (name,
    options) pairs, in priority order, as `ort.InferenceSession(providers=...)` takes them."""
    if options is None:
        options = session_options(threads, spinning)
        options.log_severity_level = ort_log_severity(
            logging.getLogger("edgeformer").getEffectiveLevel()
        )
    return ort.InferenceSession(str(path), options, providers=list(providers or [CPU]))
