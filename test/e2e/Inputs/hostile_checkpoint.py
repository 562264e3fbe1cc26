"""Writes damaged and hostile copies of a safetensors checkpoint, one per case, for the
runtime's loader to refuse: python3 hostile_checkpoint.py GOOD.safetensors OUTDIR.

Each OUTDIR/<case>.safetensors differs from GOOD in one way (see CASES); OUTDIR/<case>/ are
checkpoint directories whose model.safetensors.index.json is the hostile part."""
import json
import os
import struct
import sys

good, out = sys.argv[1], sys.argv[2]
data = open(good, "rb").read()
size = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8 : 8 + size])
body = data[8 + size :]
names = [n for n in header if n != "__metadata__"]
os.makedirs(out, exist_ok=True)


def write(case, text, length=None, rest=body):
    """A file of header `text` (bytes, padded to 8) and data `rest`; `length` overrides the
    header length field."""
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out, case + ".safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text) if length is None else length) + text + rest)


def edited(name, **fields):
    """The header with tensor `name`'s fields replaced, as JSON text."""
    h = json.loads(json.dumps(header))
    h[name].update(fields)
    return json.dumps(h).encode()


norm = "model.norm.weight"
begin, end = header[norm]["data_offsets"]
a, b = "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"

# The header length field: 2^63, and one byte more than the file holds.
write("length-2p63", json.dumps(header).encode(), length=2**63)
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
write("length-past-end", text, length=len(text) + len(body) + 1)
# Headers that are not a JSON object of tensors.
write("not-json", b'{"model.norm.weight": {"dtype": "F32", ')
write("not-object", b"[1, 2, 3]")
write("deep", b"[" * 100000 + b"]" * 100000)
write("duplicate-key",
      json.dumps(header).encode()[:-1] + b', "' + norm.encode() + b'": '
      + json.dumps(header[norm]).encode() + b"}")
write("non-utf8", json.dumps(header).encode().replace(norm.encode(), b"model.norm.\xff\xfe"))
write("huge-number", edited(norm).replace(
    json.dumps(header[norm]["data_offsets"]).encode(), b"[0, 1e400]"))
write("offset-2p70", edited(norm, data_offsets=[begin, 2**70]))
write("shape-2p70", edited(norm, shape=[2**70]))
write("shape-overflow", edited(norm, shape=[2**40, 2**40]))
write("negative-shape", edited(norm, shape=[-64]))
# Offsets out of range, reversed, overlapping or misaligned; dtypes; sizes.
write("offset-past-end", edited(norm, data_offsets=[begin, len(body) + 4]))
write("reversed", edited(norm, data_offsets=[end, begin]))
write("overlap", edited(b, data_offsets=header[a]["data_offsets"]))
write("misaligned", edited(norm, data_offsets=[begin + 2, end + 2]))
write("unknown-dtype", edited(norm, dtype="Q7"))
write("shape-mismatch", edited(norm, shape=[65]))
write("not-a-tensor", edited(norm).replace(
    json.dumps(header[norm]).encode(), b'"F32"'))

# Checkpoint directories whose index is hostile; the shard itself is fine.
def index_case(case, text):
    d = os.path.join(out, case)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.safetensors.index.json"), "wb") as f:
        f.write(text)
    with open(os.path.join(d, "shard.safetensors"), "wb") as f:
        f.write(data)


def index(shard_of):
    return json.dumps({"metadata": {}, "weight_map": {n: shard_of(n) for n in names}}).encode()


index_case("index-parent", index(lambda n: "../" + os.path.basename(good)
                                 if n == norm else "shard.safetensors"))
index_case("index-absolute", index(lambda n: os.path.abspath(good)
                                   if n == norm else "shard.safetensors"))
index_case("index-missing", index(lambda n: "gone.safetensors"
                                  if n == norm else "shard.safetensors"))
index_case("index-duplicate", index(lambda n: "shard.safetensors")[:-2] +
           b', "' + norm.encode() + b'": "shard.safetensors"}}')
index_case("index-deep", b'{"weight_map": ' + b"[" * 100000 + b"]" * 100000 + b"}")
index_case("index-not-string", index(lambda n: 7 if n == norm else "shard.safetensors"))
