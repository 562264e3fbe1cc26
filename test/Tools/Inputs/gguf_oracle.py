"""gguf-py as the oracle for tpc's GGUF dequantization (test/Tools/gguf-dequant.test).

  gguf_oracle.py blocks DIR     for each of the 12 types tpc reads, random blocks (quantized
                                by gguf-py where it can, random bytes with finite f16 scales
                                where it cannot; MXFP4's are random bytes, its E8M0 scale
                                the extremes among them) in DIR/TYPE.bin and gguf-py's fp32 in
                                DIR/TYPE.expected
  gguf_oracle.py quantize DIR   random fp32 blocks in DIR/in.f32 (wide-ranging scales, a zero
                                block, ties of magnitude, values on .5 boundaries) and gguf-py's
                                Q8_0 and Q4_0 quantization of them in DIR/Q8_0.expected and
                                DIR/Q4_0.expected (gguf-py's quantizers are bit-exact with
                                llama.cpp's reference ones)
  gguf_oracle.py compare A B    A and B (fp32 files) equal bit for bit, NaN equal to NaN
  gguf_oracle.py tensors FILE TPC_GGUF DIR
                                every tensor of FILE as TPC_GGUF dequantizes it equals gguf-py's
                                (DIR: scratch space)
"""
import os
import subprocess
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as T, GGML_QUANT_SIZES, quants

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K",
         "MXFP4"]
# Where each block's f16 scales sit (byte offsets), for random blocks.
SCALES = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
          "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
# What gguf-py cannot quantize: those types get random blocks only.
RANDOM_ONLY = {"Q4_K", "Q5_K", "Q6_K"}


def random_blocks(rng, qtype, count):
    """Random bytes, with every f16 scale a random finite value (random bits are valid
    blocks otherwise)."""
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(count, size), dtype=np.uint8)
    for at in SCALES[qtype.name]:
        scale = rng.standard_normal(count).astype(np.float32) * np.float32(10.0) ** rng.integers(
            -6, 3, size=count)
        raw[:, at:at + 2] = scale.astype(np.float16).view(np.uint8).reshape(count, 2)
    return raw


def make_blocks(out):
    """Per type: 8 rows gguf-py quantizes from random data (where it can) and 8 rows of random
    blocks, which reach every bit pattern of the quants; F16 and BF16 get all 65536 values."""
    rng = np.random.default_rng(27)
    for name in TYPES:
        qtype = T[name]
        block, size = GGML_QUANT_SIZES[qtype]
        cols = block * 8
        parts = []
        if name not in RANDOM_ONLY:
            data = rng.standard_normal((8, cols)).astype(np.float32)
            data *= np.float32(10.0) ** rng.integers(-4, 3, size=(8, 1)).astype(np.float32)
            data[0, :4] = [0.0, -0.0, 1e-30, -65504.0]  # zeros, a tiny value, f16's extreme
            data[1, :] = 0.0  # an all-zero block (a zero scale)
            if name in ("F32", "F16", "BF16"):
                data[2, :3] = [np.inf, -np.inf, np.nan]
            parts.append(np.ascontiguousarray(quants.quantize(data, qtype)).view(np.uint8))
        if name in SCALES:
            parts.append(random_blocks(rng, qtype, 8 * cols // block).reshape(8, -1))
        elif name == "MXFP4":  # random bytes are valid blocks, every scale byte included
            raw = rng.integers(0, 256, size=(8 * cols // block, size), dtype=np.uint8)
            raw[:6, 0] = [0, 1, 2, 127, 254, 255]  # subnormal halves, 1/2, the largest
            parts.append(raw.reshape(8, -1))
        elif name == "F32":
            parts.append(rng.integers(0, 256, size=(8, cols * 4), dtype=np.uint8))
        else:  # every 16-bit pattern, NaNs and subnormals included
            parts.append(np.arange(65536, dtype=np.uint16).view(np.uint8).reshape(-1, cols * 2))
        raw = np.concatenate(parts, axis=0)
        expected = quants.dequantize(raw, qtype).astype(np.float32, copy=False)
        assert expected.shape == (raw.shape[0], cols), (name, expected.shape)
        raw.tofile(os.path.join(out, name + ".bin"))
        expected.tofile(os.path.join(out, name + ".expected"))
        print(name, expected.size, "elements")


def make_quantize(out):
    rng = np.random.default_rng(1)
    count = 512
    values = rng.standard_normal((count, 32)).astype(np.float32)
    values *= (np.float32(10.0) ** rng.integers(-6, 4, size=(count, 1))).astype(np.float32)
    values[0] = 0                                   # a zero block: scale 0
    values[1, :2] = [3.0, -3.0]                     # a tie of magnitude: the first wins
    values[1, 2:] = 0.5
    values[2] = np.arange(32, dtype=np.float32) - 16  # exact halves after scaling
    values[3] = -np.abs(values[3])                  # a negative max
    values.tofile(os.path.join(out, "in.f32"))
    for name in ("Q8_0", "Q4_0"):
        quants.quantize(values.reshape(-1), T[name]).tofile(os.path.join(out, name + ".expected"))
    print(f"{count * 32} values, {count} blocks")


def compare(a, b, quiet=False):
    x = np.fromfile(a, dtype=np.uint32)
    y = np.fromfile(b, dtype=np.uint32)
    if x.shape != y.shape:
        sys.exit(f"{a}: {x.size} values, {b}: {y.size}")
    nan_x = (x & 0x7FFFFFFF) > 0x7F800000
    nan_y = (y & 0x7FFFFFFF) > 0x7F800000
    differ = np.flatnonzero((x != y) & ~(nan_x & nan_y))
    if differ.size:
        i = differ[0]
        fx, fy = x.view(np.float32), y.view(np.float32)
        sys.exit(f"{a} and {b}: {differ.size} of {x.size} values differ, first at {i}: "
                 f"{fx[i]!r} ({x[i]:#010x}) and {fy[i]!r} ({y[i]:#010x})")
    if not quiet:
        print(f"{os.path.basename(a)}: {x.size} values equal")


def tensors(path, tpc_gguf, out, batch=24):
    """Every tensor of the GGUF file at PATH as tpc-gguf dequantizes it against gguf-py's
    GGUFReader and quants.dequantize, BATCH at a time per tpc-gguf run (a file's fp32 can be
    gigabytes; a run of a sanitizer build takes a while to start)."""
    reader = GGUFReader(path)
    counts = {}
    for start in range(0, len(reader.tensors), batch):
        group = reader.tensors[start:start + batch]
        command = [tpc_gguf, "dequant", path]
        for tensor in group:
            expected = quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
            assert expected.size == tensor.n_elements
            expected.tofile(os.path.join(out, f"{tensor.name}.expected.bin"))
            command += [tensor.name, os.path.join(out, f"{tensor.name}.tpc.bin")]
        subprocess.run(command, check=True)
        for tensor in group:
            compare(os.path.join(out, f"{tensor.name}.tpc.bin"), os.path.join(out, f"{tensor.name}.expected.bin"), quiet=True)
            os.remove(os.path.join(out, f"{tensor.name}.tpc.bin"))
            os.remove(os.path.join(out, f"{tensor.name}.expected.bin"))
            counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
    print(f"{len(reader.tensors)} tensors equal:",
          ", ".join(f"{n} {name}" for name, n in sorted(counts.items())))


if __name__ == "__main__":
    if sys.argv[1] == "blocks":
        make_blocks(sys.argv[2])
    elif sys.argv[1] == "quantize":
        make_quantize(sys.argv[2])
    elif sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "tensors":
        tensors(sys.argv[2], sys.argv[3], sys.argv[4])
