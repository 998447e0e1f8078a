"""Table 1 of the position-labels paper (Zhang, Gong & Wu), larger than chapter 15 can afford on a
CPU.

A ViT on Fashion-MNIST with {position embedding, none} x {no labels, APL, RPL}, in the paper's
recipe (CLS token, MSE heads) and the official code's (mean of the patches, the code's cross-entropy
heads); the same seeds, data, batches, steps and model for every row; top-1 and top-5 test accuracy
with the heads dropped (chapter 15's `txbook.table1.table1`). Prints a Markdown table (mean ± sample
std over seeds, every seed's value) and the verdict of every claim of the paper (chapter 15's
`judge`: a paired t test on the per-seed differences, appendix B). With --json, writes the record
chapter 15 reads: every seed's accuracies, the command, the commit, the seeds and the machine.

    python bench/bench_poslabels.py                       # CPU: 10,000 images, 3 epochs, 5 seeds
    python bench/bench_poslabels.py --workers 2 --json results/bench/15_table1/table1.json
    python bench/bench_poslabels.py --n-train 60000 --epochs 30 --patch 4 --d-model 192 --depth 6 \
        --heads 6
"""
from __future__ import annotations
import argparse, json, os, sys
from pathlib import Path
import torch
from txbook.core import default_device
from txbook.perf import Stopwatch
from txbook.data import load_mnist, normalise
from txbook.table1 import ROWS, table1, row_name, controls, judge, show_seeds

ROOT = Path(__file__).resolve().parents[1]


def meta(argv: list[str]) -> dict:
    "What a record says about where it came from (tools/run_full.py's bench_meta)"
    sys.path.insert(0, str(ROOT / 'tools'))
    from run_full import bench_meta
    return bench_meta(__file__, argv)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--n-train', type=int, default=10_000)
    ap.add_argument('--n-test', type=int, default=10_000)
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--batch-size', type=int, default=128)
    ap.add_argument('--lr', type=float, default=3e-3)
    ap.add_argument('--lam', type=float, default=0.5, help='weight of the position loss')
    ap.add_argument('--seeds', type=int, default=5, help='seeds 0 .. SEEDS-1')
    ap.add_argument('--patch', type=int, default=7)
    ap.add_argument('--d-model', type=int, default=32)
    ap.add_argument('--depth', type=int, default=2)
    ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--threads', type=int, default=1, help='CPU threads (1 is fastest for tiny '
                                                           'models)')
    ap.add_argument('--workers', type=int, default=1, help='runs side by side (CPU: one process '
                                                           'each)')
    ap.add_argument('--json', default=None, help='write the record here (chapter 15 reads '
                                                 'results/bench/15_table1/table1.json)')
    return ap


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parser().parse_args(argv)
    torch.set_num_threads(a.threads)
    info = meta(argv)
    xtr, ytr = load_mnist('fashion-mnist', 'train'); xte, yte = load_mnist('fashion-mnist', 'test')
    model = dict(patch_size=a.patch, d_model=a.d_model, depth=a.depth, n_heads=a.heads, lam=a.lam)
    seeds = list(range(a.seeds))
    Yte = yte[:a.n_test]
    with Stopwatch() as sw:
        t = table1(normalise(xtr[:a.n_train]), ytr[:a.n_train], normalise(xte[:a.n_test]), Yte,
                   model=model, epochs=a.epochs, lr=a.lr, seeds=seeds, batch_size=a.batch_size,
                   device=default_device(), workers=a.workers,
                   log=lambda line: print(line, flush=True))
    # the children's runs, where they ran apart
    cpu = sw.cpu + (sum(t.cpu) if a.workers > 1 else 0)
    print(f"\nViT D={a.d_model}, depth {a.depth}, patch {a.patch}; {a.n_train} training images, "
          f"{t.steps} steps "
          f"of {a.batch_size}, lr {a.lr}, λ={a.lam}; seeds {seeds}; test on {a.n_test} images; "
          f"{sw.wall:.0f} s wall, {cpu:.0f} CPU-seconds\n")
    guess = controls(Yte, 10)
    print('| method | top-1 (%) | top-5 (%) | top-1 of each seed |\n|---|---|---|---|')
    for key in ROWS:
        print(f"| {row_name(*key)} | {show_seeds(t.top1[key])} | {show_seeds(t.top5[key])} | "
              f"{', '.join(f'{100 * v:.2f}' for v in t.top1[key].tolist())} |")
    for name, (t1, t5) in guess.items(): print(f"| {name} | {t1:.2f} % | {t5:.2f} % | |")
    top1 = {row_name(*k): v for k, v in t.top1.items()}
    if len(seeds) > 1:
        print()
        for (claim, recipe), v in judge(top1).items(): print(f"{claim} [{recipe}]: {v.word}. {v}")
    if a.json:
        rec = {'page': '15_table1', **info, 'args': vars(a), 'seeds': seeds, 'steps': t.steps,
               'wall_s': round(sw.wall, 1), 'cpu_s': round(cpu, 1),
               'rows': {
                   row_name(*k): {'key': list(k), 'top1': t.top1[k].tolist(),
                                  'top5': t.top5[k].tolist(),
                                  'seconds': [round(s, 2) for s in t.seconds[i * len(seeds):
                                                                              (i + 1)
                                                                              * len(seeds)]]}
                   for i, k in enumerate(ROWS)},
               'controls': {k: list(v) for k, v in guess.items()}}
        rec['machine']['load_average_at_end'] = os.getloadavg()
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(rec, indent=1, ensure_ascii=False) + '\n')
        print(f"\nwrote {a.json}")


if __name__ == '__main__':
    main()
