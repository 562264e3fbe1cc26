"""ggml's K-quant blocks (Q4_K, Q5_K, Q6_K) written from fp32 rows, for test files: gguf-py
0.19 reads these types (gguf.quants.dequantize) but cannot write them, and llama-quantize is a
build of llama.cpp the test command does not make. The layouts are ggml's (ggml-common.h's
block_q4_K, block_q5_K and block_q6_K, as gguf-py's dequantizers read them); the choice of
scales is a plain one (each group's range over its largest integer, the scales themselves
rounded to 6 or 8 bits), not llama-quantize's search, since a test needs valid blocks near
the weights, not the best ones. quantize() checks what it wrote by reading it back with
gguf-py, so a packing mistake fails here and not as a model mismatch.

    quantize(w, qtype) -> uint8 array [rows, bytes per row], as gguf.quants.quantize returns
"""
import numpy as np

import gguf
from gguf.quants import dequantize

Q = gguf.GGMLQuantizationType
QK_K = 256


def _f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def _super_scale(values, top):
    """An f16 scale for VALUES ([blocks, n], >= 0) stored as integers up to TOP: the largest
    over TOP, and the integers each value becomes under it."""
    d = _f16(values.max(axis=1) / top)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ints = np.where(df > 0, np.rint(values / df), 0)
    return d, np.clip(ints, 0, top).astype(np.uint8)


def _pack_scales(sc, mn):
    """Q4_K's and Q5_K's 12 bytes of eight 6-bit scales and mins ([blocks, 8] each):
    bytes 0..3 scales 0..3 (their top 2 bits: those of scales 4..7), bytes 4..7 mins 0..3
    likewise, bytes 8..11 the low 4 bits of scale 4 + j and of min 4 + j."""
    out = np.zeros((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0xF) | ((mn[:, 4:8] & 0xF) << 4)
    return out


def _asymmetric(blocks, top):
    """Q4_K's and Q5_K's arithmetic for BLOCKS [n, 256]: eight groups of 32, element
    (d sc) q - dmin m with q in 0..TOP. Returns d, dmin, sc, m ([n, 8]) and q [n, 256]."""
    groups = blocks.reshape(-1, 8, 32)
    lo = np.minimum(groups.min(axis=2), 0)
    hi = np.maximum(groups.max(axis=2), 0)
    d, sc = _super_scale((hi - lo) / top, 63)
    dmin, mn = _super_scale(-lo, 63)
    scale = d.astype(np.float32)[:, None] * sc
    offset = dmin.astype(np.float32)[:, None] * mn
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale[:, :, None] > 0,
                     np.rint((groups + offset[:, :, None]) / scale[:, :, None]), 0)
    return d, dmin, sc, mn, np.clip(q, 0, top).astype(np.uint8).reshape(-1, QK_K)


def _nibbles(q):
    """Q4_K's 128 bytes for q [n, 256] (low 4 bits each): group 2c the low nibbles of bytes
    32c .. 32c + 31, group 2c + 1 their high nibbles."""
    g = (q & 0xF).reshape(-1, 4, 2, 32)
    return (g[:, :, 0] | (g[:, :, 1] << 4)).reshape(-1, 128)


def q4_k(blocks):
    d, dmin, sc, mn, q = _asymmetric(blocks, 15)
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                           _pack_scales(sc, mn), _nibbles(q)], axis=1)


def q5_k(blocks):
    d, dmin, sc, mn, q = _asymmetric(blocks, 31)
    # Bit g of byte l: the fifth bit of element l of group g.
    fifth = (q >> 4).reshape(-1, 8, 32)
    qh = np.zeros((q.shape[0], 32), np.uint8)
    for g in range(8):
        qh |= fifth[:, g] << g
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                           _pack_scales(sc, mn), qh, _nibbles(q)], axis=1)


def q6_k(blocks):
    """Sixteen groups of 16, each with an int8 scale of one f16 d: element (d s) (q - 32),
    q in 0..63; ql [128], qh [64], scales [16], d."""
    groups = blocks.reshape(-1, 16, 16)
    amax = np.abs(groups).max(axis=2)
    d, s = _super_scale(amax / 31, 127)
    scale = d.astype(np.float32)[:, None] * s
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale[:, :, None] > 0, np.rint(groups / scale[:, :, None]), 0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 128)  # two halves
    # In half h, element r < 128: low nibble (r // 64) of byte 64h + r % 64, bits
    # 2 (r // 32), +1 of high byte 32h + r % 32.
    ql = (q[:, :, 0:64] & 0xF) | ((q[:, :, 64:128] & 0xF) << 4)
    top = (q >> 4).reshape(-1, 2, 4, 32)
    qh = top[:, :, 0] | (top[:, :, 1] << 2) | (top[:, :, 2] << 4) | (top[:, :, 3] << 6)
    return np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), s.view(np.uint8),
                           d.view(np.uint8).reshape(-1, 2)], axis=1)


WRITERS = {Q.Q4_K: q4_k, Q.Q5_K: q5_k, Q.Q6_K: q6_k}
# The most a value read back may be from the weight, in quantization steps of its group (the
# step the writer aims at: the group's range, zero included, over its largest integer; Q6_K's
# largest magnitude over 31): rounding makes half a step, the 6- or 8-bit scales' own rounding
# up to about a tenth more; a packing mistake puts values many steps away. Weights of a few
# 1e-4 or less would make Q6_K's f16 d subnormal and miss it: the test models' are ~0.1.
TOLERANCE = 1.0


def quantize(w, qtype):
    """W ([..., row], fp32, rows whole 256-blocks) as QTYPE's blocks, [..., bytes per row]."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if w.shape[-1] % QK_K:
        raise ValueError(f"kquants.py: rows of {w.shape[-1]} are not whole blocks of {QK_K}")
    blocks = w.reshape(-1, QK_K)
    data = WRITERS[qtype](blocks)
    per_row = w.shape[-1] // QK_K * data.shape[1]
    data = data.reshape(*w.shape[:-1], per_row)
    back = dequantize(data, qtype).reshape(blocks.shape)
    if qtype == Q.Q6_K:
        step = np.abs(blocks.reshape(-1, 16)).max(axis=1) / 31
        step = step.repeat(16).reshape(blocks.shape)
    else:
        groups = blocks.reshape(-1, 32)
        top = 15 if qtype == Q.Q4_K else 31
        step = (np.maximum(groups.max(axis=1), 0) - np.minimum(groups.min(axis=1), 0)) / top
        step = step.repeat(32).reshape(blocks.shape)
    err = np.abs(back - blocks)
    if not (np.all(np.isfinite(back)) and np.all(err <= TOLERANCE * step + 1e-7)):
        worst = int(np.argmax(err - TOLERANCE * step))
        raise SystemExit(f"kquants.py: {qtype.name} reads back element {worst} as "
                         f"{back.flat[worst]} for {blocks.flat[worst]}: the blocks are wrong")
    return data
