#!/usr/bin/env python
"""Time txbook's MultiHeadAttention against torch.nn.MultiheadAttention, forward + backward, on the
same shapes.

usage: python bench/bench_mhsa.py [--reps 21] [--warmup 3] [--threads T] [--sizes 64 256 1024]
                                  [--device cpu] [--profile]
                                  [--json results/bench/02_mhsa/bench_mhsa.json]

Both modules hold the same weights (`mha_from_torch`). PyTorch is called with need_weights=False,
the fair comparison: with need_weights=True it materialises and averages the (B, H, N, N) weights
instead of using the fused kernel. Each measurement is one forward + backward of sum(y) w.r.t. the
input and all parameters, read by `txbook.perf.Stopwatch` (wall-clock and process CPU seconds; it
waits for the GPU at both ends).

The floor. Every round times four calls, interleaved (their order rotates from round to round, so
that machine noise hits all four alike): our module, PyTorch's, and the two parts that any module
computing this layer with these kernels must run, each on its own with its inputs as leaf tensors:
the attention kernel (`F.scaled_dot_product_attention` on contiguous (B, H, N, Dh) queries, keys and
values, forward + backward) and the products (the layer's two `nn.Linear`s, D -> 3D and D -> D,
forward + backward). All four are summarised by the same statistic, the median over `reps` rounds
after `warmup` rounds, and

    ratio = ours / torch,  floor = (kernel + products) / torch,  rest = module - kernel - products,

so the table's columns add up: `floor` is the ratio of a module whose "rest" (copies, the split's
gradient, bookkeeping) took no time. The fastest run of each is printed too (on a shared machine it
is the estimate least disturbed by other work), and the median of the process CPU time (all
threads). The record stores the raw per-round times and the machine's load average at the start and
at the end: a record made on a busy machine is noisier, and the book's should be made on an idle
one.

With --profile, each N is also profiled (torch.profiler, 5 steps per module) and the operators
outside the kernel and the products are printed by self time: what each module's "rest" is made of
(printed only, not recorded).
"""
import argparse, datetime, json, os, platform, shlex, statistics, sys
from pathlib import Path
import torch
import torch.nn.functional as F
from torch import nn
from txbook.perf import Stopwatch
from txbook.mhsa import mha_from_torch


def timed(fn, leaves):
    "One call of `fn` (forward + backward) after clearing the grads of `leaves`: (wall s, CPU s)"
    for t in leaves: t.grad = None
    with Stopwatch() as sw:                                 # waits for the GPU at both ends
        fn()
    return sw.wall, sw.cpu


def setup(B, N, D, H, device):
    """The four calls to time, {name: (fn, leaves)}: our module, PyTorch's, the kernel alone, the
    products alone"""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(D, H, batch_first=True).to(device)
    ours = mha_from_torch(ref).to(device)
    x = torch.randn(B, N, D, device=device, requires_grad=True)
    with torch.no_grad():
        assert torch.allclose(ours(x), ref(x, x, x, need_weights=False)[0],
                              atol=1e-5), "outputs differ"
    Dh = D // H
    q, k, v = (torch.randn(B, H, N, Dh, device=device, requires_grad=True) for _ in range(3))
    # the gradient reaching the kernel
    g_attn = torch.randn(B, H, N, Dh, device=device)
    to_qkv, to_out = nn.Linear(D, 3 * D).to(device), nn.Linear(D, D).to(device)
    x_qkv, x_out = (torch.randn(B, N, D, device=device, requires_grad=True) for _ in range(2))
    g_qkv, g_out = torch.randn(B, N, 3 * D, device=device), torch.randn(B, N, D, device=device)
    return {
        'ours': (lambda: ours(x).sum().backward(), [x, *ours.parameters()]),
        'torch': (lambda: ref(x, x, x, need_weights=False)[0].sum().backward(),
                  [x, *ref.parameters()]),
        'kernel': (lambda: F.scaled_dot_product_attention(q, k, v).backward(g_attn), [q, k, v]),
        'products': (
            lambda: torch.autograd.backward([to_qkv(x_qkv), to_out(x_out)], [g_qkv, g_out]),
            [x_qkv, x_out, *to_qkv.parameters(), *to_out.parameters()]),
    }


def bench(B, N, D, H, reps, warmup, device):
    "Interleaved rounds of the four calls: per-round wall and CPU seconds of each, after warm-up"
    calls = setup(B, N, D, H, device)
    names = list(calls)
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    for i in range(warmup + reps):
        order = names[i % len(names):] + names[:i % len(names)]       # rotate the order each round
        for k in order:
            t, c = timed(*calls[k])
            if i >= warmup:
                wall[k].append(t)
                cpu[k].append(c)
    return wall, cpu


