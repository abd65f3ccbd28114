"""runtime.onnx_refs: every external-data location onnxruntime could open, in any encoding."""

from __future__ import annotations

import pytest

from edgeformer.runtime.onnx_refs import ProtobufError, external_locations

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def external(name: str, location: str) -> TensorProto:
    t = helper.make_tensor(name, TensorProto.FLOAT, [1], [0.0])
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "4")):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def everywhere() -> bytes:
    """A model with an external tensor in each place a TensorProto can sit."""
    then = helper.make_graph(
        [helper.make_node("Identity", ["b"], ["y1"])], "then", [],
        [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1])], [external("b", "b.bin")],
    )  # fmt: skip
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["y2"], value=external("c", "c.bin"))], "else", [],
        [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1])],
    )  # fmt: skip
    sparse = helper.make_sparse_tensor(
        external("dv", "d.bin"), helper.make_tensor("di", TensorProto.INT64, [1], [0]), [2]
    )
    constant = helper.make_node("Constant", [], ["z"], value=external("e", "e.bin"))
    fn = helper.make_function("local", "f", [], ["z"], [constant], [helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
         helper.make_node("f", [], ["z"], domain="local")],
        "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [external("a", "a.bin")], sparse_initializer=[sparse],
    )  # fmt: skip
    return helper.make_model(graph, functions=[fn]).SerializeToString()


def test_every_place_a_tensor_sits_is_read():
    assert external_locations(everywhere()) == {"a.bin", "b.bin", "c.bin", "d.bin", "e.bin"}


def entry(key_first: bool, location: bytes, overlong: bool = False) -> bytes:
    key = b"\x0a" + (b"\x88\x00" if overlong else b"\x08") + b"location"
    value = b"\x12" + bytes([len(location)]) + location
    return key + value if key_first else value + key


def message(field: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes([field << 3 | 2, len(body)]) + body


@pytest.mark.parametrize("key_first", [True, False])
@pytest.mark.parametrize("overlong", [False, True])
def test_any_field_order_and_varint_encoding_is_read(key_first, overlong):
    """What a grep for b'\\x0a\\x08location\\x12' missed: the value first, an over-long length."""
    tensor = message(13, entry(key_first, b"extra.data", overlong)) + b"\x70\x01"  # location 1
    model = message(7, message(5, tensor))  # ModelProto.graph.initializer
    assert external_locations(model) == {"extra.data"}
    assert external_locations(model + model) == {"extra.data"}  # a repeated graph merges


def test_a_key_that_is_no_location_is_no_file():
    tensor = message(13, b"\x0a\x06offset\x12\x01" + b"0")
    assert external_locations(message(7, message(5, tensor))) == set()


@pytest.mark.parametrize(
    "data", [b"\x3a\x10abc", b"\x3a", b"\x3a\xff\xff\xff", b"\x00\x01", b"\x3f"]
)
def test_bytes_that_are_no_protobuf_are_an_error(data):
    with pytest.raises(ProtobufError):
        external_locations(data)
