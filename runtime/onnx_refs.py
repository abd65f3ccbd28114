"""The external-data files an ONNX graph makes onnxruntime open, read from its protobuf.

A minimal protobuf reader (the runtime-only install has no `onnx` package): it decodes the
wire format of the messages on the way to a tensor, in any field order and any valid encoding
(over-long varints, repeated or split messages, which protobuf merges), and reads every
TensorProto's external_data entries whose key is "location", as onnxruntime does:

    ModelProto.graph (7), .functions (25) .node (7), .training_info (20) .initialization (1)
    and .algorithm (2) -> GraphProto
    GraphProto.initializer (5) -> TensorProto; .sparse_initializer (15) -> SparseTensorProto;
    .node (1) -> NodeProto .attribute (5) -> AttributeProto: .t (5), .tensors (10) ->
    TensorProto; .g (6), .graphs (11) -> GraphProto; .sparse_tensor (22), .sparse_tensors
    (23) -> SparseTensorProto (.values 1, .indices 2 -> TensorProto)
    TensorProto.external_data (13) -> StringStringEntryProto {key 1, value 2}
"""

from __future__ import annotations

from pathlib import Path

# message -> {field number: the message type it holds}; other fields are skipped
FIELDS: dict[str, dict[int, str]] = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "training": {1: "graph", 2: "graph"},
    "function": {7: "node"},
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 10: "tensor", 6: "graph", 11: "graph", 22: "sparse", 23: "sparse"},
    "sparse": {1: "tensor", 2: "tensor"},
    "tensor": {13: "entry"},
}


class ProtobufError(ValueError):
    """Bytes that are not a valid protobuf message."""


def _varint(data: memoryview, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise ProtobufError(f"a truncated or over-long varint at byte {i}")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not byte & 0x80:
            return value, i


def fields(data: memoryview) -> list[tuple[int, int, memoryview | int]]:
    """(field number, wire type, bytes of a length-delimited field or the number) of a
    message's fields in order; groups (deprecated) are skipped whole."""
    out: list[tuple[int, int, memoryview | int]] = []
    i, open_groups = 0, 0
    while i < len(data):
        tag, i = _varint(data, i)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ProtobufError("field number 0")
        if wire == 0:
            value, i = _varint(data, i)
            payload: memoryview | int = value
        elif wire == 1 or wire == 5:
            i += 8 if wire == 1 else 4
            payload = 0
        elif wire == 2:
            length, i = _varint(data, i)
            if i + length > len(data):
                raise ProtobufError(f"field {number} runs past the end of its message")
            payload, i = data[i : i + length], i + length
        elif wire == 3:
            open_groups += 1
            continue
        elif wire == 4:
            open_groups -= 1
            if open_groups < 0:
                raise ProtobufError("an end-group without a start")
            continue
        else:
            raise ProtobufError(f"wire type {wire} of field {number}")
        if i > len(data):
            raise ProtobufError(f"field {number} runs past the end of its message")
        if open_groups == 0:
            out.append((number, wire, payload))
    if open_groups:
        raise ProtobufError("an unclosed group")
    return out


def _entry(data: memoryview) -> tuple[str, str]:
    """A StringStringEntryProto's (key, value): the last of each, as protobuf merges."""
    key = value = ""
    for number, wire, payload in fields(data):
        if wire == 2 and number in (1, 2):
            assert isinstance(payload, memoryview)
            text = bytes(payload).decode("utf-8", "replace")
            key, value = (text, value) if number == 1 else (key, text)
    return key, value


def external_locations(model: bytes) -> set[str]:
    """Every external-data "location" of an ONNX model's tensors (initializers, sparse
    initializers, attribute tensors, in subgraphs and functions too). ProtobufError for bytes
    that are not a protobuf message."""
    found: set[str] = set()
    stack: list[tuple[str, memoryview]] = [("model", memoryview(model))]
    while stack:
        kind, data = stack.pop()
        if kind == "entry":
            key, value = _entry(data)
            if key == "location":
                found.add(value)
            continue
        holds = FIELDS[kind]
        for number, wire, payload in fields(data):
            if number in holds and wire == 2:
                assert isinstance(payload, memoryview)
                stack.append((holds[number], payload))
    return found


def external_files(graph: Path) -> set[str]:
    """external_locations of the ONNX file `graph`."""
    return external_locations(graph.read_bytes())
