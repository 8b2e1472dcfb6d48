#!/usr/bin/env python3
"""Writes tests/data/hf_gpt2_tiny/: a tiny random GPT-2 in the Hugging Face
layout (model.safetensors, config.json) and reference logits computed here,
independently of encore, by a plain-Python GPT-2 forward in double precision
(tests/io/hf_gpt2_test.cpp compares encore's logits against them).

    python3 tests/data/make_hf_gpt2_tiny.py tests/data/hf_gpt2_tiny

The layout is that of the official `gpt2` model.safetensors: names without
the "transformer." prefix, Conv1D weights stored [in, out], a causal-mask
buffer "h.<i>.attn.bias" [1, 1, n_positions, n_positions], and no
lm_head.weight (the head is tied to wte). No numpy: the standard library only.
"""
import json
import math
import os
import random
import struct
import sys

CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
    "vocab_size": 11, "n_positions": 8, "n_ctx": 8, "n_embd": 8, "n_layer": 2, "n_head": 2,
    "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
}
IDS = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def tensors(rng):
    V, P, C, L = CONFIG["vocab_size"], CONFIG["n_positions"], CONFIG["n_embd"], CONFIG["n_layer"]

    def rand(*shape, scale=0.3, offset=0.0):
        n = math.prod(shape)
        return (list(shape), [f32(offset + scale * rng.gauss(0, 1)) for _ in range(n)])

    out = {"wte.weight": rand(V, C), "wpe.weight": rand(P, C)}
    for i in range(L):
        h = f"h.{i}."
        out[h + "ln_1.weight"] = rand(C, scale=0.1, offset=1.0)
        out[h + "ln_1.bias"] = rand(C, scale=0.1)
        out[h + "attn.c_attn.weight"] = rand(C, 3 * C)      # Conv1D: [in, out]
        out[h + "attn.c_attn.bias"] = rand(3 * C, scale=0.1)
        out[h + "attn.c_proj.weight"] = rand(C, C)
        out[h + "attn.c_proj.bias"] = rand(C, scale=0.1)
        out[h + "ln_2.weight"] = rand(C, scale=0.1, offset=1.0)
        out[h + "ln_2.bias"] = rand(C, scale=0.1)
        out[h + "mlp.c_fc.weight"] = rand(C, 4 * C)
        out[h + "mlp.c_fc.bias"] = rand(4 * C, scale=0.1)
        out[h + "mlp.c_proj.weight"] = rand(4 * C, C)
        out[h + "mlp.c_proj.bias"] = rand(C, scale=0.1)
        mask = [1.0 if j <= r else 0.0 for r in range(P) for j in range(P)]
        out[h + "attn.bias"] = ([1, 1, P, P], mask)
    out["ln_f.weight"] = rand(C, scale=0.1, offset=1.0)
    out["ln_f.bias"] = rand(C, scale=0.1)
    return out


def write_safetensors(path, ts):
    header, offset, blobs = {}, 0, []
    for name, (shape, data) in ts.items():
        blob = struct.pack(f"<{len(data)}f", *data)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---- the reference forward, double precision, lists of rows ----

def matrix(ts, name):
    shape, data = ts[name]
    rows, cols = shape
    return [data[r * cols:(r + 1) * cols] for r in range(rows)]


def conv1d(x, w, b):      # x [T, in] . w [in, out] + b
    return [[sum(xi[k] * w[k][j] for k in range(len(w))) + b[j] for j in range(len(b))] for xi in x]


def layer_norm(x, g, b, eps):
    out = []
    for row in x:
        mu = sum(row) / len(row)
        var = sum((v - mu) ** 2 for v in row) / len(row)
        out.append([(v - mu) / math.sqrt(var + eps) * g[j] + b[j] for j, v in enumerate(row)])
    return out


def gelu_new(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def forward(ts, ids):
    C, H, eps = CONFIG["n_embd"], CONFIG["n_head"], CONFIG["layer_norm_epsilon"]
    hd, T = C // H, len(ids)
    wte, wpe = matrix(ts, "wte.weight"), matrix(ts, "wpe.weight")
    x = [[wte[t][c] + wpe[p][c] for c in range(C)] for p, t in enumerate(ids)]
    vec = lambda name: ts[name][1]
    for i in range(CONFIG["n_layer"]):
        h = f"h.{i}."
        a = layer_norm(x, vec(h + "ln_1.weight"), vec(h + "ln_1.bias"), eps)
        qkv = conv1d(a, matrix(ts, h + "attn.c_attn.weight"), vec(h + "attn.c_attn.bias"))
        y = [[0.0] * C for _ in range(T)]
        for head in range(H):
            q = [row[head * hd:(head + 1) * hd] for row in qkv]
            k = [row[C + head * hd:C + (head + 1) * hd] for row in qkv]
            v = [row[2 * C + head * hd:2 * C + (head + 1) * hd] for row in qkv]
            for r in range(T):
                s = [sum(q[r][d] * k[j][d] for d in range(hd)) / math.sqrt(hd) for j in range(r + 1)]
                m = max(s)
                e = [math.exp(z - m) for z in s]
                p = [z / sum(e) for z in e]
                for d in range(hd):
                    y[r][head * hd + d] = sum(p[j] * v[j][d] for j in range(r + 1))
        y = conv1d(y, matrix(ts, h + "attn.c_proj.weight"), vec(h + "attn.c_proj.bias"))
        x = [[x[r][c] + y[r][c] for c in range(C)] for r in range(T)]
        a = layer_norm(x, vec(h + "ln_2.weight"), vec(h + "ln_2.bias"), eps)
        f = conv1d(a, matrix(ts, h + "mlp.c_fc.weight"), vec(h + "mlp.c_fc.bias"))
        f = [[gelu_new(v) for v in row] for row in f]
        f = conv1d(f, matrix(ts, h + "mlp.c_proj.weight"), vec(h + "mlp.c_proj.bias"))
        x = [[x[r][c] + f[r][c] for c in range(C)] for r in range(T)]
    x = layer_norm(x, vec("ln_f.weight"), vec("ln_f.bias"), eps)
    return [[sum(row[c] * wte[t][c] for c in range(C)) for t in range(len(wte))] for row in x]   # tied head


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    ts = tensors(random.Random(20261202))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), ts)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    logits = [forward(ts, ids) for ids in IDS]
    with open(os.path.join(out_dir, "reference_logits.json"), "w") as f:
        json.dump({"ids": IDS, "logits": logits}, f)


if __name__ == "__main__":
    main()
