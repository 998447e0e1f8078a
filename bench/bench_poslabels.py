"""Table 1 of the position-labels paper (Zhang, Gong & Wu), larger than chapter 15 can afford on a CPU.

A ViT on Fashion-MNIST with {position embedding, none} x {no labels, APL, RPL}, each label in the paper's
regression (MSE) and the official code's classification (CE) variant; several seeds per row, the same data,
batches, steps and model for every row; test accuracy with the heads dropped. Prints a Markdown table
(mean ± std over seeds, every seed's value) and a verdict per row against its baseline: a difference counts
if it exceeds twice the larger of the two standard deviations.

    python bench/bench_poslabels.py                       # CPU: 10,000 images, 3 epochs, 3 seeds (~4 CPU-min)
    python bench/bench_poslabels.py --n-train 60000 --epochs 30 --patch 4 --d-model 192 --depth 6 --heads 6
"""
from __future__ import annotations
import argparse, json
import torch
from txbook.core import default_device
from txbook.perf import Stopwatch
from txbook.stats import seed_verdict
from txbook.data import load_mnist, normalise
from txbook.table1 import table1, row_name


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--n-train', type=int, default=10_000)
    ap.add_argument('--n-test', type=int, default=10_000)
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--batch-size', type=int, default=128)
    ap.add_argument('--lr', type=float, default=3e-3)
    ap.add_argument('--lam', type=float, default=0.5, help='weight of the position loss')
    ap.add_argument('--seeds', type=int, default=3)
    ap.add_argument('--patch', type=int, default=7)
    ap.add_argument('--d-model', type=int, default=32)
    ap.add_argument('--depth', type=int, default=2)
    ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--pool', default='cls', choices=['cls', 'mean'])
    ap.add_argument('--threads', type=int, default=1, help='CPU threads (1 is fastest for tiny models)')
    ap.add_argument('--json', default=None, help='also write the per-seed accuracies here')
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    xtr, ytr = load_mnist('fashion-mnist', 'train'); xte, yte = load_mnist('fashion-mnist', 'test')
    model = dict(patch_size=a.patch, d_model=a.d_model, depth=a.depth, n_heads=a.heads, lam=a.lam, pool=a.pool)
    with Stopwatch() as sw:
        t = table1(normalise(xtr[:a.n_train]), ytr[:a.n_train], normalise(xte[:a.n_test]), yte[:a.n_test],
                   model=model, epochs=a.epochs, lr=a.lr, seeds=list(range(a.seeds)), batch_size=a.batch_size,
                   device=default_device(), log=lambda line: print(line, flush=True))
    print(f"\nViT D={a.d_model}, depth {a.depth}, patch {a.patch}, pool={a.pool}; {a.n_train} training images, "
          f"{t.steps} steps of {a.batch_size}, lr {a.lr}, λ={a.lam}; {a.seeds} seeds; test on {a.n_test} images; "
          f"{sw.cpu:.0f} CPU-seconds\n")
    print('| method | top-1 (%) | vs its baseline | seeds |\n|---|---|---|---|')
    for (pos, label, kind), acc in t.accs.items():
        base = ('learned' if label == 'none' else pos, 'none', 'regress')
        if (pos, label, kind) == base: cmp = '(baseline)'
        elif len(acc) < 2: cmp = 'one seed: no verdict'
        else:
            v = seed_verdict(100 * acc, 100 * t.accs[base], names=(row_name(pos, label, kind), row_name(*base)),
                             higher_is_better=True, fmt='.2f')
            cmp = f'{v.diff:+.2f} (±{v.noise:.2f}): {v.word}'
        print(f"| {row_name(pos, label, kind)} | {100 * acc.mean():.2f} ± {100 * acc.std():.2f} | {cmp} | "
              f"{', '.join(f'{100 * v:.2f}' for v in acc.tolist())} |")
    if a.json:
        results = {'/'.join(k): v.tolist() for k, v in t.accs.items()}
        json.dump({'args': vars(a), 'results': results}, open(a.json, 'w'), indent=1)


if __name__ == '__main__':
    main()
