"""Damages a safetensors file: python3 damage_checkpoint.py IN OUT (dtype NAME DTYPE | truncate BYTES)."""
import json
import struct
import sys

src, dst, how = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(src, "rb").read()
if how == "truncate":
    open(dst, "wb").write(data[: len(data) - int(sys.argv[4])])
    sys.exit(0)
size = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8 : 8 + size])
header[sys.argv[4]]["dtype"] = sys.argv[5]
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
# Keep the data offsets valid: they are relative to the end of the header.
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + size :])
