"""Chapters 11, 12 and 16 at larger sizes than the chapter can afford: the cost of ViT vs Swin, and the ablations.

    python bench/bench_swin.py cost [--sides 32 64 128 256 384 512] [--threads 1]
    python bench/bench_swin.py ablation [--n-train 60000] [--epochs 10] [--seeds 0 1 2 3 4] [--width 64]

`cost`: FLOPs (PyTorch's FLOP counter on the meta device, so the attention products are counted) and the
time of one forward pass (txbook.perf.time_it: torch.utils.benchmark's median) of a ViT and a one-stage Swin of the same width
(D=64) and depth (2), patches of 4, windows of 8, as the image side grows; prints a Markdown table and the
growth exponents (least-squares slope of log cost against log N).

`ablation`: the slides' Swin ablations (shifted vs not; relative bias vs absolute embedding vs none) and the
position-label rows (Zhang et al., Table 2: + APL, + RPL) on Fashion-MNIST with the chapter's tiny Swin
(32x32 padded images, patches of 4, windows of 4, depths (2, 2)), on the best device; prints mean ± sample
std over the seeds of the test accuracy on all 10,000 test images.
"""
from __future__ import annotations
import argparse, math

import torch
import torch.nn.functional as F
from torch import nn, Tensor
from torch.utils.flop_counter import FlopCounterMode

from txbook.core import seed_everything, default_device
from txbook.perf import torch_threads, time_it, Stopwatch
from txbook.data import load_mnist, normalise, TensorLoader
from txbook.train import fit
from txbook.vit import ViT
from txbook.swin import Swin                                      # chapter 12's class, not a copy
from txbook.poslabels import APLHead, RPLHead, PositionLabelSwin  # chapter 13's


def vit_at(side: int) -> ViT:
    return ViT(img_size=side, patch_size=4, in_chans=3, n_classes=10, d_model=64, depth=2, n_heads=4)


def swin_at(side: int) -> Swin:
    return Swin(img_size=side, patch_size=4, in_chans=3, n_classes=10, d_model=64, depths=(2,), n_heads=(4,),
                window=8)


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
            rows.append(dict(model=name, side=side, N=(side // 4) ** 2, flops=fc.get_total_flops(), attn=bmm, s=t))
            print(f"{name:4s} side {side:4d} N {(side // 4) ** 2:6d}: {fc.get_total_flops() / 1e9:8.2f} GFLOP "
                  f"(attention products {bmm / 1e9:8.2f}), {t * 1e3:9.1f} ms", flush=True)
    print(f"\n| model | side | N | GFLOP | attention GFLOP | ms ({dev.type}) |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['side']} | {r['N']} | {r['flops'] / 1e9:.2f} | {r['attn'] / 1e9:.2f} | "
              f"{r['s'] * 1e3:.1f} |")
    for name in ('ViT', 'Swin'):
        rs = [r for r in rows if r['model'] == name]
        N = torch.tensor([r['N'] for r in rs], dtype=torch.float64).log()
        A = torch.stack([N, torch.ones_like(N)], 1)
        fit_ = lambda q: torch.linalg.lstsq(A, torch.tensor([r[q] for r in rs], dtype=torch.float64).log()[:, None]
                                            ).solution[0, 0].item()
        last = math.log(rs[-1]['s'] / rs[-2]['s']) / math.log(rs[-1]['N'] / rs[-2]['N'])
        print(f"{name}: exponent of FLOPs {fit_('flops'):.2f}, of attention FLOPs {fit_('attn'):.2f}, of time "
              f"{fit_('s'):.2f} (last step {last:.2f})")


def ablation(args):
    dev = torch.device(args.device) if args.device else default_device()
    xtr, ytr = load_mnist('fashion-mnist', 'train')
    xte, yte = load_mnist('fashion-mnist', 'test')
    prep = lambda x: normalise(F.pad(x, (2, 2, 2, 2)))          # background padding, standardised
    train_x, train_y = prep(xtr[:args.n_train]), ytr[:args.n_train]
    test_dl = TensorLoader(prep(xte), yte, batch_size=1000)
    last = lambda m: m.stage_grids(m.grid)[-1]
    rows = {'shifted windows, relative bias': ({}, None), 'no shift, relative bias': (dict(shifted=False), None),
            'shifted, absolute embedding': (dict(rel_pos=False, abs_pos=True), None),
            'shifted, no position encoding': (dict(rel_pos=False), None),
            '+ APL': ({}, lambda m: PositionLabelSwin(m, APLHead(m.d_out, grid=last(m)))),
            '+ RPL': ({}, lambda m: PositionLabelSwin(m, RPLHead(m.d_out, grid=last(m))))}
    heads = (2, 4) if args.width <= 32 else (3, 6)
    res = {}
    for name, (kw, wrap) in rows.items():
        accs = []
        for seed in args.seeds:
            seed_everything(seed)
            model = Swin(img_size=32, patch_size=4, in_chans=1, n_classes=10, d_model=args.width, depths=(2, 2),
                         n_heads=heads, window=4, mlp_ratio=2.0, drop_path=args.drop_path, **kw)
            if wrap is not None: model = wrap(model)
            dl = TensorLoader(train_x, train_y, batch_size=args.batch_size, shuffle=True, seed=seed)
            with Stopwatch() as sw, torch_threads(args.threads):
                how = dict(label_smoothing=0.1) if wrap is None else dict(objective=model.objective)
                hist = fit(model, dl, test_dl, epochs=args.epochs, lr=args.lr, warmup=0.1, device=dev,
                           verbose=False, progress=False, **how)
            accs.append(hist['valid_acc'][-1] * 100)
            print(f"{name:32s} seed {seed}: {accs[-1]:.2f} % ({sw.wall:.0f} s)", flush=True)
        res[name] = torch.tensor(accs)
    print(f"\n{args.n_train} training images x {args.epochs} epochs, width {args.width}, batch {args.batch_size}, "
          f"lr {args.lr}, device {dev.type}; test accuracy on 10,000 images, mean ± sample std over seeds "
          f"{args.seeds}\n\n| variant | accuracy (%) | runs |\n|---|---|---|")
    for name, a in res.items():
        print(f"| {name} | {a.mean():.2f} ± {a.std():.2f} | {' '.join(f'{v:.2f}' for v in a)} |")


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='what', required=True)
    c = sub.add_parser('cost')
    c.add_argument('--sides', type=int, nargs='+', default=[32, 64, 128, 256, 384])
    a = sub.add_parser('ablation')
    a.add_argument('--n-train', type=int, default=60_000)
    a.add_argument('--epochs', type=int, default=10)
    a.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
    a.add_argument('--width', type=int, default=64)
    a.add_argument('--batch-size', type=int, default=128)
    a.add_argument('--lr', type=float, default=1e-3)
    a.add_argument('--drop-path', type=float, default=0.1)
    for q in (c, a):
        q.add_argument('--device', default=None, help='cpu, cuda, ... (default: the best available)')
        q.add_argument('--threads', type=int, default=1, help='CPU threads')
    args = p.parse_args()
    cost(args) if args.what == 'cost' else ablation(args)
