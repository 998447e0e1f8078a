#!/usr/bin/env python
"""The character GPT of chapter 05 at nanoGPT's shakespeare-char size: validation loss and training time.

nanoGPT's `config/train_shakespeare_char.py` trains a 6-layer, 6-head, width-384 GPT (context 256, dropout
0.2) for 5,000 steps of 64 windows with AdamW (lr 1e-3 warmed up over 100 steps, cosine decay to 1e-4,
betas (0.9, 0.99), weight decay 0.1, gradient clipping at 1) and reports a validation loss of about 1.47.
This script trains `txbook.gpt.GPT` with that configuration (the defaults of `GPTConfig`) through
`txbook.text.train_lm`, the loop the chapter uses: the same 90/10 split of tinyshakespeare, bf16 autocast on
a GPU with bf16 (fp16 with loss scaling on older GPUs, float32 on a CPU). The validation loss is the mean
over `--eval-iters` random batches of the validation text, as nanoGPT estimates it.

usage: python bench/bench_chargpt.py [--steps 5000] [--eval-every 250] [--eval-iters 200] [--seed 1337]
                                     [--device cuda] [--json OUT]
A smoke test on a CPU: --steps 2 --eval-every 1 --eval-iters 1 --depth 1 --width 32 --context 16
"""
import argparse, json, time

import torch
from txbook.core import seed_everything
from txbook.data import load_tinyshakespeare
from txbook.gpt import GPT, GPTConfig
from txbook.text import CharTokenizer, train_lm
from txbook.amp import amp_dtype

NANOGPT_VAL_LOSS = 1.4697   # nanoGPT's README: shakespeare-char, "best validation loss is 1.4697"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--steps', type=int, default=5000)
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--eval-every', type=int, default=250)
    ap.add_argument('--eval-iters', type=int, default=200)
    ap.add_argument('--seed', type=int, default=1337)
    ap.add_argument('--depth', type=int, default=6, help='the model is nanoGPT\'s unless changed')
    ap.add_argument('--width', type=int, default=384)
    ap.add_argument('--context', type=int, default=256)
    ap.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    ap.add_argument('--json', default=None, help='also write the results to this JSON file')
    a = ap.parse_args()
    device = torch.device(a.device)
    text = load_tinyshakespeare()
    tok = CharTokenizer(text)
    data = tok.encode(text)
    n_train = int(0.9 * len(data))
    train_data, val_data = data[:n_train], data[n_train:]
    seed_everything(a.seed)
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=a.context, depth=a.depth,
                    n_heads=6 if a.width % 6 == 0 else 4, d_model=a.width)
    model = GPT(cfg).to(device)
    params = sum(p.numel() for p in model.parameters())
    if device.type == 'cuda': torch.cuda.synchronize()
    t0 = time.perf_counter()
    h = train_lm(model, train_data, val_data, steps=a.steps, batch_size=a.batch_size, lr=1e-3,
                 warmup=100 if a.steps > 100 else 0, eval_every=a.eval_every,
                 eval_iters=a.eval_iters, device=device, seed=a.seed)
    if device.type == 'cuda': torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    dtype = amp_dtype(device)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'
    res = dict(device=name, precision=str(dtype).removeprefix('torch.') if dtype else 'float32',
               params=params, steps=a.steps, batch_size=a.batch_size, seed=a.seed,
               final_val_loss=h['valid loss'][-1], best_val_loss=min(h['valid loss']),
               final_train_loss=h['train loss'][-1], wall_s=wall, history=h,
               nanogpt_val_loss=NANOGPT_VAL_LOSS, torch=torch.__version__)
    for s, tr, va in zip(h['step'], h['train loss'], h['valid loss']):
        print(f"step {s:5d}: train loss {tr:.4f}, validation loss {va:.4f}")
    print(f"RESULT chargpt: {params / 1e6:.2f}M parameters, {a.steps} steps in {wall:.0f} s on {name} "
          f"({res['precision']}, evaluation included): validation loss {res['final_val_loss']:.4f} "
          f"(best {res['best_val_loss']:.4f}; nanoGPT {NANOGPT_VAL_LOSS})")
    if a.json:
        with open(a.json, 'w') as f: json.dump(res, f, indent=1)


if __name__ == '__main__':
    main()
