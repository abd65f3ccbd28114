"""The ONNX steppers: run a package's graphs one decoding step at a time (see decoding.Stepper).

The KV cache lives between steps as the graphs' own outputs: each step's `present.*` is fed back
as the next step's `past_key_values.*` without copies. On CPU these are numpy arrays straight
from `session.run`. On CUDA, IO binding keeps every output but the logits on the device, so only
the new token ids (and the small masks) go host -> device and the last logits device -> host;
`select` (finished rows, beam reordering) is the one step that goes through the host.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from .package import io_names

Value = np.ndarray | ort.OrtValue  # a cache tensor: numpy on CPU, an OrtValue on the device


class Graph:
    """One graph's session. run(feed) -> outputs in contract order, logits as float32 numpy."""

    def __init__(self, session: ort.InferenceSession, device: str, outputs: list[str]):
        self.session, self.device, self.outputs = session, device, outputs
        self.iobinding = device != "cpu"

    def run(self, feed: dict[str, Value]) -> list[Value]:
        if not self.iobinding:
            out = self.session.run(self.outputs, feed)
        else:
            io = self.session.io_binding()
            for name, v in feed.items():
                if isinstance(v, np.ndarray):
                    io.bind_cpu_input(name, np.ascontiguousarray(v))
                else:
                    io.bind_ortvalue_input(name, v)
            for name in self.outputs:
                io.bind_output(name, "cpu" if name == "logits" else self.device)
            self.session.run_with_iobinding(io)
            out = io.get_outputs()
            if self.outputs[0] == "logits":
                out[0] = out[0].numpy()
        if self.outputs[0] == "logits" and out[0].dtype != np.float32:
            out[0] = out[0].astype(np.float32)  # fp16 variants
        return out

    def take(self, v: Value, rows: np.ndarray) -> Value:
        """Rows `rows` of a batch-first tensor (on the device: through the host)."""
        if isinstance(v, np.ndarray):
            return v[rows]
        return ort.OrtValue.ortvalue_from_numpy(v.numpy()[rows], self.device, 0)


def _as_past(names: list[str]) -> list[str]:
    return [n.replace("present", "past_key_values", 1) for n in names]


class EncoderDecoderStepper:
    """Runs the encoder and the BOS step on construction; holds the cross K/V and self cache."""

    def __init__(self, graphs: dict[str, Graph], n_layers: int, bos_id: int, src, src_mask):
        # src, src_mask (B, S) int64, right-padded
        names = io_names("encoder-decoder", n_layers)
        self.step_graph = graphs["decoder_with_past"]
        self.self_names = _as_past(names["decoder_with_past"]["outputs"][1:])
        (memory,) = graphs["encoder"].run({"input_ids": src, "attention_mask": src_mask})
        bos = np.full((len(src), 1), bos_id, dtype=np.int64)
        feed = {
            "input_ids": bos,
            "encoder_hidden_states": memory,
            "encoder_attention_mask": src_mask,
        }
        logits, *present = graphs["decoder"].run(feed)
        self.first_logits = logits[:, -1]  # (B, V)
        self.mask = src_mask
        self.cache = dict(zip(_as_past(names["decoder"]["outputs"][1:]), present))

    def step(self, tokens: np.ndarray) -> np.ndarray:  # (N,) -> (N, V)
        feed = {"input_ids": tokens[:, None], "encoder_attention_mask": self.mask, **self.cache}
        logits, *present = self.step_graph.run(feed)
        self.cache.update(zip(self.self_names, present))
        return logits[:, -1]

    def select(self, rows: np.ndarray) -> None:
        take = self.step_graph.take
        self.mask = self.mask[rows]
        self.cache = {name: take(v, rows) for name, v in self.cache.items()}


class DecoderOnlyStepper:
    """Runs the prompt prefill on construction; holds the cache and a preallocated mask."""

    def __init__(self, graphs: dict[str, Graph], n_layers: int, ids, mask, max_new_tokens: int):
        # ids, mask (B, T) int64, left-padded
        names = io_names("decoder-only", n_layers)
        self.step_graph = graphs["decoder_with_past"]
        self.past_names = _as_past(names["decoder_with_past"]["outputs"][1:])
        logits, *present = graphs["decoder"].run({"input_ids": ids, "attention_mask": mask})
        self.first_logits = logits[:, -1]  # (B, V)
        self.cache = dict(zip(self.past_names, present))
        B, T = ids.shape
        self.mask = np.ones((B, T + max_new_tokens), dtype=np.int64)  # new tokens are all real
        self.mask[:, :T] = mask
        self.length = T

    def step(self, tokens: np.ndarray) -> np.ndarray:  # (N,) -> (N, V)
        self.length += 1
        mask = self.mask[:, : self.length]
        feed = {"input_ids": tokens[:, None], "attention_mask": mask, **self.cache}
        logits, *present = self.step_graph.run(feed)
        self.cache = dict(zip(self.past_names, present))
        return logits[:, -1]

    def select(self, rows: np.ndarray) -> None:
        take = self.step_graph.take
        self.mask = self.mask[rows]
        self.cache = {name: take(v, rows) for name, v in self.cache.items()}
