"""The step loop: runs a package's decoder graph one step at a time (see decoding.Stepper).

The KV cache is one preallocated (N, G, M, D) buffer per layer and kind (G key/value heads),
bound through IO binding as both the graph's `past_key_values.*` input and its `present.*`
output: GroupQueryAttention writes each new key/value in place, so a step copies no cache. Only the
new token ids, positions and the rows' lengths go in (format 5's encoder-decoder step: as
GroupQueryAttention's int32 seqlens_k / total_sequence_length, written in place into buffers bound
once; an LM's and older packages' step: a small mask); only the (N, V) logits come out, into a
preallocated array. An encoder-decoder's cross K/V (format 4) are bound the same way: the
cross-attention's GQA writes each row's last source K/V back where they already are.
`select` (finished rows dropped, beams reordered) gathers the filled prefix of each buffer by
row index; the encoder's cross K/V are re-gathered only when the batch rows they belong to
change (never between beams of the same source).

A one-row request's decoder is given back when its request ends and taken by the next one-row
request (`take_decoder` / `give_back`: one pool per decoder graph, shared by threads): batch-1
latency pays neither its buffers nor most of its bindings again, only the new cross K/V. Its
buffers hold a power of two of positions (>= 256), what the request needs, not the model's whole
context: a longer request takes a larger one.

One loop for every caller: the runtime's Translator / Generator, export's parity check and
the benchmark all decode through `start_encoder_decoder` / `start_decoder_only`.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from ..core.format import (
    ATTENTION_HEAD_SIZE_KEY,
    ED_LENGTHS,
    INDEXED_LOGITS,
    LOGITS_3D,
    LOGITS_INDEX,
    cache_names,
)  # fmt: skip
from ..core.schema import PackageConfig


@dataclass
class Graph:
    """One graph's session (CPU provider: see api.cpu_only)."""

    session: ort.InferenceSession
    # an encoder's session on one intra-op thread for one-row runs (Model: small encoders),
    # the latency setting: handing each small kernel to other threads costs more than it gains
    one_row: ort.InferenceSession | None = None
    # a decoder graph's one-row CachedDecoders between requests (take_decoder / give_back):
    # batch-1 latency skips their buffers and most bindings
    idle: list[CachedDecoder] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @functools.cached_property
    def has_logits_3d(self) -> bool:
        """An LM decoder of format 3 (also returns the logits as (B, 1, V))."""
        return LOGITS_3D in self.output_names

    @functools.cached_property
    def verifies(self) -> bool:
        """An LM decoder of format 6+: returns the logits after several new tokens of a call
        (indexed_logits; CachedDecoder.verify)."""
        return INDEXED_LOGITS in self.output_names

    @functools.cached_property
    def takes_lengths(self) -> bool:
        """An encoder-decoder step of format 5+: fed GroupQueryAttention's lengths, no masks."""
        return ED_LENGTHS[0] in {i.name for i in self.session.get_inputs()}

    @functools.cached_property
    def output_names(self) -> tuple[str, ...]:
        """The graph's outputs, in its order (what `run` returns)."""
        return tuple(o.name for o in self.session.get_outputs())

    @functools.cached_property
    def head_size(self) -> int | None:
        """The head size of its attention and K/V tensors as its metadata records it (the
        model's head dim zero-padded: core.format.attention_head_size); None: not recorded
        (graphs exported before 2026-11-27: the model's head dim)."""
        value = self.session.get_modelmeta().custom_metadata_map.get(ATTENTION_HEAD_SIZE_KEY)
        return None if value is None else int(value)

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Plain run (the encoder): outputs in the graph's order, on the host; one row on
        `one_row` when there is one."""
        if self.one_row is not None and len(feed["input_ids"]) == 1:
            return self.one_row.run(None, feed)
        return self.session.run(None, feed)


def _ortvalue(a: np.ndarray) -> ort.OrtValue:
    """An OrtValue over `a`'s memory (no copy): keep `a` alive while it is bound."""
    return ort.OrtValue.ortvalue_from_numpy(a)


