#!/usr/bin/env python3
"""PyTorch peers of bench/gpu_bench.cpp: the same bf16 training steps and
launch chain, eager and captured with torch.cuda.graphs, timed the same way.

    python3 bench/peers/torch_steps.py            # table
    python3 bench/peers/torch_steps.py --json     # one JSON object (bench/gpu-check reads it)

Models match encore's (src/nn/, tools/workloads.h):
  - MLP 784-128-10, ReLU, batch 32, x ~ N(0, 1), labels i % 10; AdamW lr 3e-3,
    weight decay 0.
  - GPT (src/nn/gpt.cpp): token + position embeddings; pre-norm blocks
    x + attn(ln1(x)), then x + mlp(ln2(x)); LayerNorm eps 1e-5 with bias;
    attention as explicit matmuls (q k^T / sqrt(hd), causal masked_fill -inf,
    softmax, dropout, @ v) with biased qkv and proj Linears; MLP C -> 4C ->
    GELU(tanh) -> C; dropout p = 0; final LayerNorm; head tied to the token
    embedding (no bias); mean cross-entropy on next-token targets; AdamW lr
    3e-3, weight decay 0.1 on every parameter. The transformer block is this
    GPT with 1 layer, width 256, 4 heads, vocab 64, B 8, T 64; the demo GPT has
    2 layers, width 64, 4 heads, vocab 65, B 16, T 32.
  - Parameters in bf16 (model.to(torch.bfloat16), like Module::to(kBFloat16)).
    AdamW is torch's fused one (fused=True; capturable=True for graphs). One
    difference stays: torch keeps AdamW moments in the parameter dtype (bf16),
    encore in f32.
  - The graph variant captures the whole step (forward, backward, optimizer;
    gradients set to None just before capture, so backward allocates them in
    the graph's pool) with torch.cuda.graph after 3 warm-up steps on a side
    stream, with static inputs, as in PyTorch's "whole network capture" recipe.

Timing as in gpu_bench: a step's time is the wall time of 20 back-to-back steps
ended by one torch.cuda.synchronize(), / 20; median of 7 such batches after one
untimed batch (gpu_bench: median of at least 5, about 0.2 s of them). The launch chain (x = x + 1 on a 256-element f32 tensor under
no_grad) is timed per run with a synchronize at its end.
"""
import argparse
import json
import math
import statistics
import sys
import time

STEPS_PER_BATCH = 20
BATCHES = 7


