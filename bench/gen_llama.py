#!/usr/bin/env python3
"""Writes a Llama-shaped model in the tp dialect, for benchmarks.

    gen_llama.py OUT.mlir [--layers 80] [--hidden 8192] [--heads 64] [--kv-heads 8]
                 [--intermediate 28672] [--vocab 128256] [--dtype bf16]

The defaults are Llama-3-70B's shapes. (`tpc import` will make these from a config.json.)
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--layers", type=int, default=80)
p.add_argument("--hidden", type=int, default=8192)
p.add_argument("--heads", type=int, default=64)
p.add_argument("--kv-heads", type=int, default=8)
p.add_argument("--intermediate", type=int, default=28672)
p.add_argument("--vocab", type=int, default=128256)
p.add_argument("--dtype", default="bf16")
a = p.parse_args()

H, NH, NKV, I, V, dt = a.hidden, a.heads, a.kv_heads, a.intermediate, a.vocab, a.dtype
HD = H // NH
Q, KV = NH * HD, NKV * HD


def t(*shape):
    return "tensor<" + "x".join(map(str, shape)) + "x" + dt + ">"


def act(n):
    return f"tensor<?x{n}x{dt}>"


params = [("model.embed_tokens.weight", (V, H))]
for l in range(a.layers):
    m = f"model.layers.{l}."
    params += [(m + "input_layernorm.weight", (H,)), (m + "self_attn.q_proj.weight", (Q, H)),
               (m + "self_attn.k_proj.weight", (KV, H)), (m + "self_attn.v_proj.weight", (KV, H)),
               (m + "self_attn.o_proj.weight", (H, Q)), (m + "post_attention_layernorm.weight", (H,)),
               (m + "mlp.gate_proj.weight", (I, H)), (m + "mlp.up_proj.weight", (I, H)),
               (m + "mlp.down_proj.weight", (H, I))]
params += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
shape = dict(params)

lines = [f"module @llama_{a.layers}l {{"]
lines += [f'  tp.param @"{n}" : {t(*s)}' for n, s in params]
lines.append(f"  func.func @forward(%ids: tensor<?xi64>, %pos: tensor<?xi64>) -> {act(V)} {{")
counter = [0]


def value():
    counter[0] += 1
    return f"%v{counter[0]}"


def weight(name):
    v = value()
    lines.append(f'    {v} = tp.weight @"{name}" : {t(*shape[name])}')
    return v


def linear(module, x, n_in, n_out):
    w = weight(module + ".weight")
    v = value()
    lines.append(f'    {v} = tp.linear "{module}" {x}, {w} : ({act(n_in)}, {t(n_out, n_in)}) -> {act(n_out)}')
    return v


def norm(module, x):
    w = weight(module + ".weight")
    v = value()
    lines.append(f'    {v} = tp.rms_norm "{module}" {x}, {w} {{epsilon = 1.0e-05 : f64}} : ({act(H)}, {t(H)}) -> {act(H)}')
    return v


e = weight("model.embed_tokens.weight")
h = value()
lines.append(f'    {h} = tp.embedding "model.embed_tokens" %ids, {e} : (tensor<?xi64>, {t(V, H)}) -> {act(H)}')
for l in range(a.layers):
    m = f"model.layers.{l}"
    n = norm(m + ".input_layernorm", h)
    q = linear(m + ".self_attn.q_proj", n, H, Q)
    k = linear(m + ".self_attn.k_proj", n, H, KV)
    vv = linear(m + ".self_attn.v_proj", n, H, KV)
    qr, kr, at = value(), value(), value()
    lines.append(f'    {qr} = tp.rotary "{m}.self_attn" {q}, %pos {{head_dim = {HD} : i64, theta = 5.0e+05 : f64}} : ({act(Q)}, tensor<?xi64>) -> {act(Q)}')
    lines.append(f'    {kr} = tp.rotary "{m}.self_attn" {k}, %pos {{head_dim = {HD} : i64, theta = 5.0e+05 : f64}} : ({act(KV)}, tensor<?xi64>) -> {act(KV)}')
    lines.append(f'    {at} = tp.attention "{m}.self_attn" {qr}, {kr}, {vv} {{head_dim = {HD} : i64, num_heads = {NH} : i64, num_kv_heads = {NKV} : i64}} : ({act(Q)}, {act(KV)}, {act(KV)}) -> {act(Q)}')
    o = linear(m + ".self_attn.o_proj", at, Q, H)
    h1 = value()
    lines.append(f'    {h1} = tp.add "{m}" {h}, {o} : ({act(H)}, {act(H)}) -> {act(H)}')
    n2 = norm(m + ".post_attention_layernorm", h1)
    g = linear(m + ".mlp.gate_proj", n2, H, I)
    u = linear(m + ".mlp.up_proj", n2, H, I)
    s, mul = value(), value()
    lines.append(f'    {s} = tp.silu "{m}.mlp.act_fn" {g} : ({act(I)}) -> {act(I)}')
    lines.append(f'    {mul} = tp.mul "{m}.mlp" {s}, {u} : ({act(I)}, {act(I)}) -> {act(I)}')
    d = linear(m + ".mlp.down_proj", mul, I, H)
    h = value()
    lines.append(f'    {h} = tp.add "{m}" {h1}, {d} : ({act(H)}, {act(H)}) -> {act(H)}')
f = norm("model.norm", h)
logits = linear("lm_head", f, H, V)
lines.append(f"    return {logits} : {act(V)}")
lines += ["  }", "}"]
open(a.out, "w").write("\n".join(lines) + "\n")
