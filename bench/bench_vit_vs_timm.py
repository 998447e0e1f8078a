#!/usr/bin/env python
"""Training throughput of the book's ViT against timm's `VisionTransformer` of the same
configuration.

Both models are built with the same shape (`txbook.vit.vit_d192_l6_patch4_28`'s: 28x28 images,
patches of 4, D 192, 6 blocks of 6 heads, MLP ratio 2, a CLS token, no dropout) and must have the
same number of parameters. One step is the same for both: forward under autocast (bf16 by default on
a GPU), cross-entropy, backward, AdamW (fused on CUDA), zeroing the gradients. Steps are timed in
interleaved rounds (ours, timm, ours, ...) after warm-up, each round read by `txbook.perf.Stopwatch`
(it waits for the GPU at both ends); the table gives images/s (median over rounds) and ours / timm
as time per step (below 1: ours is faster). `--compile` adds both models under torch.compile.

timm imports torchvision, which has no build for the book's CPU wheel of torch: where torchvision
does not import, `bench/torchvision_stub.py` stands in for it (timm's ViT uses none of it; anything
that would raises). Without timm at all the script times the book's model alone and says so.
`--profile` lists, for one training step of each model, the operators PyTorch ran (counts and self
CPU time): where the two differ is where a gap in speed comes from (an extra copy, a reshape that is
not a view, Python between kernels).

    python bench/bench_vit_vs_timm.py                         # GPU, bf16, eager
    python bench/bench_vit_vs_timm.py --compile               # also compiled
    python bench/bench_vit_vs_timm.py --device cpu --batch 8 --steps 2 --rounds 1   # smoke test
    python bench/bench_vit_vs_timm.py --device cpu --batch 64 --profile     # where the time goes
"""
from __future__ import annotations
import argparse, statistics

import torch
import torch.nn.functional as F
from txbook.perf import Stopwatch
from txbook.core import default_device, seed_everything
from txbook.amp import autocast
from txbook.vit import ViT


# vit_d192_l6_patch4_28's shape, no dropout (dropout costs both models the same kernels)
CFG = dict(img_size=28, patch_size=4, in_chans=1, n_classes=10, d_model=192, depth=6, n_heads=6,
           mlp_ratio=2.0)


def timm_twin(cfg: dict):
    "timm's VisionTransformer of the shape `cfg`, or None if timm is missing"
    # bench/: a stand-in where torchvision cannot be installed
    import torchvision_stub
    torchvision_stub.install()
    try:
        from timm.models.vision_transformer import VisionTransformer
    except ImportError:
        return None
    return VisionTransformer(img_size=cfg['img_size'], patch_size=cfg['patch_size'],
                             in_chans=cfg['in_chans'], num_classes=cfg['n_classes'],
                             embed_dim=cfg['d_model'], depth=cfg['depth'], num_heads=cfg['n_heads'],
                             mlp_ratio=cfg['mlp_ratio'], qkv_bias=True, class_token=True,
                             global_pool='token')


def n_params(m) -> int: return sum(p.numel() for p in m.parameters())


def make_step(model, device, precision, batch, img, in_chans):
    "A closure running one training step on fixed random data"
    x = torch.randn(batch, in_chans, img, img, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == 'cuda')
    def step():
        with autocast(device, precision):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def time_rounds(steps: dict, n_steps, rounds, warmup) -> dict:
    "Median seconds per step of each closure, timed in interleaved rounds"
    for s in steps.values():
        for _ in range(warmup): s()
    out = {k: [] for k in steps}
    for _ in range(rounds):
        for k, s in steps.items():
            with Stopwatch() as sw:                     # waits for the GPU at both ends
                for _ in range(n_steps): s()
            out[k].append(sw.wall / n_steps)
    return {k: statistics.median(v) for k, v in out.items()}


def profile_step(step, name: str, top: int = 12) -> dict[str, int]:
    """Run one step under torch.profiler; print its most expensive operators; return {operator:
    calls}"""
    from torch.profiler import profile, ProfilerActivity
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    step()                                                  # warm
    with profile(activities=acts) as prof:
        step()
    ev = prof.key_averages()
    print(f"\n{name}: {sum(e.count for e in ev)} operator calls in one step")
    print(ev.table(sort_by='self_cpu_time_total', row_limit=top, max_name_column_width=40))
    return {e.key: e.count for e in ev}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--device', default=None, help='default: the best available')
    ap.add_argument('--precision', default='auto', help="'auto' (bf16 from Ampere), 'fp32', "
                                                        "'bf16', 'fp16'")
    ap.add_argument('--batch', type=int, default=128)
    ap.add_argument('--steps', type=int, default=50, help='steps per round')
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--warmup', type=int, default=10)
    ap.add_argument('--compile', action='store_true', help='also time both models compiled')
    ap.add_argument('--profile', action='store_true', help="profile one step of each model")
    a = ap.parse_args()
    device = torch.device(a.device) if a.device else default_device()
    seed_everything(0)
    ours = ViT(**CFG, dropout=0.0).to(device)
    twin = timm_twin(CFG)
    models = {'txbook': ours}
    if twin is None:
        print('timm is not installed here: timing the book\'s ViT alone')
    else:
        twin = twin.to(device)
        assert n_params(twin) == n_params(ours), (n_params(twin), n_params(ours))
        models['timm'] = twin
    print(f"ViT D192-L6/4 on 28x28 ({n_params(ours) / 1e6:.2f}M parameters), batch {a.batch}, "
          f"{device}, precision {a.precision}, torch {torch.__version__}")
    steps = {k: make_step(m, device, a.precision, a.batch, 28, 1) for k, m in models.items()}
    if a.compile:
        steps.update(
            {f'{k} compiled': make_step(torch.compile(m), device, a.precision, a.batch, 28, 1)
             for k, m in models.items()})
    if a.profile:
        counts = {k: profile_step(s, k) for k, s in steps.items() if 'compiled' not in k}
        if 'timm' in counts:
            ours, theirs = counts['txbook'], counts['timm']
            diff = {op: ours.get(op, 0) - theirs.get(op, 0) for op in ours.keys() | theirs.keys()}
            print("operator calls, ours minus timm's (one step):")
            for op, d in sorted(diff.items(), key=lambda kv: -abs(kv[1])):
                if d: print(f"  {op:40s} {d:+d}")
    t = time_rounds(steps, a.steps, a.rounds, a.warmup)
    print('| model | ms/step | images/s |\n|---|---|---|')
    for k, s in t.items():
        print(f"| {k} | {s * 1e3:.2f} | {a.batch / s:,.0f} |")
    if 'timm' in t: print(f"train step, ours / timm (time): {t['txbook'] / t['timm']:.3f}")
    if a.compile:
        print(
            f"train step, compiled / eager (time), ours: {t['txbook compiled'] / t['txbook']:.3f}")
        if 'timm' in t:
            print("train step, ours / timm compiled (time): "
                  f"{t['txbook compiled'] / t['timm compiled']:.3f}")


if __name__ == '__main__':
    main()