class CachedDecoder:
    """The decoder graph over preallocated caches; implements decoding.Stepper.

    lengths[i]: tokens in row i's cache. Row i's cache positions 0 .. lengths[i] - 1 are valid.
    """

    def __init__(
        self,
        graph: Graph,
        family: str,
        n_layers: int,
        n_kv_heads: int,  # G: heads of the cache (grouped-query attention)
        head_dim: int,  # the model's; the cache's is the graph's (zero-padded) head_size
        capacity: int,  # M: the longest sequence (prompt + new tokens) this call can reach
        batch: int,
        static: dict[str, np.ndarray] | None = None,  # ED: source lengths or mask, cross K/V
    ):
        self.graph = graph
        self.names = cache_names(family, n_layers)
        self.shape = (n_kv_heads, capacity, graph.head_size or head_dim)
        self.rows = batch  # rows allocated in the buffers
        self.buffers = {n: np.zeros((batch, *self.shape), np.float32) for n in self.names}
        self.n = batch  # rows in use
        # lengths.max(), and whether every row is that long (batch 1 always): kept as Python
        # values so that a step needs no reduction over the rows; the lengths array itself is
        # made only when read while rows are uniform (see `lengths`)
        self.longest, self.uniform = 0, True
        self._lengths: np.ndarray | None = None
        self.ones = np.ones(batch * capacity, dtype=np.int64)  # masks of uniform rows: views
        self.source = np.arange(batch)  # original batch row of each row
        self._set_static(static)
        self.reusable = False  # take_decoder's one-row decoders: given back for the next request
        self.io = graph.session.io_binding()
        # a step's (N, 1) token ids and positions: written in place into buffers bound once
        # (after each _bind_state); a step binds nothing more (format 5's ED step: its lengths
        # are bound with the state) or its attention mask (an LM, and format 4)
        self.step_ids = np.zeros((batch, 1), dtype=np.int64)
        self.step_positions = np.zeros((batch, 1), dtype=np.int64)
        self.step_bound = False
        # format 5's ED step: its seqlens_k (N,) and total_sequence_length (), bound with the
        # state and written in place by each call (no mask)
        self.takes_lengths = graph.takes_lengths
        self.seqlens_k = np.zeros(batch, dtype=np.int32)
        self.total = np.zeros((), dtype=np.int32)
        self._bind_state()

    @property
    def lengths(self) -> np.ndarray:  # (N,) int64
        if self._lengths is None:  # uniform rows: all `longest` long
            self._lengths = np.full(self.n, self.longest, dtype=np.int64)
        return self._lengths

    @lengths.setter
    def lengths(self, value: np.ndarray) -> None:
        self._lengths = value

    # -- binding -------------------------------------------------------------------------------
    def _bind_state(self) -> None:
        """Bind cache buffers (in place: past = present), static inputs and the logits array."""
        n, io = self.n, self.io
        for name in self.names:
            value = _ortvalue(self.buffers[name][:n])
            io.bind_ortvalue_input(name, value)
            io.bind_ortvalue_output(name.replace("past_key_values", "present", 1), value)
        self._bind_static()
        if self.takes_lengths:
            io.bind_ortvalue_input(ED_LENGTHS[0], _ortvalue(self.seqlens_k[:n]))
            io.bind_ortvalue_input(ED_LENGTHS[1], _ortvalue(self.total))
        vocab = self.graph.session.get_outputs()[0].shape[-1]
        self.logits = np.empty((n, vocab), np.float32)
        io.bind_ortvalue_output("logits", _ortvalue(self.logits))
        if self.graph.has_logits_3d:  # the same values (B, 1, V): bound to the same memory, so
            # onnxruntime's Unsqueeze copies nothing (source == target)
            io.bind_ortvalue_output(LOGITS_3D, _ortvalue(self.logits[:, None, :]))
        if self.graph.verifies:  # no extra logits but in `verify`: the empty index, (0, V)
            self._bind_index(np.zeros(0, dtype=np.int64), np.empty((0, vocab), np.float32))
        self.step_bound = False

    def _bind_index(self, index: np.ndarray, out: np.ndarray) -> None:
        """Format 6's logits_index (K,) and the (N K, V) array its indexed_logits go to; both
        held here while bound."""
        self.index, self.indexed = index, out
        self.io.bind_ortvalue_input(LOGITS_INDEX, _ortvalue(index))
        self.io.bind_ortvalue_output(INDEXED_LOGITS, _ortvalue(out))

    def _bind_static(self) -> None:
        """Bind the inputs that stay while rows do (an encoder-decoder's source lengths or mask
        and cross K/V)."""
        outputs = self.graph.output_names
        for name, value in self.static.items():
            v = _ortvalue(value)
            self.io.bind_ortvalue_input(name, v)
            present = name.replace("past_key_values", "present", 1)
            if present in outputs:  # format 4's cross K/V: GQA writes them back where they are
                self.io.bind_ortvalue_output(present, v)

    def restart(self, static: dict[str, np.ndarray] | None) -> None:
        """Empty a one-row decoder for a new request (its buffers and bindings kept; what a
        cache holds past a row's length is never read): `take_decoder`'s reuse."""
        assert self.rows == 1 and self.n == 1, "only one-row decoders are reused"
        self.longest, self.uniform, self._lengths = 0, True, None
        self._set_static(static)
        self._bind_static()

    def _set_static(self, static: dict[str, np.ndarray] | None) -> None:
        """The request's static inputs, per original batch row; contiguous and held here: a
        bound OrtValue does not own memory."""
        self.static_full = {k: np.asarray(v, order="C") for k, v in (static or {}).items()}
        self.static = dict(self.static_full)

    def run(self, ids: np.ndarray, positions: np.ndarray, new_lengths: np.ndarray) -> np.ndarray:
        """ids, positions (N, T) int64; new_lengths (N,) tokens per row after this call.

        Returns the (N, V) logits of each row's last new token; the array is reused by the
        next call (decoding consumes it before stepping again).
        """
        io = self.io
        io.bind_cpu_input("input_ids", ids)
        io.bind_cpu_input("position_ids", positions)
        self.step_bound = False
        return self._run(new_lengths, int(new_lengths.max()))

    def _run(
        self, new_lengths: np.ndarray, longest: int, uniform: bool | None = None
    ) -> np.ndarray:
        """Set the rows' lengths after this call (`new_lengths`, the longest `longest`;
        `uniform`: all rows that long, None: check) and run: format 5's ED step takes them as
        they are, other steps as a mask of rows right-padded to `longest`."""
        if uniform is None:
            uniform = bool(new_lengths.min() == longest)
        if uniform:
            return self._run_uniform(longest)
        if longest > self.shape[1]:
            raise ValueError(f"the cache holds {self.shape[1]} positions; asked for more")
        n = len(new_lengths)
        if self.takes_lengths:  # written into the buffers bound with the state
            self.seqlens_k[:n] = new_lengths - 1
            self.total[()] = longest
        else:
            mask = (np.arange(longest)[None, :] < new_lengths[:, None]).astype(np.int64)
            self.io.bind_cpu_input("attention_mask", mask)
        self.graph.session.run_with_iobinding(self.io)
        self._lengths, self.longest, self.uniform = new_lengths, longest, False
        return self.logits

    def _run_uniform(self, longest: int) -> np.ndarray:
        """_run for rows all `longest` long after this call (batch 1, and batches until their
        first row ends): Python ints only, no array made."""
        if longest > self.shape[1]:
            raise ValueError(f"the cache holds {self.shape[1]} positions; asked for more")
        n = self.n
        if self.takes_lengths:
            self.seqlens_k[:n] = longest - 1
            self.total[()] = longest
        else:  # a mask of ones: a view of the preallocated ones
            self.io.bind_cpu_input("attention_mask", self.ones[: n * longest].reshape(n, longest))
        self.graph.session.run_with_iobinding(self.io)
        self._lengths, self.longest, self.uniform = None, longest, True
        return self.logits

    def verify(self, tokens: np.ndarray) -> np.ndarray:  # (T,) -> (T, V)
        """A one-row LM's T new tokens in one call (speculative decoding's verification): the
        logits after each of them, (T, V), a new array. The row's length grows by T; `drop_last`
        takes back the tokens the caller rejects (format 6+: Graph.verifies)."""
        if not self.graph.verifies:
            raise ValueError(NO_VERIFY)
        assert self.n == 1 and self.uniform, "verify runs one row"
        T, start = len(tokens), self.longest
        vocab = self.logits.shape[1]
        out = np.empty((T, vocab), np.float32)
        self._bind_index(np.arange(T, dtype=np.int64), out)
        self.io.bind_cpu_input("input_ids", np.asarray(tokens, dtype=np.int64).reshape(1, T))
        self.io.bind_cpu_input("position_ids", np.arange(start, start + T, dtype=np.int64)[None])
        self.step_bound = False
        try:
            self._run_uniform(start + T)
        finally:
            self._bind_index(np.zeros(0, dtype=np.int64), np.empty((0, vocab), np.float32))
        return out

    def drop_last(self, n: int) -> None:
        """One row's last n cache positions taken back (the drafts a `verify` rejected): what
        lies past a row's length is never read, and the next call writes over it."""
        assert self.n == 1 and 0 <= n <= self.longest
        self.longest, self.uniform, self._lengths = self.longest - n, True, None

    def prefill(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Right-padded (N, T) ids and 1/0 mask -> logits after each row's last real token."""
        positions = np.where(mask > 0, np.arange(ids.shape[1])[None, :], 0).astype(np.int64)
        return self.run(ids, positions, self.lengths + mask.sum(axis=1))

    def step(self, tokens: np.ndarray) -> np.ndarray:  # (N,) -> (N, V)
        n = self.n
        self.step_ids[:n, 0] = tokens
        if not self.step_bound:
            self.io.bind_ortvalue_input("input_ids", _ortvalue(self.step_ids[:n]))
            self.io.bind_ortvalue_input("position_ids", _ortvalue(self.step_positions[:n]))
            self.step_bound = True
        if self.uniform:
            self.step_positions[:n, 0] = self.longest
            return self._run_uniform(self.longest + 1)
        lengths = self.lengths
        self.step_positions[:n, 0] = lengths
        return self._run(lengths + 1, int(lengths.max()) + 1, False)

    # -- row selection -------------------------------------------------------------------------
    def select(self, rows: np.ndarray) -> None:
        """Row i becomes old row rows[i] (drop finished rows, reorder or repeat beams)."""
        rows = np.asarray(rows, dtype=np.int64)
        n, filled = len(rows), int(self.lengths[rows].max(initial=0))
        if n == self.n and np.array_equal(rows, np.arange(n)):
            return
        if n > self.rows:  # beams: the batch grows once, to batch x beams
            grown = {k: np.zeros((n, *self.shape), np.float32) for k in self.names}
            for k, buf in self.buffers.items():
                grown[k][:n, :, :filled] = buf[rows, :, :filled]
            self.buffers, self.rows = grown, n
            self.ones = np.ones(n * self.shape[1], dtype=np.int64)
            self.step_ids = np.zeros((n, 1), dtype=np.int64)
            self.step_positions = np.zeros((n, 1), dtype=np.int64)
            self.seqlens_k = np.zeros(n, dtype=np.int32)
        else:
            moved = np.flatnonzero(rows != np.arange(n))  # rows that stay in place: no copy
            for buf in self.buffers.values():  # fancy index copies first: safe
                if len(moved) < n:
                    buf[moved, :, :filled] = buf[rows[moved], :, :filled]
                else:
                    buf[:n, :, :filled] = buf[rows, :, :filled]
        source, rebind = self.source[rows], n != self.n
        self._set_lengths(self.lengths[rows])
        self.n = n
        if not np.array_equal(source, self.source):
            rebind = True
            if self.static_full:
                self.static = {k: v[source] if v.ndim else v for k, v in self.static_full.items()}
        self.source = source
        if not rebind:  # beams reordered within their rows: the buffers were written in place
            return
        self.io.clear_binding_inputs()
        self.io.clear_binding_outputs()
        self._bind_state()

    # -- continuous batching (runtime/serve): rows that join and leave a running batch --------
    def row_cache(self, row: int) -> dict[str, np.ndarray]:
        """Copies of row `row`'s filled cache, per buffer: (G, lengths[row], D) each (what a
        prefix cache keeps, and what `admit` takes)."""
        n = int(self.lengths[row])
        return {k: buf[row, :, :n].copy() for k, buf in self.buffers.items()}

    def load_row(self, row: int, cache: dict[str, np.ndarray], length: int) -> None:
        """Row `row`'s cache positions 0 .. length - 1 from `cache` (row_cache's arrays, or
        views of another decoder's buffers); its length becomes `length`."""
        if length > self.shape[1]:
            raise ValueError(f"the cache holds {self.shape[1]} positions; asked for {length}")
        for k, buf in self.buffers.items():
            buf[row, :, :length] = cache[k][:, :length]
        lengths = self.lengths.copy()
        lengths[row] = length
        self._set_lengths(lengths)

    def admit(self, cache: dict[str, np.ndarray], length: int) -> int:
        """A new row after the rows in use (a request joining the batch between two steps):
        its cache's first `length` positions from `cache`. Returns its row index."""
        i = self.n
        if i >= self.rows:
            raise ValueError(f"all {self.rows} rows are in use")
        lengths = np.append(self.lengths[:i], 0)
        self.n, self.source = i + 1, np.arange(i + 1)
        self._set_lengths(lengths)
        self.load_row(i, cache, length)
        self.io.clear_binding_inputs()
        self.io.clear_binding_outputs()
        self._bind_state()
        return i

    def set_static(self, static: dict[str, np.ndarray]) -> None:
        """A continuous batch of translations: the static inputs (stack_static) of the rows it
        is about to hold, its rows in use and the one `admit` adds next, bound by that admit."""
        self._set_static(static)

    def empty(self) -> None:
        """No row in use (every request of a continuous batch has left); buffers kept."""
        self.n, self.source = 0, np.arange(0)
        self._set_lengths(np.zeros(0, dtype=np.int64))

    def _set_lengths(self, lengths: np.ndarray) -> None:
        self._lengths = lengths.astype(np.int64)
        self.longest = int(lengths.max(initial=0))
        self.uniform = bool(lengths.min(initial=0) == self.longest)
        if self.uniform:  # `lengths` is made again from `longest` when read
            self._lengths = None


NO_VERIFY = (
    "speculative decoding (prompt_lookup, a draft package) needs a package of format 6 or later "
    "(exported since 2026-12-02: its decoder returns the logits of several new tokens); "
    "re-export this one"
)

# one-row decoders (reused across requests) hold a power of two of positions, at least this
# many, up to max_len: a model of 32,768 positions does not allocate its whole context's cache
# (2.5 GB at Qwen2.5-0.5B's shape in fp32) for a reply of a hundred tokens
MIN_REUSED_CAPACITY = 256


def reused_capacity(needed: int, max_len: int) -> int:
    """The positions a one-row decoder is made with for a request of `needed`."""
    return min(max_len, max(MIN_REUSED_CAPACITY, 1 << max(needed - 1, 0).bit_length()))


def take_decoder(
    graph: Graph, cfg: PackageConfig, capacity: int, batch: int,
    static: dict[str, np.ndarray] | None = None,
) -> CachedDecoder:  # fmt: skip
    """A CachedDecoder for `batch` rows of up to `capacity` positions: a one-row request
    reuses the smallest one given back by an earlier request (give_back) that holds as many,
    else makes one of reused_capacity."""
    if batch == 1:
        with graph.lock:
            fits = [d for d in graph.idle if d.shape[1] >= capacity]
            dec = min(fits, key=lambda d: d.shape[1]) if fits else None
            if dec is not None:
                graph.idle.remove(dec)
        if dec is not None:
            dec.restart(static)
            return dec
        capacity = reused_capacity(capacity, cfg.model.max_len)
    m = cfg.model
    dec = CachedDecoder(
        graph, cfg.family, m.n_decoder_layers, m.kv_heads, m.head_dim, capacity, batch, static
    )
    dec.reusable = batch == 1
    return dec


def give_back(stepper: object) -> None:
    """A finished request's decoder, for the next one-row request to reuse (take_decoder);
    anything else (batches, beams, sliding decoders) is left to the garbage collector."""
    if isinstance(stepper, CachedDecoder) and stepper.reusable and stepper.rows == stepper.n == 1:
        with stepper.graph.lock:
            if len(stepper.graph.idle) < 64:
                stepper.graph.idle.append(stepper)


def source_lengths(decoder: Graph, src_mask: np.ndarray) -> dict[str, np.ndarray]:
    """What an encoder-decoder step takes of its right-padded (B, S) sources' lengths: format
    5's encoder_seqlens_k (B,) and encoder_total_sequence_length () (int32, GroupQueryAttention's
    own), older formats' encoder_attention_mask."""
    if not decoder.takes_lengths:
        return {"encoder_attention_mask": src_mask}
    return {
        ED_LENGTHS[2]: (src_mask.sum(axis=1) - 1).astype(np.int32),
        ED_LENGTHS[3]: np.array(src_mask.shape[1], dtype=np.int32),
    }


def stack_static(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One batch's static inputs from rows of different requests, each its own one-row
    decoder's (`CachedDecoder.static`, start_encoder_decoder's): cross K/V (1, H, S_i, D) and a
    source mask (1, S_i, older formats) zero-padded to the longest source, per-row lengths and
    format 4's last-source K/V stacked, encoder_total_sequence_length that longest source: as
    right-padded sources of one batch are given (source_lengths)."""
    width = max(int(r[name].shape[2]) for r in rows for name in r if _source_axis(name) == 2)
    out = {}
    for name in rows[0]:
        axis = _source_axis(name)
        if name == ED_LENGTHS[3]:
            out[name] = np.array(width, dtype=np.int32)
        elif axis is None:
            out[name] = np.concatenate([r[name] for r in rows])
        else:
            first = rows[0][name]
            shape = (len(rows), *first.shape[1:axis], width, *first.shape[axis + 1 :])
            stacked = np.zeros(shape, dtype=first.dtype)
            for i, r in enumerate(rows):
                row = r[name][0]  # (H, S_i, D) or (S_i,)
                if axis == 2:
                    stacked[i, :, : row.shape[1]] = row
                else:
                    stacked[i, : row.shape[0]] = row
            out[name] = stacked
    return out


def _source_axis(name: str) -> int | None:
    """The source positions' axis of an encoder-decoder step's static input (None: none)."""
    if name.endswith((".encoder.key", ".encoder.value")):
        return 2  # (B, H, S, D)
    return 1 if name == "encoder_attention_mask" else None


def start_encoder_decoder(
    graphs: dict[str, Graph], cfg: PackageConfig, src: np.ndarray, src_mask: np.ndarray,
    max_new: int,
) -> tuple[CachedDecoder, np.ndarray]:  # fmt: skip
    """Encode right-padded sources (B, S) and run the BOS step: (stepper, first logits (B, V))."""
    encoder = graphs["encoder"]
    cross = encoder.run({"input_ids": src, "attention_mask": src_mask})
    # the encoder's present.{i}.encoder.* are the decoder's past_key_values.{i}.encoder.*
    names = [name.replace("present", "past_key_values", 1) for name in encoder.output_names]
    decoder = graphs["decoder"]
    static = {**dict(zip(names, cross)), **source_lengths(decoder, src_mask)}
    dec = take_decoder(decoder, cfg, min(cfg.model.max_len, max_new + 1), len(src), static)
    # the BOS step: every row at position 0 (a step, so the step's bindings serve the next)
    first = dec.step(np.full(len(src), cfg.special_tokens.bos_id, dtype=np.int64)).copy()
    return dec, first


def start_decoder_only(
    graphs: dict[str, Graph], cfg: PackageConfig, ids: np.ndarray, mask: np.ndarray, max_new: int
) -> tuple[CachedDecoder, np.ndarray]:
    """Prefill right-padded prompts (B, T): (stepper, logits after each prompt (B, V))."""
    capacity = min(cfg.model.max_len, ids.shape[1] + max_new)
    dec = take_decoder(graphs["decoder"], cfg, capacity, len(ids))
    first = dec.prefill(ids, mask).copy()
    return dec, first


class SlidingDecoder:
    """A decoder-only Stepper that goes on past the model's context: when the next token would
    need position max_len, every row's cache is rebuilt from its last `keep` tokens, re-encoded
    from position 0 (one prefill of `keep` tokens per slide), as nanoGPT crops its context.
    The model then sees between `keep` and max_len tokens of context."""

    def __init__(
        self, graphs: dict[str, Graph], cfg: PackageConfig, ids: np.ndarray, mask: np.ndarray,
        keep: int,
    ):  # fmt: skip
        if not 1 <= keep < cfg.model.max_len:
            raise ValueError(
                f"sliding window keep={keep} must be in [1, max_len {cfg.model.max_len})"
            )
        self.graph, self.cfg, self.keep = graphs["decoder"], cfg, keep
        self.history = [row[: int(m.sum())].tolist() for row, m in zip(ids, mask)]
        self.slides = 0
        self.dec = self._decoder(len(ids))
        self.first = self.dec.prefill(ids, mask).copy()

    def _decoder(self, batch: int) -> CachedDecoder:
        m = self.cfg.model
        return CachedDecoder(
            self.graph, self.cfg.family, m.n_decoder_layers, m.kv_heads, m.head_dim, m.max_len,
            batch,
        )  # fmt: skip

    def step(self, tokens: np.ndarray) -> np.ndarray:  # (N,) -> (N, V)
        for h, t in zip(self.history, tokens.tolist()):
            h.append(int(t))
        if int(self.dec.lengths.max()) < self.cfg.model.max_len:
            return self.dec.step(tokens)
        windows = [h[-self.keep :] for h in self.history]
        T = max(map(len, windows))
        ids = np.zeros((len(windows), T), dtype=np.int64)
        mask = np.zeros((len(windows), T), dtype=np.int64)
        for i, w in enumerate(windows):
            ids[i, : len(w)], mask[i, : len(w)] = w, 1
        self.dec = self._decoder(len(windows))
        self.slides += 1
        return self.dec.prefill(ids, mask)

    def select(self, rows: np.ndarray) -> None:
        self.history = [list(self.history[r]) for r in np.asarray(rows).tolist()]
        self.dec.select(rows)
