"""Table 1 of the position-labels paper (Zhang, Gong & Wu), larger than chapter 07 can afford on a CPU.

A ViT on Fashion-MNIST with {position embedding, none} x {no labels, APL, RPL}, each label in the paper's
regression (MSE) and the official code's classification (CE) variant; several seeds per row, the same data,
batches, steps and model for every row; test accuracy with the heads dropped. Prints a Markdown table
(mean ± std over seeds, every seed's value) and a verdict per row against its baseline: a difference counts
if it exceeds twice the larger of the two standard deviations.

    python bench/bench_poslabels.py                       # CPU: 10,000 images, 3 epochs, 3 seeds (~4 CPU-min)
    python bench/bench_poslabels.py --n-train 60000 --epochs 30 --patch 4 --d-model 192 --depth 6 --heads 6
"""
from __future__ import annotations
import argparse, json, time
import torch
from txbook.core import seed_everything, default_device
from txbook.data import load_mnist, TensorLoader
from txbook.train import fit, evaluate
from txbook.vit import ViT
from txbook.poslabels import APLHead, RPLHead, PositionLabelViT

ROWS = [('none', 'regress'), ('APL', 'regress'), ('APL', 'classify'), ('RPL', 'regress'), ('RPL', 'classify')]

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
    dev = default_device()
    xtr, ytr = load_mnist('fashion-mnist', 'train'); xte, yte = load_mnist('fashion-mnist', 'test')
    prep = lambda x: (x[:, None].float() / 255 - 0.2860) / 0.3530
    Xtr, Ytr = prep(xtr[:a.n_train]), ytr[:a.n_train]
    test_dl = TensorLoader(prep(xte[:a.n_test]), yte[:a.n_test], batch_size=1000)
    results, t0 = {}, time.process_time()
    for pos in ('learned', 'none'):
        for label, kind in ROWS:
            accs = []
            for seed in range(a.seeds):
                seed_everything(seed)
                vit = ViT(img_size=28, patch_size=a.patch, in_chans=1, n_classes=10, d_model=a.d_model,
                          depth=a.depth, n_heads=a.heads, mlp_ratio=2.0, pos=pos, pool=a.pool)
                head = dict(grid=vit.grid, hidden=a.d_model, kind=kind)
                model = PositionLabelViT(vit, lam=a.lam,
                                         apl=APLHead(a.d_model, **head) if label == 'APL' else None,
                                         rpl=RPLHead(a.d_model, **head) if label == 'RPL' else None)
                dl = TensorLoader(Xtr, Ytr, batch_size=a.batch_size, shuffle=True, seed=seed)
                fit(model, dl, epochs=a.epochs, lr=a.lr, warmup=0.1, loss_fn=model.loss, device=dev,
                    verbose=False, progress=False)
                accs.append(evaluate(vit, test_dl, device=dev)['accuracy'])
            results[f'{pos}/{label}/{kind}'] = accs
            acc = torch.tensor(accs)
            print(f"{pos:8s} {label:4s} {kind:9s} {100 * acc.mean():6.2f} ± {100 * acc.std():4.2f}  "
                  f"({time.process_time() - t0:.0f} CPU-s so far)", flush=True)
    steps = a.epochs * len(TensorLoader(Xtr, batch_size=a.batch_size))
    print(f"\nViT D={a.d_model}, depth {a.depth}, patch {a.patch}, pool={a.pool}; {a.n_train} training images, "
          f"{steps} steps of {a.batch_size}, lr {a.lr}, λ={a.lam}; {a.seeds} seeds; test on {a.n_test} images; "
          f"{time.process_time() - t0:.0f} CPU-seconds\n")
    print('| method | top-1 (%) | vs its baseline | seeds |\n|---|---|---|---|')
    for key, accs in results.items():
        pos, label, kind = key.split('/')
        acc, base = torch.tensor(accs), torch.tensor(results[f'{pos}/none/regress'])
        if label == 'none' and pos == 'none': base = torch.tensor(results['learned/none/regress'])
        d, tol = 100 * (acc.mean() - base.mean()), 200 * max(acc.std(), base.std())
        verdict = 'better' if d > tol else 'worse' if d < -tol else 'no measurable difference'
        name = ('ViT + PE' if pos == 'learned' else 'ViT') + ('' if label == 'none' else
                f" + {label} ({'MSE' if kind == 'regress' else 'CE'})")
        cmp = '(baseline)' if key == 'learned/none/regress' else f'{d:+.2f} (±{tol:.2f}): {verdict}'
        print(f"| {name} | {100 * acc.mean():.2f} ± {100 * acc.std():.2f} | {cmp} | "
              f"{', '.join(f'{100 * v:.2f}' for v in accs)} |")
    if a.json: json.dump({'args': vars(a), 'results': results}, open(a.json, 'w'), indent=1)

if __name__ == '__main__':
    main()
