"""Every model family's forward is one graph: `torch.compile(..., fullgraph=True)` captures it
whole.

A graph break (a Python branch on a tensor's value, `.item()`, a `print`) would split a forward into
pieces with the interpreter between them, and on a GPU each value read is a host sync. Dynamo raises
on the first break when `fullgraph=True`; the backend is `eager` because the question is the
capture, not the generated kernels (inductor would add minutes of C++ compilation on the CPU and
test nothing more about breaks). Each compiled forward must also give the eager forward's numbers.
"""
import pytest
import torch

from txbook.core import seed_everything
# torch.compile: seconds a test: not in the fast path (`pytest -m "not slow"`)
pytestmark = pytest.mark.slow


def _gpt():
    from txbook.gpt import GPT, GPTConfig
    return GPT(GPTConfig(vocab_size=17, block_size=16, depth=2, n_heads=2, d_model=16, dropout=0.0))


def _gpt_rope():
    from txbook.gpt import GPT, GPTConfig
    return GPT(
        GPTConfig(vocab_size=17, block_size=16, depth=2, n_heads=2, d_model=16, dropout=0.0,
                  pos="rope"))


def _vit(pool="cls", pos="learned"):
    from txbook.vit import ViT
    return ViT(img_size=16, patch_size=4, in_chans=1, n_classes=5, d_model=16, depth=2, n_heads=2,
               pool=pool, pos=pos)


def _swin(**kw):
    from txbook.swin import Swin
    return Swin(img_size=16, patch_size=2, in_chans=1, n_classes=5, d_model=8, depths=(2, 2),
                n_heads=(2, 2), window=4, **kw)


def _seq2seq():
    from txbook.seq2seq import EncoderDecoder
    return EncoderDecoder(11, 13, 16, 2, depth=1, max_len=12)


def _mae(apl: bool):
    from txbook.mae import MAE
    from txbook.poslabels import APLHead
    vit = _vit(pos="none")
    return MAE(vit, apl=APLHead(16, grid=vit.grid) if apl else None)


def _poslabel_vit():
    from txbook.poslabels import APLHead, PositionLabelViT, RPLHead
    vit = _vit()
    return PositionLabelViT(vit, apl=APLHead(16, grid=vit.grid), rpl=RPLHead(16, grid=vit.grid))


def _poslabel_swin():
    from txbook.poslabels import PositionLabelSwin, RPLHead
    swin = _swin()
    return PositionLabelSwin(swin, RPLHead(swin.d_out, grid=swin.stage_grids(swin.grid)[-1]))


def _sequence_classifier():
    from txbook.heads import SequenceClassifier
    return SequenceClassifier(3, 4, n_tokens=6, d_model=16, n_heads=2)


IMG = (2, 1, 16, 16)
CASES = {
    "gpt": (_gpt, lambda: (torch.randint(0, 17, (2, 9)),), {}),
    "gpt-rope": (_gpt_rope, lambda: (torch.randint(0, 17, (2, 9)),), {}),
    "vit-cls": (_vit, lambda: (torch.randn(IMG),), {}),
    "vit-mean-sincos": (lambda: _vit(pool="mean", pos="sincos"), lambda: (torch.randn(IMG),), {}),
    "swin": (_swin, lambda: (torch.randn(IMG),), {}),
    "swin-abs-pos": (lambda: _swin(abs_pos=True), lambda: (torch.randn(IMG),), {}),
    "encoder-decoder": (_seq2seq,
                        lambda: (torch.randint(0, 11, (2, 7)), torch.randint(0, 13, (2, 5))),
                        {"src_keep": torch.tensor([[True] * 7, [True] * 4 + [False] * 3])}),
    "poslabel-vit": (_poslabel_vit, lambda: (torch.randn(IMG),), {}),
    "poslabel-swin": (_poslabel_swin, lambda: (torch.randn(IMG),), {}),
    "sequence-classifier": (_sequence_classifier, lambda: (torch.randn(2, 6, 3),), {}),
}


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flat(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in _flat(v)]
    return [v for v in vars(out).values() if isinstance(v, torch.Tensor)] \
        if hasattr(out, "__dict__") else []


