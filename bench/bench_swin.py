"""Chapters 11, 12 and 16 at larger sizes than the chapter can afford: the cost of ViT vs Swin, the
ablations and the position-labels paper's Table 2.

    python bench/bench_swin.py cost [--sides 32 64 128 256 384 512] [--threads 1]
    python bench/bench_swin.py ablation [--n-train 60000] [--epochs 10] [--seeds 0 1 2 3 4] \
        [--width 64]
    python bench/bench_swin.py table2 [--n-train 60000] [--epochs 10] [--seeds 0 1 2 3 4] \
        [--width 64]

`cost`: FLOPs (PyTorch's FLOP counter on the meta device, so the attention products are counted) and
the time of one forward pass (txbook.perf.time_it: torch.utils.benchmark's median) of a ViT and a
one-stage Swin of the same width (D=64) and depth (2), patches of 4, windows of 8, as the image side
grows; prints a Markdown table and the growth exponents (least-squares slope of log cost against log
N).

`ablation`: the slides' Swin ablations (chapter 12: shifted vs not; relative bias vs absolute
embedding vs none) on Fashion-MNIST with the chapter's tiny Swin (32x32 padded images, patches of 4,
windows of 4, depths (2, 2)), on the best device. `table2`: the position-labels paper's Table 2
(chapter 16: position encoding = the relative bias, on or off; no labels, APL or RPL; the paper's
MSE heads and the official code's heads) on the same model. Both print mean ± sample std over the
seeds of the top-1 and top-5 accuracy on all 10,000 test images, and with --json write the record
chapters 12 and 16 read (every seed's accuracies, the command, the commit, the seeds and the
machine). --workers N runs N trainings side by side (one process of --threads each).
"""
from __future__ import annotations
import argparse, json, math, os, sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn, Tensor
from torch.utils.flop_counter import FlopCounterMode

from txbook.core import seed_everything, default_device
from txbook.perf import torch_threads, time_it, Stopwatch, fork_map
from txbook.data import load_mnist, normalise, TensorLoader
from txbook.optim import WarmupCosine
from txbook.train import fit, predict
from txbook.vit import ViT
from txbook.swin import Swin                                      # chapter 12's class, not a copy
from txbook.poslabels import APLHead, RPLHead, PositionLabelSwin  # chapter 13's

ROOT = Path(__file__).resolve().parents[1]


def vit_at(side: int) -> ViT:
    return ViT(img_size=side, patch_size=4, in_chans=3, n_classes=10, d_model=64, depth=2,
               n_heads=4)


def swin_at(side: int) -> Swin:
    return Swin(img_size=side, patch_size=4, in_chans=3, n_classes=10, d_model=64, depths=(2,),
                n_heads=(4,), window=8)


def forward_time(m: nn.Module, x: Tensor) -> float:
    "Seconds of one forward pass: `time_it`'s median (torch.utils.benchmark; a GPU is synchronised)"
    with torch.no_grad():
        return time_it(lambda: m(x))


