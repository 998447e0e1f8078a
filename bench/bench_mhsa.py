#!/usr/bin/env python
"""Time txbook's MultiHeadAttention against torch.nn.MultiheadAttention, forward + backward, on the same shapes.

usage: python bench/bench_mhsa.py [--reps 15] [--warmup 3] [--threads T] [--sizes 64 256 1024] [--device cpu] [--breakdown]
                                  [--json results/bench/02_mhsa/bench_mhsa.json]

Both modules hold the same weights (`mha_from_torch`). PyTorch is called with
need_weights=False, the fair comparison: with need_weights=True it materialises and averages the (B, H, N, N)
weights instead of using the fused kernel. Each measurement is one forward + backward of sum(y) w.r.t. the
input and all parameters; the table reports the median over `reps` runs after `warmup` runs, all in one process,
with the two modules interleaved run by run so that machine noise hits both alike. The fastest run of each is
printed too: on a shared machine it is the estimate least disturbed by other work, and so is the median of the
process CPU time (all threads), which other processes on the machine inflate less than the
wall-clock time. Each run is read by `txbook.perf.Stopwatch` (wall-clock and process CPU seconds;
it waits for the GPU at both ends). The target of issue 8 is a median ratio <= 0.9 at every N.

With --breakdown, each N is also profiled (torch.profiler, a few steps per module) and the self time of every
operator is sorted into three bins: the attention kernel (`aten::_scaled_dot_product*`, forward and backward,
with the operators it calls, such as the zeroing of its gradient buffers), the matrix products of the four projections (`aten::mm`, `addmm`, `bmm`) and everything else (copies, fills,
additions, autograd bookkeeping). Both modules run the same attention kernel on the same shapes and the same
projection products, so `floor` = (ours' kernel + products) / PyTorch's total is the best ratio any module
that computes this layer in float32 with these kernels could reach: the one whose "everything else" is zero.
"""
import argparse, datetime, json, os, platform, shlex, statistics, sys
from pathlib import Path
import torch
from torch import nn
from txbook.perf import Stopwatch
from txbook.mhsa import mha_from_torch


def step(fn, x):
    "One forward + backward; returns (wall seconds, process CPU seconds)"
    x.grad = None
    with Stopwatch() as sw:                                 # waits for the GPU at both ends
        fn(x).sum().backward()
    return sw.wall, sw.cpu


def setup(B, N, D, H, device):
    "PyTorch's layer, ours with the same weights, an input, and the two calls to time"
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(D, H, batch_first=True).to(device)
    ours = mha_from_torch(ref).to(device)
    x = torch.randn(B, N, D, device=device, requires_grad=True)
    fns = {'ours': lambda t: ours(t), 'torch': lambda t: ref(t, t, t, need_weights=False)[0]}
    return ref, ours, x, fns


def bench(B, N, D, H, reps, warmup, device):
    ref, ours, x, fns = setup(B, N, D, H, device)
    with torch.no_grad(): assert torch.allclose(fns['ours'](x), fns['torch'](x), atol=1e-5), "outputs differ"
    times = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for i in range(warmup + reps):
        for k, fn in (fns.items() if i % 2 == 0 else reversed(fns.items())):  # alternate the order
            for p in (ours if k == 'ours' else ref).parameters(): p.grad = None
            t, c = step(fn, x)
            if i >= warmup:
                times[k].append(t)
                cpu[k].append(c)
    return {k: (statistics.median(v), min(v), statistics.median(cpu[k])) for k, v in times.items()}