def median_ms(fn, runs=BATCHES):
    """Median wall ms of fn() (which must synchronize) after one untimed call."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def build_models(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Mlp(nn.Module):
        def __init__(self, widths):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i + 1 < len(self.layers):
                    x = F.relu(x)
            return x

    class CausalSelfAttention(nn.Module):
        def __init__(self, c, n_head, block, p):
            super().__init__()
            self.n_head = n_head
            self.qkv = nn.Linear(c, 3 * c)
            self.proj = nn.Linear(c, c)
            self.attn_drop = nn.Dropout(p)
            self.resid_drop = nn.Dropout(p)
            self.register_buffer("mask", torch.triu(torch.ones(block, block, dtype=torch.bool), diagonal=1))

        def forward(self, x):
            B, T, C = x.shape
            H = self.n_head
            hd = C // H
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, T, H, hd).transpose(1, 2)
            k = k.view(B, T, H, hd).transpose(1, 2)
            v = v.view(B, T, H, hd).transpose(1, 2)
            att = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(self.mask[:T, :T], float("-inf"))
            att = self.attn_drop(F.softmax(att, dim=-1))
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            return self.resid_drop(self.proj(y))

    class Block(nn.Module):
        def __init__(self, c, n_head, block, p):
            super().__init__()
            self.ln1 = nn.LayerNorm(c, eps=1e-5)
            self.attn = CausalSelfAttention(c, n_head, block, p)
            self.ln2 = nn.LayerNorm(c, eps=1e-5)
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(approximate="tanh"), nn.Linear(4 * c, c))
            self.drop = nn.Dropout(p)

        def forward(self, x):
            h = x + self.attn(self.ln1(x))
            return h + self.drop(self.mlp(self.ln2(h)))

    class Gpt(nn.Module):
        def __init__(self, vocab, block, n_layer, n_head, c, p=0.0):
            super().__init__()
            self.wte = nn.Embedding(vocab, c)
            self.wpe = nn.Embedding(block, c)
            self.blocks = nn.ModuleList(Block(c, n_head, block, p) for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(c, eps=1e-5)
            residual_std = 0.02 / math.sqrt(2 * n_layer)
            for name, t in self.named_parameters():   # GPT-2 init, as src/nn/gpt.cpp
                if ".ln" in name or name.startswith("ln_f"):
                    continue
                if name.endswith(".bias"):
                    nn.init.zeros_(t)
                else:
                    residual = name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight")
                    nn.init.normal_(t, 0.0, residual_std if residual else 0.02)

        def loss(self, ids, targets):
            T = ids.shape[1]
            pos = torch.arange(0, T, device=ids.device)
            x = self.wte(ids) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)   # tied head
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return Mlp, Gpt


def make_workloads(torch, dev):
    """name -> (loss_fn, params, lr, weight_decay), as tools/workloads.h builds them."""
    Mlp, Gpt = build_models(torch)
    torch.manual_seed(1)
    out = {}

    def mlp(widths, batch):
        m = Mlp(widths).to(dev).to(torch.bfloat16)
        x = torch.randn(batch, widths[0], device=dev).to(torch.bfloat16)
        y = torch.arange(batch, device=dev) % widths[-1]
        return (lambda: torch.nn.functional.cross_entropy(m(x), y)), m, 3e-3, 0.0

    def gpt(vocab, block, n_layer, n_head, c, batch):
        m = Gpt(vocab, block, n_layer, n_head, c).to(dev).to(torch.bfloat16)
        n = batch * block
        ids = torch.tensor([(i * 7 + i // block) % vocab for i in range(n + 1)], device=dev)
        x = ids[:-1].reshape(batch, block).clone()
        y = ids[1:].reshape(batch, block).clone()
        return (lambda: m.loss(x, y)), m, 3e-3, 0.1

    out["mlp_784_128_10_b32"] = lambda: mlp([784, 128, 10], 32)
    out["block_b8_t64_c256_h4"] = lambda: gpt(64, 64, 1, 4, 256, 8)
    out["demo_gpt_2x64_b16_t32"] = lambda: gpt(65, 32, 2, 4, 64, 16)
    return out


def adamw(torch, model, lr, wd, capturable):
    kwargs = dict(lr=lr, weight_decay=wd)
    try:
        return torch.optim.AdamW(model.parameters(), fused=True, capturable=capturable, **kwargs)
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(model.parameters(), capturable=capturable, **kwargs)


def time_eager(torch, make):
    loss_fn, model, lr, wd = make()
    opt = adamw(torch, model, lr, wd, capturable=False)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        return loss

    def batch():
        for _ in range(STEPS_PER_BATCH):
            step()
        torch.cuda.synchronize()

    ms = median_ms(batch) / STEPS_PER_BATCH
    return ms, float(step().item())


def time_graph(torch, make):
    loss_fn, model, lr, wd = make()
    opt = adamw(torch, model, lr, wd, capturable=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    with torch.cuda.graph(g):
        static_loss = loss_fn()
        static_loss.backward()
        opt.step()
    torch.cuda.synchronize()
    capture_ms = (time.perf_counter() - t0) * 1e3

    def batch():
        for _ in range(STEPS_PER_BATCH):
            g.replay()
        torch.cuda.synchronize()

    ms = median_ms(batch) / STEPS_PER_BATCH
    return ms, float(static_loss.item()), capture_ms


def time_chain(torch, dev, n):
    x0 = torch.zeros(256, device=dev)

    def chain():
        with torch.no_grad():
            x = x0
            for _ in range(n):
                x = x + 1.0
        return x

    def eager():
        chain()
        torch.cuda.synchronize()

    eager_ms = median_ms(eager)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    t0 = time.perf_counter()
    with torch.cuda.graph(g):
        out = chain()
    torch.cuda.synchronize()
    capture_ms = (time.perf_counter() - t0) * 1e3

    def replay():
        g.replay()
        torch.cuda.synchronize()

    replay_ms = median_ms(replay)
    got = float(out[0].item())
    if got != float(n):
        raise RuntimeError(f"graph chain gave {got}, expected {n}")
    return {"eager_us_per_kernel": eager_ms * 1e3 / n, "replay_us_per_kernel": replay_ms * 1e3 / n,
            "speedup": eager_ms / replay_ms, "capture_ms": capture_ms}


def run(args):
    try:
        import torch   # here, not at the top: py_compile and --help work without PyTorch
    except ImportError as e:
        print(f"torch_steps: PyTorch is not importable here ({e}); nothing measured", file=sys.stderr)
        return 3

    if not torch.cuda.is_available():   # exit 2: no GPU
        print("torch_steps: no GPU visible to PyTorch; nothing measured", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
              "steps_per_batch": STEPS_PER_BATCH, "batches": BATCHES, "steps": {}, "chain": {}}
    failed = False
    for name, make in make_workloads(torch, dev).items():
        if args.only and args.only not in name:
            continue
        try:   # one model's failure must not cost the others' figures
            eager_ms, eager_loss = time_eager(torch, make)
            graph_ms, graph_loss, capture_ms = time_graph(torch, make)
        except Exception as e:   # noqa: BLE001 - reported, and the exit status says so
            print(f"torch_steps: {name}: {type(e).__name__}: {e}", file=sys.stderr)
            result["steps"][name] = {"error": f"{type(e).__name__}: {e}"}
            failed = True
            continue
        result["steps"][name] = {"eager_ms": eager_ms, "graph_ms": graph_ms, "speedup": eager_ms / graph_ms,
                                 "capture_ms": capture_ms, "eager_loss": eager_loss, "graph_loss": graph_loss}
    for n in args.chain:
        try:
            result["chain"][str(n)] = time_chain(torch, dev, n)
        except Exception as e:   # noqa: BLE001
            print(f"torch_steps: chain {n}: {type(e).__name__}: {e}", file=sys.stderr)
            result["chain"][str(n)] = {"error": f"{type(e).__name__}: {e}"}
            failed = True
    if args.json:
        print(json.dumps(result))
        return 1 if failed else 0
    print(f"torch {result['torch']} on {result['gpu']}; ms per step = median of {BATCHES} batches of "
          f"{STEPS_PER_BATCH} steps / {STEPS_PER_BATCH}")
    print(f"{'benchmark':<40}{'eager_ms':>12}{'graph_ms':>12}{'speedup':>10}{'capture_ms':>12}{'loss':>10}")
    for name, r in result["steps"].items():
        if "error" in r:
            print(f"{'torch_step/' + name:<40}error: {r['error']}")
            continue
        print(f"{'torch_step/' + name:<40}{r['eager_ms']:>12.4f}{r['graph_ms']:>12.4f}{r['speedup']:>10.2f}"
              f"{r['capture_ms']:>12.2f}{r['graph_loss']:>10.4f}")
    print(f"{'benchmark':<40}{'eager_us/k':>12}{'replay_us/k':>12}{'speedup':>10}{'capture_ms':>12}")
    for n, r in result["chain"].items():
        if "error" in r:
            print(f"{'torch_chain/' + n:<40}error: {r['error']}")
            continue
        print(f"{'torch_chain/' + n:<40}{r['eager_us_per_kernel']:>12.3f}{r['replay_us_per_kernel']:>12.3f}"
              f"{r['speedup']:>10.2f}{r['capture_ms']:>12.2f}")
    return 1 if failed else 0


def positive_int(text):
    n = int(text)
    if n < 1:   # a chain of 0 kernels would divide by zero
        raise argparse.ArgumentTypeError(f"{text} is not a positive kernel count")
    return n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--chain", type=positive_int, nargs="*", default=[1000], help="launch-chain lengths (default 1000)")
    p.add_argument("--only", default="", help="run only the models whose name contains this")
    return run(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
