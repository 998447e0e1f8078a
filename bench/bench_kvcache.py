"""KV-cache speed-up of `txbook.gpt.GPT.generate`: cached vs recomputing the whole prefix at every
step.

Greedy decoding from a one-token prompt, random weights, nanoGPT's shakespeare-char size by default
(6 layers, 6 heads, width 384, context 256). The cached path is `GPT.forward(idx, caches=...)`, the
same block forward with one `txbook.mhsa.KVCache` per block; once the sequence fills the window the
model reads (`--window`, default the context length) both paths recompute the window of the last
`window` tokens at every step. A RoPE model (`--pos rope`) has no position table and may read a
window longer than the context: with `--window` larger than `--tokens` its caches grow past the
context and are never refilled. Both paths must give the same tokens; the script checks it (also
with `--tokens` larger than the context). Each path's time is the wall-clock time of one whole
generation after a short warm-up, read by `txbook.perf.Stopwatch` (it waits for the GPU at both
ends).

usage: python bench/bench_kvcache.py [--threads 1] [--tokens 255] [--device cpu]
                                     [--pos rope --window 1024]
"""
import argparse

import torch
from txbook.perf import Stopwatch
from txbook.gpt import GPT, GPTConfig


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1 gives the steadiest "
                                                           "timings)")
    ap.add_argument("--tokens", type=int, default=None,
                    help="tokens to generate (default: context length - 1)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--pos", choices=["learned", "rope"], default="learned",
                    help="position scheme (rope: no table, so --window may exceed the context)")
    ap.add_argument("--window", type=int, default=None,
                    help="tokens the model reads at each step (default: the context length)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads); torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=65, dropout=0.0, pos=args.pos)).eval().to(args.device)
    n = args.tokens or m.cfg.block_size - 1
    prompt = torch.zeros(1, 1, dtype=torch.long, device=args.device)

    def run(use_cache, k):
        "Wall seconds of one generation of `k` tokens, and its tokens"
        with Stopwatch() as sw:                                     # waits for the GPU at both ends
            out = m.generate(prompt, k, temperature=0, use_cache=use_cache, window=args.window)
        return sw.wall, out

    run(True, 4); run(False, 4)  # warm-up
    (t_cache, a), (t_full, b) = run(True, n), run(False, n)
    assert torch.equal(a, b), "the cached path produced different tokens"
    params = sum(p.numel() for p in m.parameters()) / 1e6
    window = args.window or m.cfg.block_size
    print(f"{params:.1f}M params ({args.pos} positions, window {window}), {n} tokens on "
          f"{args.device} ({args.threads} thread(s)): "
          f"recompute {t_full:.2f} s, KV cache {t_cache:.2f} s, "
          f"speed-up {t_full / t_cache:.1f}x (same tokens)")


if __name__ == "__main__":
    main()