@pytest.mark.parametrize("name", list(CASES))
def test_forward_is_one_graph(name):
    make, args, kw = CASES[name]
    seed_everything(0)
    model = make().eval()
    x = args()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        got, want = compiled(*x, **kw), model(*x, **kw)
    for g, w in zip(_flat(got), _flat(want), strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("apl", [False, True], ids=["mae", "mae-apl"])
def test_mae_forward_is_one_graph(apl):
    seed_everything(0)
    model = _mae(apl).eval()
    x = torch.randn(IMG)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():                          # the same seed before each call: the same masks
        torch.manual_seed(1)
        got = compiled(x)
        torch.manual_seed(1)
        want = model(x)
    for g, w in zip(_flat(got), _flat(want), strict=True):
        torch.testing.assert_close(g, w)


def test_gpt_cached_step_is_one_graph():
    "One step of cached decoding: the newest token against the cache, captured whole"
    seed_everything(0)
    model = _gpt().eval()
    prompt = torch.randint(0, 17, (2, 6))
    caches = model.new_caches()
    with torch.no_grad():
        model(prompt, caches=caches)                               # fill the cache eagerly
        step = torch.randint(0, 17, (2, 1))
        ref_caches = model.new_caches()
        model(prompt, caches=ref_caches)
        want = model(step, caches=ref_caches)
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        got = compiled(step, caches=caches)
    torch.testing.assert_close(got, want)
    assert len(caches[0]) == 7


def test_encoder_decoder_cached_step_is_one_graph():
    """One step of generation: the newest token against the self-attentions' caches and the memory's
    kept keys"""
    from txbook.mhsa import KVCache
    seed_everything(0)
    model = _seq2seq().eval()
    src, prefix = torch.randint(0, 11, (2, 7)), torch.randint(0, 13, (2, 4))
    step = torch.randint(0, 13, (2, 1))
    with torch.no_grad():
        memory = model.encode(src)
        runs = []
        for _ in range(2):
            # one for the compiled step, one eager
            caches, kept = ([KVCache() for _ in model.decoder.blocks] for _ in range(2))
            model.decode(prefix, memory, caches=caches, memory_caches=kept)   # fill them eagerly
            runs.append((caches, kept))
        want = model.decode(step, memory, caches=runs[1][0], memory_caches=runs[1][1])
        torch._dynamo.reset()
        compiled = torch.compile(model.decode, fullgraph=True, backend="eager")
        got = compiled(step, memory, caches=runs[0][0], memory_caches=runs[0][1])
    torch.testing.assert_close(got, want)
    assert len(runs[0][0][0]) == 5 and len(runs[0][1][0]) == 7   # self: grew by one; memory: kept


def _family_names():
    from families import FAMILIES
    return list(FAMILIES)


@pytest.mark.parametrize("name", _family_names())
def test_training_step_is_one_graph(name):
    """What fit runs for every family: the model in train mode and fit's default loss (ε = 0.1), one
    graph, backward too"""
    from families import FAMILIES
    from txbook.losses import default_loss
    make, data = FAMILIES[name]
    seed_everything(0)
    model = make().train()
    batch = data(8)
    # a 1-tuple: inputs, no targets
    n_in = len(batch) if len(batch) == 1 else len(batch) - 1

    def step(*batch):
        targets = batch[n_in] if len(batch) > n_in else None
        return default_loss(model(*batch[:n_in]), targets, label_smoothing=0.1)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    torch.manual_seed(1)                          # the same masks (MAE) and dropout in both calls
    got = compiled(*batch)
    got[0].backward()
    torch.manual_seed(1)
    want = step(*batch)
    torch.testing.assert_close(got[0], want[0])
    for k in want[1]: torch.testing.assert_close(got[1][k], want[1][k], msg=k)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
