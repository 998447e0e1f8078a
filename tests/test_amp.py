"""Every model family of the book trains under `fit(precision=...)` in float16 and bfloat16.

On a GPU `fit` autocasts to bfloat16 (Ampere and newer) or to float16 with loss scaling (Volta,
Turing: Colab's T4); no GPU runs these tests, but autocast and PyTorch's GradScaler also run on the
CPU, so this is where an exception, a non-finite value or a loss far from float32's in the book's
own modules shows, and where the scaler's wiring in `fit` is exercised. Its limit: CPU autocast
casts the inputs of `scaled_dot_product_attention` itself, so a float32 mask passed to 16-bit
attention would pass here. Each model takes two optimiser steps on random data at each precision;
the losses must be finite, the weights must change and stay finite, and the first 16-bit loss must
be close to the float32 one (the same weights, the same batch).
"""
import pytest
import torch

from txbook.core import seed_everything
from txbook.data import TensorLoader
from txbook.gpt import GPT, GPTConfig
from txbook.heads import SequenceClassifier
from txbook.mae import MAE
from txbook.poslabels import APLHead, PositionLabelViT, RPLHead
from txbook.swin import Swin
from txbook.optim import WarmupCosine
from txbook.train import fit
from txbook.vit import ViT


def vit(**kw):
    return ViT(img_size=16, patch_size=4, in_chans=1, n_classes=5, d_model=32, depth=2, n_heads=4,
               **kw)


def images():
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 1, 16, 16, generator=g), torch.randint(0, 5, (16,), generator=g)


def poslabel(**heads):
    def make():
        v = vit(pos='none')
        made = {k: cls(32, grid=(4, 4), kind=kind) for k, (cls, kind) in heads.items()}
        return PositionLabelViT(v, **made)
    return make


def tokens():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 11, (16, 9), generator=g)
    return ids[:, :-1], ids[:, 1:]


def vectors():
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 6, 3, generator=g), torch.randint(0, 4, (16,), generator=g)


# name -> (model factory, data): every family trains with fit's default loss, no loss argument
MODELS = {
    'vit-cls': (lambda: vit(pool='cls'), images),
    'vit-mean': (lambda: vit(pool='mean'), images),
    'poslabels-apl-regress': (poslabel(apl=(APLHead, 'regress')), images),
    'poslabels-apl-classify+rpl-classify': (poslabel(apl=(APLHead, 'classify'),
                                                     rpl=(RPLHead, 'classify')), images),
    'poslabels-rpl-regress': (poslabel(rpl=(RPLHead, 'regress')), images),
    'swin': (lambda: Swin(img_size=16, patch_size=2, in_chans=1, n_classes=5, d_model=16,
                          depths=(2, 2), n_heads=(2, 4), window=4), images),
    'gpt': (lambda: GPT(GPTConfig(vocab_size=11, block_size=8, depth=2, n_heads=2, d_model=32,
                                  dropout=0.0)), tokens),
    'mae+apl': (lambda: MAE(vit(pos='sincos'), dec_dim=16, dec_depth=1, dec_heads=2,
                            apl=APLHead(32, grid=(4, 4), kind='classify')), lambda: images()[:1]),
    'sequence-classifier': (lambda: SequenceClassifier(3, 4, n_tokens=6, d_model=16, n_heads=2),
                            vectors),
}


def run(name, precision):
    make, data = MODELS[name]
    seed_everything(0)
    model = make()
    w0 = [p.detach().clone() for p in model.parameters()]
    dl = TensorLoader(*data(), batch_size=8)
    hist = fit(model, dl, epochs=1, lr=1e-3, schedule=WarmupCosine(0), device='cpu',
               precision=precision, progress=False, verbose=False)
    return model, w0, hist


@pytest.mark.parametrize('precision', ['fp16', 'bf16'])
@pytest.mark.parametrize('name', list(MODELS))
def test_trains_in_16_bits(name, precision):
    _, _, h32 = run(name, 'fp32')
    model, w0, hist = run(name, precision)
    assert len(hist['loss']) == 2 and all(torch.isfinite(torch.tensor(hist['loss']))), hist['loss']
    params = list(model.parameters())
    assert all(p.dtype == torch.float32 for p in params)            # autocast keeps float32 weights
    assert all(torch.isfinite(p).all() for p in params), f"{name}: non-finite weights"
    assert ('loss_scale' in hist) == (precision == 'fp16')          # only float16 is loss-scaled
    changed = sum(not torch.equal(a, b) for a, b in zip(params, w0))
    assert changed >= len(params) // 2, f"{name}: only {changed} of {len(params)} tensors moved"
    # the first loss: same weights and batch, 16-bit rounding only (bf16 keeps 8 bits of mantissa)
    tol = 0.02 if precision == 'fp16' else 0.1
    assert abs(hist['loss'][0] - h32['loss'][0]) < tol * max(1.0, abs(h32['loss'][0])), \
        (name, hist['loss'][0], h32['loss'][0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_16_bit_weights_refused(dtype, precision):
    """Mixed precision keeps float32 master weights: 16-bit weights (e.g. loaded as stored) are
    refused by name"""
    model = vit(pool="cls")
    model.head.to(dtype)                       # one layer in 16 bits is enough
    x, y = images()
    w0 = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError,
                       match=rf"2 parameters are {str(dtype)[6:]} \(e\.g\. head\.weight"):
        fit(model, TensorLoader(x, y, batch_size=8), epochs=1, device="cpu", precision=precision,
            progress=False, verbose=False)
    # refused before any step
    assert all(torch.equal(a, b) for a, b in zip(w0, model.parameters()))
    model.float()                              # the fix the message names
    fit(model, TensorLoader(x, y, batch_size=8), epochs=1, device="cpu", precision=precision,
        progress=False, verbose=False, max_steps=1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_weights_without_autocast_warned(dtype):
    """precision='fp32' (the CPU's 'auto') on 16-bit weights: AdamW steps them in 16 bits, and fit
    says so"""
    # loaded as stored
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(256, 5)).to(dtype)
    x, y = images()
    with pytest.warns(UserWarning, match=rf"2 parameters are {str(dtype)[6:]} .*without autocast"):
        fit(model, TensorLoader(x.to(dtype), y, batch_size=8), epochs=1, device="cpu",
            precision="fp32", progress=False, verbose=False, max_steps=1)
