#!/usr/bin/env python
"""txbook's ViT against Hugging Face's `ViTForImageClassification`: train-step and inference time,
same weights.

Both models hold the same weights (`ViT.from_hf`), get the same batch, and are timed in one process,
interleaved (ours, theirs, ours, theirs, ... with the order alternating every round), so that a busy
machine slows both alike. The script prints the median time of each and the ratio txbook / Hugging
Face (below 1 = txbook is faster). A train step is forward + cross-entropy + backward + AdamW step;
inference is a forward in eval mode under `torch.inference_mode()`. Before timing it checks that
both give the same logits. Each call is read by `txbook.perf.Stopwatch` (it waits for the GPU at
both ends); the script reports the median wall-clock time and the median process CPU time (all
threads); on a machine shared with other work the CPU time is the steadier of the two.

Default configuration (issue 8): image 32, patch 4, D 192, depth 6, 3 heads, MLP 768, batch 64, 2
CPU threads.

With `--compile` it also times both models wrapped in `torch.compile` (inductor; needs a C++
compiler on a CPU), compiled against compiled, after one untimed call each that compiles them (the
compile time is printed).

With `--json PATH` it also writes the rows, the configuration and where they were measured (commit,
command, machine, load average, versions) to PATH: chapter 10 reads its table from
results/bench/10_vit/.

usage: python bench/bench_vit_vs_hf.py [--rounds 15] [--threads 2] [--batch 64] [--profile]
                                       [--compile] [--json PATH]
"""
import argparse, datetime, json, os, platform, statistics, sys
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import ViTConfig, ViTForImageClassification
from transformers.utils import logging as hf_logging

from txbook.perf import Stopwatch
from txbook.vit import ViT


def make_models(args):
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=args.img, patch_size=args.patch, num_channels=3,
                    hidden_size=args.dim,
                    num_hidden_layers=args.depth, num_attention_heads=args.heads,
                    intermediate_size=4 * args.dim,
                    num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    hf = ViTForImageClassification(cfg).to(args.device)
    ours = ViT.from_hf(hf).to(args.device)
    return ours, hf


def logits_of(model, x):
    out = model(x)
    return out if isinstance(out, torch.Tensor) else out.logits


