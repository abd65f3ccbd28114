"""A loaded package: its sessions, tokenizers, special ids and default decoding options.

Translator and Generator (runtime.api) are the text API over a Model; export's parity check and
`edgeformer verify` use a Model directly. `Model.prepare` turns a request's options into what
the decoding loop runs, once per request: the package's defaults under the caller's options,
texts and token strings as ids, and max_new_tokens fitted to the model's positions.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import threading
import warnings
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import onnxruntime as ort

from ..core.config import ModelConfig
from ..core.constraints import end_ids
from ..core.format import (
    ATTENTION_HEAD_SIZE_KEY,
    GENERATION_CONFIG_FILE,
    INDEXED_LOGITS,
    METADATA_PREFIX,
    SOURCE_TOKENIZER_FILE,
    TOKENIZER_FILE,
    graph_metadata,
    graph_names,
)
from ..core.languages import TranslationTask
from ..core.options import GenerationOptions, PreparedOptions, prepare_options
from ..core.schema import PackageError
from ..core.variants import pick_variant
from .chat import ChatTemplate, ChatTemplateError, chat_template_of
from .package import Package, load_package
from .session import PROVIDERS, RuntimeSettings, SessionSettings
from .steppers import Graph
from .structured import Grammars, compile_constraint
from .tokenizer import check_probe, guarded, load_tokenizer

T = TypeVar("T")
OPTION_NAMES = tuple(f.name for f in dataclasses.fields(GenerationOptions))


def make_options(opts: GenerationOptions | None = None, **options) -> GenerationOptions:
    """GenerationOptions from keyword options on top of `opts` (a package's defaults); unknown
    names: ValueError. Asking for sampling without num_beams turns a default beam search off."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"unknown generation option(s) {unknown}; valid: {list(OPTION_NAMES)}")
    if not options and opts is not None:  # the defaults as they are (validated when made)
        return opts
    if options.get("sampling") and "num_beams" not in options:
        options["num_beams"] = 1
    return dataclasses.replace(opts or GenerationOptions(), **options)


def pad(seqs: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Id lists -> right-padded (B, T) int64 ids and 0/1 mask."""
    T = max(len(s) for s in seqs)
    ids = np.full((len(seqs), T), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), T), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = s, 1
    return ids, mask


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def check_onnxruntime(pkg: Package) -> None:
    """The package's min_onnxruntime, enforced before any graph is loaded."""
    if _version(ort.__version__) < _version(pkg.config.min_onnxruntime):
        raise PackageError(
            f"model package {pkg.path} needs onnxruntime >= {pkg.config.min_onnxruntime}; "
            f"this is {ort.__version__} (pip install -U onnxruntime)"
        )


def cpu_only(provider: str) -> str:
    """Format-2 packages decode on the CPU provider.

    Their self-attention is GroupQueryAttention, which onnxruntime's CUDA provider runs for
    float16/bfloat16 only (an fp32 graph would run it on the CPU, copying the cache across every
    step), and no float16 variant is exported yet. `auto` therefore means the CPU, and `cuda` is
    an error rather than a silent fallback.
    """
    if provider not in PROVIDERS:
        raise ValueError(f"provider={provider!r}, expected one of {PROVIDERS}")
    if provider == "cuda":
        raise ValueError(
            "provider 'cuda': this package's graphs decode on the CPU provider only "
            "(GroupQueryAttention has no float32 CUDA kernel and no float16 variant is exported "
            "yet); use provider 'cpu' or 'auto'"
        )
    return "cpu"


def check_graph_sizes(pkg: Package, graphs: dict[str, Graph]) -> None:
    """config.json's sizes against the graphs, before anything runs: the sizes each graph
    records in its metadata (exports since 2026-11-25) and the fixed dims of its inputs and
    outputs (every package), whose head size is the one the graph records (its attention's,
    zero-padded) or else the model's. PackageError naming the size and both values."""
    m, where = pkg.config.model, f"model package {pkg.path}"
    H, G, V = m.n_heads, m.kv_heads, m.vocab_size
    want = graph_metadata(m)
    for name, graph in graphs.items():
        stored = graph.session.get_modelmeta().custom_metadata_map
        for key, value in want.items():
            if key in stored and stored[key] != value:
                field = key[len(METADATA_PREFIX) :]
                raise PackageError(
                    f"{where}: config.json's model.{field} is {value} but the {name} graph was "
                    f"built for {stored[key]}"
                )
        own = f"{METADATA_PREFIX}src_vocab_size"  # written only for a separate one
        if own in stored and own not in want:
            raise PackageError(
                f"{where}: the {name} graph was built for a source vocabulary of "
                f"{stored[own]} but config.json has no model.src_vocab_size"
            )
        head = stored.get(ATTENTION_HEAD_SIZE_KEY, str(m.head_dim))  # padded for the op
        if not (head.isdigit() and int(head) >= m.head_dim):
            raise PackageError(
                f"{where}: the {name} graph's attention head size is {head!r}, the config's "
                f"head dim is {m.head_dim} (model.hidden_size / model.num_attention_heads)"
            )
        D = int(head)
        ios = [*graph.session.get_inputs(), *graph.session.get_outputs()]
        for io in ios:
            expected = _fixed_dims(io.name, H, G, D, V)
            for axis, size in expected.items():
                got = io.shape[axis] if axis < len(io.shape) else None
                if isinstance(got, int) and got != size:
                    raise PackageError(
                        f"{where}: config.json's sizes disagree with the {name} graph: "
                        f"{io.name} has shape {io.shape}, the config gives {size} at axis {axis}"
                    )


def _fixed_dims(name: str, H: int, G: int, D: int, V: int) -> dict[int, int]:
    """{axis: size} that an input or output of this name must have (format.io_names)."""
    if name in ("logits", INDEXED_LOGITS):
        return {1: V}
    if name.endswith((".last_key", ".last_value")):
        return {2: H * D}
    if ".encoder." in name:
        return {1: H, 3: D}
    if name.endswith((".key", ".value")):  # the self-attention cache
        return {1: G, 3: D}
    return {}


# one-row requests run the encoder on one thread when its weights are at most this many
# (docs/design-notes.md, 2026-11-27): measured faster on 2 cores up to 120-token sources
ONE_THREAD_ENCODER_MAX_PARAMS = 8_000_000


def one_thread_encoder(settings: SessionSettings, m: ModelConfig) -> bool:
    """Whether a Translator gets a one-thread encoder session for one-row requests: our own CPU
    sessions on several threads, and an encoder small enough that one core runs it faster."""
    if settings.options is not None or settings.providers is not None:
        return False  # the caller's sessions, as configured
    if (settings.threads or os.cpu_count() or 1) == 1:
        return False
    d, ff = m.d_model, m.d_ff
    params = m.source_vocab * d + m.n_encoder_layers * (4 * d * d + 2 * d * ff)
    return params <= ONE_THREAD_ENCODER_MAX_PARAMS


class Model:
    """A loaded package: sessions for every graph of a variant, tokenizer, special ids."""

    def __init__(
        self,
        package_path: str | os.PathLike,
        family: str,
        settings: RuntimeSettings | None = None,
    ):
        runtime = settings or RuntimeSettings()  # checked when made
        sessions = runtime.sessions()
        pkg: Package = load_package(package_path)
        variant, self.variant_reason = runtime.variant, "asked for"
        if variant == "auto":  # export's measurements decide (core.variants.pick_variant)
            variant, self.variant_reason = pick_variant(pkg.config, runtime.max_quality_loss)
        if pkg.family != family:
            use = "Translator" if pkg.family == "encoder-decoder" else "Generator"
            raise PackageError(
                f"model package {pkg.path} is {pkg.family}, not {family}: use {use} "
                f"(edgeformer {'translate' if use == 'Translator' else 'generate'})"
            )
        provider = cpu_only(runtime.provider)
        self.settings = runtime
        self.package, self.family, self.variant = pkg, family, variant
        check_onnxruntime(pkg)
        self.config = pkg.config
        self.n_layers, self.max_len = self.config.model.n_decoder_layers, self.config.model.max_len
        # generation_config.json: the package's default decoding settings (fields it sets)
        self.default_settings, ignored = pkg.generation_settings()  # checked there
        self.defaults = GenerationOptions(**self.default_settings)
        if ignored:
            warnings.warn(
                f"{GENERATION_CONFIG_FILE} of {pkg.path.name}: edgeformer does not apply "
                f"{', '.join(ignored)}",
                stacklevel=3,
            )
        special = self.config.special_tokens
        self.pad_id, self.bos_id, self.eos_id = special.pad_id, special.bos_id, special.eos_id
        where, vocab = f"model package {pkg.path}", self.config.model.vocab_size
        # the encoder's vocabulary (its own: src_vocab_size, OPUS-MT tc-big) and the id that
        # pads sources, one of it (masked: pad_id unless that is beyond it)
        self.source_vocab = self.config.model.source_vocab
        self.source_pad_id = self.config.model.source_pad_id
        self.tokenizer = load_tokenizer(pkg.path / TOKENIZER_FILE, vocab, where)
        self._grammars: Grammars | None = None  # structured output's (built when first asked)
        self._grammars_lock = threading.Lock()
        # the sources' own tokenizer (source_tokenizer.json: converted Marian models), or the same
        source = pkg.source_tokenizer
        own = source.name != TOKENIZER_FILE
        if not own and self.source_vocab != vocab:
            raise PackageError(
                f"{where}: model.src_vocab_size is {self.source_vocab} (the sources' own "
                f"vocabulary) but the package has no {SOURCE_TOKENIZER_FILE}"
            )
        self.source_tokenizer = (
            load_tokenizer(source, self.source_vocab, where) if own else self.tokenizer
        )
        # a translator's source frame and languages (config.json's task), and the token its
        # generation config forces first (forced_bos_token_id: BART's <s>)
        self.translation = TranslationTask.from_task(
            self.config.task, self.eos_id, vocab, where, self.source_vocab
        )
        self.forced_first = pkg.forced_first_token() if family == "encoder-decoder" else None
        tokenizers = {TOKENIZER_FILE: self.tokenizer, source.name: self.source_tokenizer}
        for probe in pkg.probes():  # export's: each tokenizer encodes as it did then
            if probe["file"] in tokenizers:
                check_probe(tokenizers[probe["file"]], probe, where)
        names = self.config.graphs  # io_names of its format, checked by load_package
        self.graphs: dict[str, Graph] = {}
        for graph in graph_names(family):
            try:
                sess = sessions.session(pkg.file(graph, variant), graph)
            except ValueError:
                raise
            except Exception as e:  # onnxruntime refused the graph (corrupt, escaping data, ...)
                raise PackageError(
                    f"model package {pkg.path}: onnxruntime cannot load the {variant} {graph} "
                    f"graph: {str(e).splitlines()[0][:300]}"
                ) from None
            inputs = [i.name for i in sess.get_inputs()]
            outputs = [o.name for o in sess.get_outputs()]
            want = names[graph]
            if sorted(inputs) != sorted(want["inputs"]) or sorted(outputs) != sorted(
                want["outputs"]
            ):
                raise PackageError(
                    f"model package {pkg.path}: {graph} graph's inputs/outputs do not match "
                    f"the package contract (inputs {inputs}, outputs {outputs})"
                )
            self.graphs[graph] = Graph(sess)
        check_graph_sizes(pkg, self.graphs)
        if family == "encoder-decoder" and one_thread_encoder(sessions, self.config.model):
            path = pkg.file("encoder", variant)
            self.graphs["encoder"].one_row = sessions.one_thread().session(path, "encoder")
        # what the sessions run on: "cpu", or the providers asked for (onnxruntime's names)
        self.provider = (
            provider
            if sessions.providers is None
            else ",".join(self.graphs["decoder"].session.get_providers())
        )

    def options(self, **options) -> GenerationOptions:
        """Keyword options on top of the package's defaults (make_options)."""
        return make_options(self.defaults, **options)

    @functools.cached_property
    def chat_template(self) -> ChatTemplate | None:
        """The model's chat template (tokenizer_config.json), compiled at first use; None for
        a package without one."""
        try:
            return chat_template_of(self.package.tokenizer_config())
        except ChatTemplateError as e:
            raise PackageError(f"model package {self.package.path}: {e}") from None

    def encode_prompt(self, text: str) -> list[int]:
        """A language model's prompt ids as its tokenizer makes them, special tokens included
        (a converted Llama's BOS: its tokenizer.json's post-processor; transformers' default)."""
        encode = self.tokenizer.encode
        return self.guard(lambda: encode(text, add_special_tokens=True).ids, TOKENIZER_FILE)

    def encode(self, text: str) -> list[int]:
        """Target-side ids (LM prompts, target prefixes, suppress_sequences, targets)."""
        encode = self.tokenizer.encode
        return self.guard(lambda: encode(text, add_special_tokens=False).ids, TOKENIZER_FILE)

    def encode_source(self, text: str) -> list[int]:
        """Source ids (a translation's input), with the source tokenizer."""
        encode = self.source_tokenizer.encode
        file = self.package.source_tokenizer.name
        return self.guard(lambda: encode(text, add_special_tokens=False).ids, file)

    def guard(self, call: Callable[[], T], file: str) -> T:
        """call() under tokenizer.guarded: a panic of the tokenizers library is a PackageError."""
        return guarded(call, file, f"model package {self.package.path}")

    def decode(self, ids: list[int]) -> str:
        decode = self.tokenizer.decode
        return self.guard(lambda: decode(ids, skip_special_tokens=True), TOKENIZER_FILE)

    def prepare(
        self,
        opts: GenerationOptions,
        room: int,
        warn: WarnOnce | None = None,
        sliding_hint: bool = False,
    ) -> PreparedOptions:
        """What the decoding loop runs for one request: `opts` (the package's defaults under the
        caller's options, make_options) checked against this model by core.options'
        prepare_options: texts and token strings as ids (texts encoded alone, as the tokenizer
        encodes them; a token string must be in the vocabulary, or be digits: an id), ids
        outside the vocabulary a ValueError, max_new_tokens fitted to the `room` the model's
        positions leave; a number asked for that does not fit is cut, with a warning once per
        object."""
        asked = opts.max_new_tokens
        vocab = self.tokenizer.get_vocab_size()
        prepared, cut = prepare_options(opts, vocab, room, self.encode, self.tokenizer.token_to_id)
        if cut and warn is not None:
            assert asked is not None and prepared.max_new_tokens is not None
            warn.cut(asked, prepared.max_new_tokens, self.max_len, sliding_hint)
        if prepared.constraint() is not None:  # a JSON schema, regex or grammar: checked now
            ends = end_ids(prepared, self.eos_id)
            factory = compile_constraint(prepared, self.grammars(), ends)
            prepared.logits_processors = (factory,)
        return prepared

    def grammars(self) -> Grammars:
        """The tokenizer as llguidance reads it (built on the first constrained request)."""
        with self._grammars_lock:
            if self._grammars is None:
                tok = self.tokenizer
                special = [i for i, t in tok.get_added_tokens_decoder().items() if t.special]
                self._grammars = Grammars(tok.to_str(), tok.get_vocab_size(), self.eos_id, special)
            return self._grammars


class WarnOnce:
    """The max_new_tokens cut warning, given once per Translator / Generator object."""

    def __init__(self) -> None:
        self.lock, self.done = threading.Lock(), False

    def cut(self, asked: int, n: int, max_len: int, sliding_hint: bool = False) -> None:
        if n >= asked:
            return
        with self.lock:
            if self.done:
                return
            self.done = True
        hint = (
            "; sliding_window=True (--sliding-window) goes on by re-encoding the last "
            f"{max(1, max_len // 2)} tokens"
            if sliding_hint
            else ""
        )
        warnings.warn(
            f"max_new_tokens={asked} cut to {n}: the model's positions end at max_len {max_len}"
            f"{hint} (warned once per object)",
            stacklevel=4,
        )