def breakdown(B, N, D, H, steps, device):
    "Self time per step (ms) of each module in three bins: attention kernel, matrix products, the rest"
    from torch.profiler import profile, ProfilerActivity
    _, _, x, fns = setup(B, N, D, H, device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if x.is_cuda else [])
    out = {}
    for k, fn in fns.items():
        for _ in range(2): step(fn, x)                                  # warm-up
        with profile(activities=acts) as prof:
            for _ in range(steps): step(fn, x)
        bins, total = {'attention': 0.0, 'products': 0.0}, 0.0
        for e in prof.key_averages():
            own = (e.self_device_time_total if x.is_cuda else e.self_cpu_time_total) / 1e3 / steps
            total += own                                                # ms per step
            if e.key.startswith('aten::_scaled_dot_product'):           # the kernel, fwd and bwd,
                bins['attention'] += (e.device_time_total if x.is_cuda  # with what it calls
                                      else e.cpu_time_total) / 1e3 / steps  # (zeroing its grads)
            elif e.key in ('aten::mm', 'aten::addmm', 'aten::bmm'):
                bins['products'] += own
        bins['rest'] = total - bins['attention'] - bins['products']
        out[k] = bins
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument('--reps', type=int, default=15)
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--threads', type=int, default=None, help='torch.set_num_threads (default: torch default)')
    ap.add_argument('--sizes', type=int, nargs='+', default=[64, 256, 1024], help='sequence lengths N')
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--d-model', type=int, default=256)
    ap.add_argument('--heads', type=int, default=8)
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--breakdown', action='store_true',
                    help='also profile each N: time in the attention kernel, the products, the rest')
    ap.add_argument('--json', default=None, help='also write the table to this JSON file (the record 02 reads)')
    a = ap.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, device {a.device}, threads {torch.get_num_threads()}, load average "
          f"{os.getloadavg()[0]:.1f}, B={a.batch} D={a.d_model} H={a.heads}, {a.reps} runs after {a.warmup} warm-up, fwd+bwd")
    print(f"{'N':>6} {'ours ms':>9} {'torch ms':>9} {'ratio':>7}   {'ours min':>9} {'torch min':>9} {'ratio':>7}"
          f"   {'CPU ratio':>9}")
    print(f"{'':>6} {'(median)':>9} {'(median)':>9} {'':>7}   {'(fastest)':>9} {'(fastest)':>9} {'':>7}"
          f"   {'(median)':>9}")
    ratios, rows = [], {}
    for N in a.sizes:
        t = bench(a.batch, N, a.d_model, a.heads, a.reps, a.warmup, a.device)
        (om, on, oc), (tm, tn, tc) = t['ours'], t['torch']
        ratios.append(om / tm)
        rows[N] = dict(N=N, ours_ms=1e3 * om, torch_ms=1e3 * tm, ratio=om / tm)
        print(f"{N:>6} {1e3 * om:>9.2f} {1e3 * tm:>9.2f} {om / tm:>7.3f}   {1e3 * on:>9.2f} {1e3 * tn:>9.2f} "
              f"{on / tn:>7.3f}   {oc / tc:>9.3f}", flush=True)
    if a.breakdown:
        print(f"\nself time per step (ms), profiled over 5 steps each; floor = (ours' attention + products)"
              f" / PyTorch's total")
        print(f"{'N':>6} {'module':>7} {'attention':>10} {'products':>9} {'rest':>7} {'total':>8}"
              f" {'floor':>7}")
        for N in a.sizes:
            b = breakdown(a.batch, N, a.d_model, a.heads, 5, a.device)
            floor = (b['ours']['attention'] + b['ours']['products']) / sum(b['torch'].values())
            rows[N].update({f'ours_{k}_ms': v for k, v in b['ours'].items()}, floor=floor,
                           torch_rest_ms=b['torch']['rest'])
            for k in ('ours', 'torch'):
                v = b[k]
                print(f"{N:>6} {k:>7} {v['attention']:>10.1f} {v['products']:>9.1f} {v['rest']:>7.1f}"
                      f" {sum(v.values()):>8.1f} " + (f"{floor:>7.3f}" if k == 'ours' else ''), flush=True)
    ok = all(r <= 0.9 for r in ratios)
    print(f"target: median ratio <= 0.9 at every N: {'met' if ok else 'NOT met'} "
          f"(worst {max(ratios):.3f}); load average now {os.getloadavg()[0]:.1f}")
    if a.json:                                 # the record chapter 2 reads, in the shape of bench/'s records
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tools'))
        from run_full import commit_info                   # the commit and whether the tree was clean
        cpu = next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')),
                   platform.machine()) if os.path.exists('/proc/cpuinfo') else platform.machine()
        rec = {'page': '02_mhsa', 'script': 'bench/bench_mhsa.py',
               'command': 'python bench/bench_mhsa.py ' + shlex.join(sys.argv[1:]), **commit_info(),
               'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
               'machine': {'cpu': cpu, 'cpu_count': os.cpu_count(), 'device': a.device,
                           'torch': torch.__version__, 'threads': torch.get_num_threads(),
                           'load_average_at_end': os.getloadavg()},
               'seeds': [0], 'args': vars(a), 'rows': list(rows.values())}
        with open(a.json, 'w') as f: json.dump(rec, f, indent=1)


if __name__ == '__main__':
    main()
