"""The model families, small: every family of the package that fit trains, with the data it reads.

Shared by tests/test_device.py (device audit and host reads), tests/test_compile.py (one graph in
train mode) and tests/test_ddp.py (every family under torchrun): a helper module, so that no test
file imports another.
"""
import torch

from txbook.seq2seq import EncoderDecoder
from txbook.gpt import GPT, GPTConfig
from txbook.heads import SequenceClassifier
from txbook.mae import MAE
from txbook.poslabels import APLHead, PositionLabelSwin, PositionLabelViT, RPLHead
from txbook.swin import Swin
from txbook.vit import ViT


def vit(**kw):
    return ViT(img_size=16, patch_size=4, in_chans=1, n_classes=5, d_model=32, depth=2, n_heads=4,
               **kw)


def swin():
    return Swin(img_size=16, patch_size=2, in_chans=1, n_classes=5, d_model=16, depths=(2, 2),
                n_heads=(2, 4), window=4)


def poslabel(**heads):
    def make():
        made = {k: cls(32, grid=(4, 4), kind=kind) for k, (cls, kind) in heads.items()}
        return PositionLabelViT(vit(pos="none"), **made)
    return make


def poslabel_swin():
    s = swin()
    return PositionLabelSwin(s, RPLHead(s.d_out, grid=s.stage_grids(s.grid)[-1], kind="classify"))


def images(n=8):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 16, 16, generator=g), torch.randint(0, 5, (n,), generator=g)


def images_only(n=8):
    return images(n)[:1]                     # a batch without targets: self-supervised


def tokens(n=8):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 11, (n, 9), generator=g)
    return ids[:, :-1], ids[:, 1:]


def vectors(n=8):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 6, 3, generator=g), torch.randint(0, 4, (n,), generator=g)


def pairs(n=8):
    "(source ids, target ids) for the encoder-decoder: teacher forcing on a shifted target"
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 7, (n, 6), generator=g), torch.randint(0, 9, (n, 5), generator=g)


def seq2seq():
    return EncoderDecoder(7, 9, d_model=16, n_heads=2, depth=1, max_len=16)


def seq2seq_data(n=8):
    """The encoder-decoder's batches as fit reads them: (src, tgt_in, src_keep, tgt_out), padding =
    -100"""
    src, tgt = pairs(n)
    keep = torch.ones_like(src, dtype=torch.bool)
    keep[::2, 4:] = False                                      # padded sources
    out = tgt[:, 1:].clone()
    out[::3, 2:] = -100                                        # padded targets
    return src, tgt[:, :-1], keep, out


def mae(apl=False):
    return lambda: MAE(vit(pool="mean"), dec_dim=16, dec_depth=1, dec_heads=2,
                       apl=APLHead(32, grid=(4, 4), kind="classify") if apl else None)


# name -> (model factory, data): every family trains with fit's default loss, no loss argument
FAMILIES = {
    "vit-cls": (lambda: vit(pool="cls"), images),
    "vit-mean": (lambda: vit(pool="mean"), images),
    "poslabels-apl-regress": (poslabel(apl=(APLHead, "regress")), images),
    "poslabels-apl-classify+rpl-classify": (
        poslabel(apl=(APLHead, "classify"), rpl=(RPLHead, "classify")),
        images),
    "poslabels-rpl-regress": (poslabel(rpl=(RPLHead, "regress")), images),
    "poslabels-swin": (poslabel_swin, images),
    "mae": (mae(), images_only),
    "mae+apl": (mae(apl=True), images_only),
    "swin": (swin, images),
    "gpt": (
        lambda: GPT(
            GPTConfig(vocab_size=11, block_size=8, depth=2, n_heads=2, d_model=32, dropout=0.0)),
        tokens),
    "encoder-decoder": (seq2seq, seq2seq_data),
    "sequence-classifier": (lambda: SequenceClassifier(3, 4, n_tokens=6, d_model=16, n_heads=2),
                            vectors),
}