def cost(args):
    dev = torch.device(args.device) if args.device else default_device()
    rows = []
    for side in args.sides:
        for name, make in [('ViT', vit_at), ('Swin', swin_at)]:
            with torch.device('meta'):
                m, x = make(side), torch.randn(1, 3, side, side)
            with FlopCounterMode(display=False) as fc: m(x)
            bmm = {str(k): v for k, v in fc.get_flop_counts()['Global'].items()}.get('aten.bmm', 0)
            seed_everything(0)
            m, x = make(side).to(dev).eval(), torch.randn(1, 3, side, side, device=dev)
            with torch_threads(args.threads):
                t = forward_time(m, x)
            rows.append(
                dict(model=name, side=side, N=(side // 4) ** 2, flops=fc.get_total_flops(),
                     attn=bmm, s=t))
            print(f"{name:4s} side {side:4d} N {(side // 4) ** 2:6d}: "
                  f"{fc.get_total_flops() / 1e9:8.2f} GFLOP "
                  f"(attention products {bmm / 1e9:8.2f}), {t * 1e3:9.1f} ms", flush=True)
    print(f"\n| model | side | N | GFLOP | attention GFLOP | ms ({dev.type}) "
          "|\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['side']} | {r['N']} | {r['flops'] / 1e9:.2f} | "
              f"{r['attn'] / 1e9:.2f} | {r['s'] * 1e3:.1f} |")
    for name in ('ViT', 'Swin'):
        rs = [r for r in rows if r['model'] == name]
        N = torch.tensor([r['N'] for r in rs], dtype=torch.float64).log()
        A = torch.stack([N, torch.ones_like(N)], 1)
        fit_ = lambda q: torch.linalg.lstsq(
            A, torch.tensor([r[q] for r in rs], dtype=torch.float64).log()[:, None]
            ).solution[0, 0].item()
        last = math.log(rs[-1]['s'] / rs[-2]['s']) / math.log(rs[-1]['N'] / rs[-2]['N'])
        print(f"{name}: exponent of FLOPs {fit_('flops'):.2f}, of attention FLOPs "
              f"{fit_('attn'):.2f}, of time {fit_('s'):.2f} (last step {last:.2f})")


ABLATION = {'shifted windows, relative bias': {}, 'no shift, relative bias': dict(shifted=False),
            'shifted, absolute embedding': dict(rel_pos=False, abs_pos=True),
            'shifted, no position encoding': dict(rel_pos=False)}
# Table 2: (position encoding, labels, head) -> the row's name; PE = the relative bias (chapter 16)
TABLE2 = {(pos, label, kind): ('Swin' + (' + PE' if pos == 'PE' else '')
                               + ('' if label == 'none'
                                  else f" + {label} ({'MSE' if kind == 'regress' else 'code'})"))
          for pos in ('PE', 'none') for label, kind in
          [('none', None), ('APL', 'regress'), ('RPL', 'regress'), ('APL', 'code'),
           ('RPL', 'code')]}


def meta(argv: list[str]) -> dict:
    "What a record says about where it came from (tools/run_full.py's bench_meta)"
    sys.path.insert(0, str(ROOT / 'tools'))
    from run_full import bench_meta
    return bench_meta(__file__, argv)


def topk(logits: Tensor, y: Tensor, k: int) -> float:
    "Fraction of rows whose label is among the k highest scores"
    return (logits.topk(k, dim=-1).indices == y[:, None]).any(-1).float().mean().item()


def positive(text: str) -> int:
    "An argument that must be a whole number, at least 1"
    n = int(text)
    if n < 1: raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def train_rows(args, rows: dict) -> tuple[dict, dict]:
    """Train every row (name -> (Swin options, labels, head kind)) with every seed: per-seed
    results, timing"""
    dev = torch.device(args.device) if args.device else default_device()
    xtr, ytr = load_mnist('fashion-mnist', 'train')
    xte, yte = load_mnist('fashion-mnist', 'test')
    xte, yte = xte[:args.n_test], yte[:args.n_test]              # default: all 10,000
    prep = lambda x: normalise(F.pad(x, (2, 2, 2, 2)))          # background padding, standardised
    train_x, train_y = prep(xtr[:args.n_train]), ytr[:args.n_train]
    test_x = prep(xte)
    heads = (2, 4) if args.width <= 32 else (3, 6)

    def run(job):
        name, seed = job
        kw, labels, kind = rows[name]
        seed_everything(seed)
        model = Swin(img_size=32, patch_size=4, in_chans=1, n_classes=10, d_model=args.width,
                     depths=(2, 2),
                     n_heads=heads, window=4, mlp_ratio=2.0, drop_path=args.drop_path, **kw)
        if labels != 'none':
            Head = {'APL': APLHead, 'RPL': RPLHead}[labels]
            model = PositionLabelSwin(
                model, Head(model.d_out, grid=model.stage_grids(model.grid)[-1], kind=kind))
        dl = TensorLoader(train_x, train_y, batch_size=args.batch_size, shuffle=True, seed=seed)
        with Stopwatch() as sw, torch_threads(args.threads):
            # smoothed CE (+ the model's λ · position loss)
            fit(model, dl, epochs=args.epochs, lr=args.lr, schedule=WarmupCosine(0.1),
                label_smoothing=0.1, device=dev, verbose=False, progress=False)
            logits = predict(model, test_x, batch_size=1000, device=dev)
        return topk(logits, yte, 1), topk(logits, yte, 5), sw.wall, sw.cpu

    jobs = [(name, seed) for name in rows for seed in args.seeds]
    w = max(1, args.workers)
    with Stopwatch() as total:   # w > 1: at most w jobs at once, a forked process each
        outs = (fork_map(run, jobs, threads=args.threads, workers=w) if w > 1
                else [run(j) for j in jobs])
    for (name, seed), o in zip(jobs, outs):
        print(f"{name:32s} seed {seed}: top-1 {100 * o[0]:.2f} %, top-5 {100 * o[1]:.2f} % "
              f"({o[2]:.0f} s)", flush=True)
    res = {name: {'top1': [], 'top5': [], 'seconds': []} for name in rows}
    for (name, seed), o in zip(jobs, outs):
        res[name]['top1'].append(o[0]); res[name]['top5'].append(
            o[1]); res[name]['seconds'].append(round(o[2], 2))
    cpu = total.cpu + (sum(o[3] for o in outs) if w > 1 else 0)
    steps = args.epochs * len(TensorLoader(train_x, batch_size=args.batch_size))
    return res, dict(wall_s=round(total.wall, 1), cpu_s=round(cpu, 1), steps=steps, device=dev.type,
                     n_test=len(yte))


def show(res: dict, args, timing: dict):
    "Print the Markdown table of a run"
    print(f"\n{args.n_train} training images x {args.epochs} epochs ({timing['steps']} steps), "
          f"width {args.width}, "
          f"batch {args.batch_size}, lr {args.lr}, device {timing['device']}; test accuracy on "
          f"{timing['n_test']:,} images, "
          f"mean ± sample std over seeds {args.seeds}; {timing['wall_s']:.0f} s wall, "
          f"{timing['cpu_s']:.0f} "
          "CPU-seconds\n\n| variant | top-1 (%) | top-5 (%) | top-1 of each seed "
          "|\n|---|---|---|---|")
    for name, r in res.items():
        a, b = 100 * torch.tensor(r['top1'], dtype=torch.float64), 100 * torch.tensor(
            r['top5'], dtype=torch.float64)
        print(f"| {name} | {a.mean():.2f} ± {a.std():.2f} | {b.mean():.2f} ± {b.std():.2f} | "
              f"{' '.join(f'{v:.2f}' for v in a)} |")


def ablation(args, argv):
    rows = {name: (kw, 'none', None) for name, kw in ABLATION.items()}
    record(args, argv, rows, '12_swin')


def table2(args, argv):
    rows = {name: ({} if pos == 'PE' else dict(rel_pos=False), label, kind)
            for (pos, label, kind), name in TABLE2.items()}
    record(args, argv, rows, '16_table2')


def record(args, argv, rows: dict, page: str):
    info = meta(argv)
    res, timing = train_rows(args, rows)
    show(res, args, timing)
    if args.json:
        rec = {'page': page, **info, 'args': vars(args), 'seeds': list(args.seeds),
               'steps': timing['steps'], 'n_test': timing['n_test'], 'wall_s': timing['wall_s'],
               'cpu_s': timing['cpu_s'], 'rows': {
                   name: {'options': {k: v for k, v in rows[name][0].items()},
                          'labels': rows[name][1],
                          'kind': rows[name][2], **res[name]} for name in rows}}
        rec['machine']['load_average_at_end'] = os.getloadavg()
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rec, indent=1, ensure_ascii=False) + '\n')
        print(f"\nwrote {args.json}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='what', required=True)
    c = sub.add_parser('cost')
    c.add_argument('--sides', type=int, nargs='+', default=[32, 64, 128, 256, 384])
    trains = [sub.add_parser('ablation'), sub.add_parser('table2')]
    for a in trains:
        a.add_argument('--n-train', type=int, default=60_000)
        a.add_argument('--n-test', type=positive, default=None,
                       help='the first N test images (default: all 10,000)')
        a.add_argument('--epochs', type=int, default=10)
        a.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
        a.add_argument('--width', type=int, default=64)
        a.add_argument('--batch-size', type=int, default=128)
        a.add_argument('--lr', type=float, default=1e-3)
        a.add_argument('--drop-path', type=float, default=0.1)
        a.add_argument('--workers', type=int, default=1,
                       help='trainings side by side (one process each)')
        a.add_argument('--json', default=None, help='write the record here '
                                                    '(results/bench/<page>/<name>.json)')
    for q in (c, *trains):
        q.add_argument('--device', default=None,
                       help='cpu, cuda, ... (default: the best available)')
        q.add_argument('--threads', type=int, default=1, help='CPU threads')
    return p


if __name__ == '__main__':
    argv = sys.argv[1:]
    args = parser().parse_args(argv)
    {'cost': lambda: cost(args), 'ablation': lambda: ablation(args, argv),
     'table2': lambda: table2(args, argv)}[args.what]()
