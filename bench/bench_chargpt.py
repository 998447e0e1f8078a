#!/usr/bin/env python
"""The character GPT of chapter 8 at nanoGPT's shakespeare-char size: validation loss and training
time.

nanoGPT's `config/train_shakespeare_char.py` trains a 6-layer, 6-head, width-384 GPT (context 256,
dropout 0.2) for 5,000 steps of 64 windows with AdamW (lr 1e-3 warmed up over 100 steps, cosine
decay to 1e-4, betas (0.9, 0.99), weight decay 0.1, gradient clipping at 1) and reports a validation
loss of about 1.47. (Chapter 8's full size runs this configuration for 3,000 steps, `--steps 3000`,
so that the chapter fits its time budget; the default here is nanoGPT's 5,000, for the comparison
with its reported loss.) This script trains `txbook.gpt.GPT` with that configuration (the defaults
of `GPTConfig`) through `txbook.train.fit`, the loop the chapter uses, on `txbook.text.Windows` of
random windows (an epoch is `--eval-every` steps): the same 90/10 split of tinyshakespeare, bf16
autocast on a GPU with bf16 (fp16 with loss scaling on older GPUs, float32 on a CPU), nanoGPT's
betas and schedule as `fit`'s options. The validation loss is the mean over `--eval-iters` random
batches of the validation text (the same batches at every evaluation), as nanoGPT estimates it; the
train loss is the mean of each epoch's training steps (in training mode, with dropout), and at the
end also an estimate in eval mode on `--eval-iters` training batches.

usage: python bench/bench_chargpt.py [--steps 5000] [--eval-every 250] [--eval-iters 200]
                                     [--seed 1337] [--device cuda] [--json OUT]
A smoke test on a CPU: --steps 2 --eval-every 1 --eval-iters 1 --depth 1 --width 32 --context 16
"""
import argparse, json
from functools import partial

import torch
from txbook.perf import Stopwatch
from txbook.core import seed_everything
from txbook.data import load_tinyshakespeare
from txbook.gpt import GPT, GPTConfig
from txbook.text import CharTokenizer, Windows
from txbook.train import evaluate, fit
from txbook.amp import amp_dtype
from txbook.optim import adamw, warmup_cosine

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
    if a.steps % a.eval_every:
        ap.error(f"--steps {a.steps} must be a multiple of --eval-every {a.eval_every}")
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
    windows = lambda d, n, seed: Windows(d, a.context, a.batch_size, n_batches=n, seed=seed)
    with Stopwatch() as sw:                                         # waits for the GPU at both ends
        h = fit(model, windows(train_data, a.eval_every, a.seed),
                windows(val_data, a.eval_iters, 0),
                epochs=a.steps // a.eval_every, lr=1e-3,
                optimizer=adamw(weight_decay=0.1, betas=(0.9, 0.99)),
                schedule=partial(warmup_cosine, total=a.steps, warmup=100 if a.steps > 100 else 0,
                                 min_factor=0.1),                   # 1e-3 down to 1e-4
                device=device, progress=False, verbose=False)       # the default loss: lm_loss
    wall = sw.wall
    train_eval = evaluate(model, windows(train_data, a.eval_iters, 0),
                          device=device)['loss']                   # eval mode, as nanoGPT's
    steps = [a.eval_every * (e + 1) for e in range(len(h['valid_loss']))]
    dtype = amp_dtype(device)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'
    res = dict(device=name, precision=str(dtype).removeprefix('torch.') if dtype else 'float32',
               params=params, steps=a.steps, batch_size=a.batch_size, seed=a.seed,
               final_val_loss=h['valid_loss'][-1], best_val_loss=min(h['valid_loss']),
               final_train_loss=train_eval, wall_s=wall,
               history={'step': steps, 'train_loss': h['train_loss'],
                        'valid_loss': h['valid_loss']},
               nanogpt_val_loss=NANOGPT_VAL_LOSS, torch=torch.__version__)
    for s, tr, va in zip(steps, h['train_loss'], h['valid_loss']):
        print(f"step {s:5d}: train loss {tr:.4f} (the epoch's steps), validation loss {va:.4f}")
    print(f"RESULT chargpt: {params / 1e6:.2f}M parameters, {a.steps} steps in {wall:.0f} s on "
          f"{name} "
          f"({res['precision']}, evaluation included): validation loss {res['final_val_loss']:.4f} "
          f"(best {res['best_val_loss']:.4f}; nanoGPT {NANOGPT_VAL_LOSS}), train loss "
          f"{train_eval:.4f}")
    if a.json:
        with open(a.json, 'w') as f: json.dump(res, f, indent=1)


if __name__ == '__main__':
    main()