def make_step(model, x, y):
    "A closure running one training step (forward, loss, backward, AdamW) of `model`"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    def step():
        loss = F.cross_entropy(logits_of(model, x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def make_infer(model, x):
    def infer():
        with torch.inference_mode(): logits_of(model, x)
    return infer


def timed(fn):
    "Wall-clock and process CPU seconds of one call (`Stopwatch` waits for the GPU at both ends)"
    with Stopwatch() as sw: fn()
    return sw.wall, sw.cpu


def interleaved(fa, fb, rounds, warmup=3):
    "Median (wall, CPU) seconds of `fa` and of `fb`, run alternately (the order flips every round)"
    for _ in range(warmup): fa(); fb()
    ta, tb = [], []
    for r in range(rounds):
        if r % 2: tb.append(timed(fb)); ta.append(timed(fa))
        else: ta.append(timed(fa)); tb.append(timed(fb))
    med = lambda ts, i: statistics.median(t[i] for t in ts)
    return (med(ta, 0), med(ta, 1)), (med(tb, 0), med(tb, 1))


def profile(name, fn, n=5):
    from torch.profiler import profile as prof, ProfilerActivity
    for _ in range(2): fn()
    with prof(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(n): fn()
    print(f"\n=== profile: {name} ({n} calls) ===")
    print(p.key_averages().table(sort_by='self_cpu_time_total', row_limit=18))


def compiled_rows(ours, hf, x, y, args):
    "Train-step and inference rows for both models under `torch.compile` (compiled before timing)"
    c_ours, c_hf = torch.compile(ours), torch.compile(hf)
    rows = []
    for name, mode in (('compiled train step', 'train'), ('compiled inference', 'eval')):
        ours.train(mode == 'train'); hf.train(mode == 'train')
        make = (lambda m: make_step(m, x, y)) if mode == 'train' else (lambda m: make_infer(m, x))
        fa, fb = make(c_ours), make(c_hf)
        with Stopwatch() as ca: fa()
        with Stopwatch() as cb: fb()
        print(f"{name}: compiling took {ca.wall:.0f} s (txbook), {cb.wall:.0f} s (Hugging Face)",
              flush=True)
        rows.append((name, *interleaved(fa, fb, args.rounds)))
    return rows


def cpu_name() -> str:
    "The CPU's model name (Linux), or what `platform` knows"
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'): return line.split(':', 1)[1].strip()
    except OSError: pass
    return platform.processor() or platform.machine()


def write_json(args, rows, load_before):
    "The rows (ms), the configuration and where they were measured, as one JSON file"
    import shlex, transformers
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tools'))
    # the commit and whether the tree was clean
    from run_full import commit_info
    from records import source_hashes                      # the files this command runs, hashed
    ms = lambda t: round(t * 1e3, 2)
    rec = dict(page='10_vit', script='bench/bench_vit_vs_hf.py',
               command='python bench/bench_vit_vs_hf.py ' + shlex.join(sys.argv[1:]),
               **commit_info(), sources=source_hashes('bench/bench_vit_vs_hf.py'),
               date=datetime.date.today().isoformat(), seeds=dict(weights=0, batch=1),
               machine=dict(cpu=cpu_name(), cpu_count=os.cpu_count(), threads=args.threads,
                            device=args.device, load_average_before=round(load_before[0], 2),
                            load_average_after=round(os.getloadavg()[0], 2)),
               torch=torch.__version__, transformers=transformers.__version__,
               config=dict(img=args.img, patch=args.patch, dim=args.dim, depth=args.depth,
                           heads=args.heads, batch=args.batch, rounds=args.rounds),
               rows=[dict(name=name, txbook_wall_ms=ms(a), hf_wall_ms=ms(b), txbook_cpu_ms=ms(ac),
                          hf_cpu_ms=ms(bc), cpu_ratio=round(ac / bc, 3))
                     for name, (a, ac), (b, bc) in rows])
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rec, indent=1) + '\n')
    print(f"wrote {args.json}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--rounds', type=int, default=15, help='timed runs of each model (after 3 '
                                                           'warm-up runs)')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--batch', type=int, default=64)
    ap.add_argument('--img', type=int, default=32)
    ap.add_argument('--patch', type=int, default=4)
    ap.add_argument('--dim', type=int, default=192)
    ap.add_argument('--depth', type=int, default=6)
    ap.add_argument('--heads', type=int, default=3)
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--profile', action='store_true', help='also print a torch.profiler table of '
                                                           'each')
    ap.add_argument('--compile', action='store_true', help='also time both under torch.compile')
    ap.add_argument('--json', default=None, help='also write the results to this JSON file')
    args = ap.parse_args()
    load_before = os.getloadavg()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    ours, hf = make_models(args)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, args.img, args.img, generator=g).to(args.device)
    y = torch.randint(0, 10, (args.batch,), generator=g).to(args.device)
    ours.eval(); hf.eval()
    with torch.no_grad(): diff = (logits_of(ours, x) - logits_of(hf, x)).abs().max().item()
    assert diff < 1e-4, f"the two models disagree: max |logit difference| {diff:.1e}"

    rows = []
    ti_ours, ti_hf = interleaved(make_infer(ours, x), make_infer(hf, x), args.rounds)
    ours.train(); hf.train()
    ts_ours, ts_hf = interleaved(make_step(ours, x, y), make_step(hf, x, y), args.rounds)
    rows = [('train step (fwd+bwd+AdamW)', ts_ours, ts_hf),
            ('inference (eval, no grad)', ti_ours, ti_hf)]
    if args.compile: rows += compiled_rows(ours, hf, x, y, args)
    print(f"ViT image {args.img}, patch {args.patch}, D {args.dim}, depth {args.depth}, "
          f"{args.heads} heads, "
          f"batch {args.batch}, {args.threads} thread(s), {args.device}; median of {args.rounds} "
          f"interleaved runs; torch {torch.__version__}")
    print("wall = median wall-clock time; CPU = median process CPU time (less sensitive to other "
          "load)")
    print(f"| {'':28s} | txbook wall (ms) | HF wall (ms) | ratio | txbook CPU (ms) | HF CPU (ms) | "
          "ratio |")
    print(f"|{'-' * 30}|------------------|--------------|-------|"
          "-----------------|-------------|-------|")
    for name, (a, ac), (b, bc) in rows:
        print(f"| {name:28s} | {a * 1e3:16.1f} | {b * 1e3:12.1f} | {a / b:5.2f} "
              f"| {ac * 1e3:15.1f} | {bc * 1e3:11.1f} | {ac / bc:5.2f} |")
    if args.json: write_json(args, rows, load_before)
    if args.profile:
        ours.eval(); hf.eval()
        profile('txbook inference', make_infer(ours, x)); profile('Hugging Face inference',
                                                                  make_infer(hf, x))
        ours.train(); hf.train()
        profile('txbook train step', make_step(ours, x, y)); profile('Hugging Face train step',
                                                                     make_step(hf, x, y))


if __name__ == '__main__':
    main()