def row(N, wall, cpu):
    "One row of the table and the record: medians (ms), ratio, floor, rests, and the raw rounds"
    med = {k: 1e3 * statistics.median(v) for k, v in wall.items()}
    fast = {k: 1e3 * min(v) for k, v in wall.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    parts = med['kernel'] + med['products']
    return dict(N=N, ours_ms=med['ours'], torch_ms=med['torch'], ratio=med['ours'] / med['torch'],
                kernel_ms=med['kernel'], products_ms=med['products'],
                ours_rest_ms=med['ours'] - parts, torch_rest_ms=med['torch'] - parts,
                floor=parts / med['torch'],
                fastest_ms={k: fast[k] for k in ('ours', 'torch')},
                fastest_ratio=fast['ours'] / fast['torch'],
                cpu_ratio=cpu_med['ours'] / cpu_med['torch'],
                rounds_ms={k: [round(1e3 * t, 4) for t in v] for k, v in wall.items()})


def profile_rest(B, N, D, H, steps, device, top=5):
    "Per module, print the operators outside the kernel and the products by self time per step (ms)"
    from torch.profiler import profile, ProfilerActivity
    calls = setup(B, N, D, H, device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith('cuda') else [])
    for k in ('ours', 'torch'):
        fn, leaves = calls[k]
        for _ in range(2): timed(fn, leaves)                             # warm-up
        with profile(activities=acts) as prof:
            for _ in range(steps): timed(fn, leaves)
        rest = [(e.self_cpu_time_total / 1e3 / steps, e.key) for e in prof.key_averages()
                if not e.key.startswith('aten::_scaled_dot_product')
                and e.key not in ('aten::mm', 'aten::addmm', 'aten::bmm')]
        rest.sort(reverse=True)
        print(f"{N:>6} {k:>6}: " + ', '.join(f"{name} {ms:.2f}" for ms, name in rest[:top]),
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument('--reps', type=int, default=21)
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--threads', type=int, default=None,
                    help='torch.set_num_threads (default: torch default)')
    ap.add_argument('--sizes', type=int, nargs='+', default=[64, 256, 1024],
                    help='sequence lengths N')
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--d-model', type=int, default=256)
    ap.add_argument('--heads', type=int, default=8)
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--profile', '--breakdown', action='store_true',   # --breakdown: the old name
                    help="also print what each module's rest is made of (profiler, not recorded)")
    ap.add_argument('--json', default=None, help='also write the table to this JSON file (the '
                                                 'record 02 reads)')
    a = ap.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    load_start = os.getloadavg()
    print(f"torch {torch.__version__}, device {a.device}, threads {torch.get_num_threads()}, load "
          "average "
          f"{load_start[0]:.1f}, B={a.batch} D={a.d_model} H={a.heads}, {a.reps} rounds after "
          f"{a.warmup} warm-up, fwd+bwd; medians in ms")
    print(f"{'N':>6} {'ours':>8} {'torch':>8} {'ratio':>6} {'kernel':>8} {'products':>9} "
          f"{'our rest':>9} {'its rest':>9} {'floor':>6}   {'fastest ratio':>13} {'CPU ratio':>9}")
    rows = []
    for N in a.sizes:
        r = row(N, *bench(a.batch, N, a.d_model, a.heads, a.reps, a.warmup, a.device))
        rows.append(r)
        print(f"{N:>6} {r['ours_ms']:>8.2f} {r['torch_ms']:>8.2f} {r['ratio']:>6.3f} "
              f"{r['kernel_ms']:>8.2f} "
              f"{r['products_ms']:>9.2f} {r['ours_rest_ms']:>9.2f} {r['torch_rest_ms']:>9.2f} "
              f"{r['floor']:>6.3f}"
              f"   {r['fastest_ratio']:>13.3f} {r['cpu_ratio']:>9.3f}", flush=True)
    if a.profile:
        print("\nwhat the rest is made of: top operators outside the kernel and the products, self "
              "ms per step")
        for N in a.sizes: profile_rest(a.batch, N, a.d_model, a.heads, 5, a.device)
    load_end = os.getloadavg()
    print(f"ours faster at every N: {all(r['ratio'] < 1 for r in rows)}; floor <= ratio at every "
          "N: "
          f"{all(r['floor'] <= r['ratio'] for r in rows)}; load average {load_start[0]:.1f} at the "
          f"start, {load_end[0]:.1f} now")
    if a.json:
        # the record chapter 2 reads, in the shape of bench/'s records
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tools'))
        # the commit and whether the tree was clean
        from run_full import commit_info
        from records import source_hashes                  # the files this command runs, hashed
        cpu = next(
            (l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo')
             if l.startswith('model name')),
            platform.machine()) if os.path.exists('/proc/cpuinfo') else platform.machine()
        rec = {'page': '02_mhsa', 'script': 'bench/bench_mhsa.py',
               'command': 'python bench/bench_mhsa.py ' + shlex.join(sys.argv[1:]), **commit_info(),
               'sources': source_hashes('bench/bench_mhsa.py'),
               'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
               'machine': {'cpu': cpu, 'cpu_count': os.cpu_count(), 'device': a.device,
                           'torch': torch.__version__, 'threads': torch.get_num_threads(),
                           'load_average_at_start': load_start, 'load_average_at_end': load_end},
               'seeds': [0], 'args': vars(a), 'rows': rows}
        with open(a.json, 'w') as f: json.dump(rec, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == '__main__':
    main()
