"""The device-placement audit: every tensor the package makes is made on the device of its inputs.

On a GPU, `torch.eye(n)` without `device=` is a CPU tensor, and the first operation that meets a
CUDA tensor fails (or, when it indexes one, copies it to the GPU at every call). On the CPU, where
these tests run, the default device *is* the inputs' device, so nothing fails. The audit makes the
difference visible on the CPU:

- `DeviceAudit` is a `TorchFunctionMode`. When code in the package (`txbook/*.py`; the caller's file
  is checked) calls a tensor factory (`torch.eye`, `arange`, `zeros`, `tensor`, `rand`, ...;
  PyTorch's own list, `torch.utils._device._device_constructors()`) without a `device=`, the tensor
  it returns is marked *loose*: on a GPU it would be on the CPU, away from the inputs.
- What is computed from loose tensors alone is loose too; `.to(device)`, `.to(other)`, `.cuda()` and
  `.type_as(other)` place it. Everything else (the model's weights, the inputs, PyTorch's and the
  test's own tensors) counts as placed on the inputs' device.
- An operation that takes a loose tensor and a placed one is an error (`WrongDevice`) naming the
  file and line where the loose one was made. A loose 0-dim tensor is allowed to meet placed ones,
  as CUDA allows a CPU scalar tensor in an operation on CUDA tensors.

Why not simply `torch.set_default_device('meta')`, the first idea in issue 18: it does catch `x @
torch.eye(n)` in a forward pass, but it also moves PyTorch's own factory calls (AdamW's step
counter; `fit` then fails inside the optimiser) and the data loader's CPU index tensors
(`randperm(n, generator=g).to(t.device)`: "cannot copy out of meta tensor") to `meta`, so a `fit`
step cannot run, and it misses a CPU index into a tensor (`x[torch.arange(n)]` on meta runs). The
audit only watches the package's own factory calls, runs `fit`, and says where the tensor was made
(test_set_default_device_meta_is_too_blunt shows the first two points).

Each model family then runs its forward pass, backward pass and one `fit` step (with a validation
loader, so `evaluate` runs too) under the audit; the generators run with and without their KV
caches. The planted-bug tests show that the audit catches `torch.eye(n)` without `device=`, a loose
index and a loose mask, and lets the fixed code (`device=x.device`) through.

The same kind of mode also counts the package's reads of tensor values back to the host (`.item()`,
`.tolist()`, `float(t)`, ...), each of which waits for a GPU: `fit` reads once per optimiser step,
however many micro-batches the step has, and once per evaluation.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors
from torch.utils._pytree import tree_leaves

import txbook
from txbook.core import seed_everything
from txbook.data import TensorLoader
from txbook.optim import WarmupCosine
from txbook.train import fit

PKG = str(Path(txbook.__file__).resolve().parent)
MOVERS = {torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.type_as, torch._C.TensorBase.type_as}


class WrongDevice(RuntimeError):
    "A tensor made without `device=` met a tensor on the inputs' device"


def _origin(t) -> str | None:
    return getattr(t, "_txbook_loose", None)


def _mark(out, origin: str):
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor):
            try: t._txbook_loose = origin
            except (AttributeError, RuntimeError): pass   # some tensor types take no attributes
    return out


def _names_device(func, args, kwargs) -> bool:
    "Does this `.to`/`.cuda`/`.type_as` call say where to go (a device, or a tensor to follow)?"
    if func is not torch.Tensor.to: return True
    where = list(args[1:]) + [kwargs.get("device"), kwargs.get("other")]
    return any(isinstance(a, (torch.device, str, int, torch.Tensor)) and not isinstance(a, bool)
               for a in where if a is not None)


class DeviceAudit(TorchFunctionMode):
    """Mark the package's tensors made without `device=`; raise `WrongDevice` when one meets a
    placed tensor"""
    def __init__(self, package: str = PKG):
        super().__init__()
        self.package, self.made = package, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _device_constructors() and kwargs.get("device") is None:
            caller = sys._getframe(1)
            if caller.f_code.co_filename.startswith(self.package):
                where = f"{Path(caller.f_code.co_filename).name}:{caller.f_lineno}"
                self.made.append(f"{where} torch.{func.__name__}")
                return _mark(func(*args, **kwargs), f"torch.{func.__name__} without device= at "
                                                    f"{where}")
            return func(*args, **kwargs)
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        loose = [t for t in tensors if _origin(t)]
        if not loose:
            return func(*args, **kwargs)
        if func in MOVERS and _names_device(func, args, kwargs):
            out = func(*args, **kwargs)    # moved where it was asked to go: placed
            # (here `.to` may return the tensor itself)
            return out.view_as(out) if out is args[0] else out
        placed = [t for t in tensors if not _origin(t)]
        offending = [t for t in loose if t.dim() > 0]
        if placed and offending:
            name = getattr(func, "__qualname__", getattr(func, "__name__", str(func)))
            raise WrongDevice(f"{name}: a tensor from {_origin(offending[0])} meets a tensor on "
                              f"the inputs' device (on a GPU: a CPU tensor meets a CUDA tensor)")
        out = func(*args, **kwargs)
        return out if placed else _mark(out, _origin(loose[0]))


# ---------------------------------------------------- the model families, small (tests/families.py)
from families import FAMILIES, images, pairs, seq2seq, tokens, vit   # noqa: E402
from txbook.losses import default_loss                # noqa: E402


# Families that fail the audit because of an offender in a notebook this test's author may not edit:
# name -> the fix. They are expected to fail (strict: once the fix lands they pass, and the test
# says so).
BLOCKED: dict[str, str] = {}


def _forward_loss(model, batch):
    "What fit computes: the default loss of model(*inputs) against the targets (none for a 1-tuple)"
    inputs, targets = (batch, None) if len(batch) == 1 else (batch[:-1], batch[-1])
    return default_loss(model(*inputs), targets)[0]


def _families():
    return [pytest.param(n,
                         marks=pytest.mark.xfail(strict=True, raises=WrongDevice,
                                                 reason=BLOCKED[n]))
            if n in BLOCKED else n for n in FAMILIES]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", _families())
def test_forward_backward_fit_on_the_inputs_device(name, precision):
    make, data = FAMILIES[name]
    seed_everything(0)
    model = make()
    batch = data()
    with DeviceAudit():
        _forward_loss(model, batch).backward()
        model.zero_grad()
        fit(model, TensorLoader(*batch, batch_size=8), TensorLoader(*batch, batch_size=8),
            epochs=1, lr=1e-3,
            schedule=WarmupCosine(0), device="cpu", progress=False, verbose=False,
            precision=precision)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_parameter_gets_a_gradient(name):
    """DDP waits for the gradient of every parameter a model holds: one backward of fit's loss must
    reach them all"""
    make, data = FAMILIES[name]
    seed_everything(0)
    model = make().train()
    _forward_loss(model, data()).backward()
    assert [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None] == []


@pytest.mark.parametrize("use_cache", [True, False], ids=["kv-cache", "no-cache"])
def test_generate_on_the_inputs_device(use_cache):
    seed_everything(0)
    gpt = FAMILIES["gpt"][0]()
    s2s = seq2seq()
    g = torch.Generator().manual_seed(0)
    with DeviceAudit():
        out = gpt.generate(tokens()[0][:2, :4], 6, use_cache=use_cache, generator=g)
        assert out.shape == (2, 10)
        out = s2s.generate(pairs()[0][:2], 5, bos=0, eos=1, pad=2, use_cache=use_cache)
        assert out.shape == (2, 5)
        out = gpt.generate(tokens()[0][:2, :4], 3, temperature=0.0, top_k=3, use_cache=use_cache)
        assert out.shape == (2, 7)


# ----------------------------------------------------------------- the audit catches what it should
def _in_package(src: str, module, name: str):
    "Compile `src` as if it were written in `module`'s file (the audit checks the caller's file)"
    ns = {"torch": torch, "F": F}
    exec(compile(src, module.__file__, "exec"), ns)
    return ns[name]


# (the bug, its fix): each planted in the ViT's head, as if written in txbook/vit.py
PLANTED = {
    "eye": ("x @ torch.eye(x.shape[-1])", "x @ torch.eye(x.shape[-1], device=x.device)"),
    "index": ("x[..., torch.arange(x.shape[-1])]", "x[..., torch.arange(x.shape[-1], "
                                                   "device=x.device)]"),
    "mask": ("x.masked_fill(torch.rand(x.shape) < 0.5, 0)",
             "x.masked_fill(torch.rand(x.shape, device=x.device) < 0.5, 0)"),
}


@pytest.mark.parametrize("bug", list(PLANTED))
def test_audit_catches_a_planted_tensor_without_device(bug, monkeypatch):
    import txbook.vit as vit_module
    model = vit(pool="cls")
    x, y = images()
    head = type(model.head)                          # nn.Linear
    monkeypatch.setattr(head, "orig", head.forward, raising=False)
    for src, fails in zip(PLANTED[bug], (True, False)):
        code = f"def planted(self, x):\n    return self.orig({src})\n"
        monkeypatch.setattr(head, "forward", _in_package(code, vit_module, "planted"))
        F.cross_entropy(model(x), y).backward()      # without the audit the CPU sees nothing wrong
        if fails:
            with DeviceAudit(), pytest.raises(WrongDevice, match=r"without device= at vit\.py:2"):
                model(x)
        else:
            with DeviceAudit():
                F.cross_entropy(model(x), y).backward()   # the fixed line passes


def test_audit_rules():
    """What counts as loose and placed: the package's factory calls, `.to(device)`, 0-dim scalars,
    dtypes"""
    import txbook.vit as vit_module
    f = _in_package("def f(x):\n    return torch.ones(3)\n", vit_module, "f")
    x = torch.randn(3)
    with DeviceAudit() as audit:
        t = f(x)
        assert audit.made and audit.made[0].startswith("vit.py:2 torch.ones")
        assert (t * 2).sum()._txbook_loose                      # loose in, loose out
        assert _origin(t.to(torch.float64))                     # a dtype is not a device
        x + t.to(x.device); x + t.to(x); x + t.type_as(x)       # placed: no error
        x * t.sum()                                             # a 0-dim loose tensor may meet x
        assert _origin(torch.ones(3)) is None                   # the test's own factories: placed
        with pytest.raises(WrongDevice, match="torch.ones without device= at vit.py:2"):
            x + t
        with pytest.raises(WrongDevice):
            torch.cat([x, t])


def test_set_default_device_meta_is_too_blunt():
    """The simpler trick cannot run a `fit` step: PyTorch's and the loader's own CPU tensors become
    meta"""
    model, (x, y) = vit(pool="cls"), images()
    # `with torch.device(...)` is set_default_device that pops its mode on exit:
    # set_default_device("cpu") would leave a device mode on the stack for the rest of the process
    # (and dynamo unable to trace; tests/conftest.py checks after every test that none is left).
    with torch.device("meta"):
        model(x)                                        # forward (and backward) on the CPU pass
        with pytest.raises((NotImplementedError, RuntimeError)):
            fit(model, TensorLoader(x, y, batch_size=8), epochs=1, lr=1e-3,
                schedule=WarmupCosine(0), device="cpu", progress=False, verbose=False)


# --------------------------------------------------------------- host reads: one per optimiser step
# The one read per step that is PyTorch's, not the package's: with loss scaling (fp16),
# GradScaler.step reads its found-inf flags to decide whether to call the optimiser's step (a fused
# optimizer takes them on the device).
GRAD_SCALER = torch.amp.grad_scaler.__file__


class HostReads(TorchFunctionMode):
    """Count the package's reads of tensor values back to the host (and GradScaler's): on a GPU each
    one waits"""
    READS = {"item", "tolist", "__float__", "__int__", "__bool__"}

    def __init__(self, package: str = PKG, also: tuple[str, ...] = (GRAD_SCALER,)):
        super().__init__()
        self.package, self.also, self.where = package, also, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.READS:
            caller = sys._getframe(1)
            file = caller.f_code.co_filename
            if file.startswith(self.package) or file in self.also:
                self.where.append(f"{Path(file).name}:{caller.f_lineno}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("accum_steps", [1, 4])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_one_host_read_per_step(name, accum_steps, precision):
    """Every family: a step's numbers (loss, metrics, fp16's loss scale) are read once; each
    evaluation once"""
    make, data = FAMILIES[name]
    seed_everything(0)
    model = make()
    batch = data(32)
    # 8 batches: 8 // accum_steps steps per epoch
    dl = TensorLoader(*batch, batch_size=4)
    with HostReads() as reads:
        hist = fit(model, dl, TensorLoader(*batch, batch_size=8), epochs=2, lr=1e-3,
                   schedule=WarmupCosine(0),
                   device="cpu", accum_steps=accum_steps, progress=False, verbose=False,
                   precision=precision)
    steps = len(hist["loss"])
    assert steps == 2 * 8 // accum_steps
    ours = [w for w in reads.where if not w.startswith("grad_scaler.py")]
    assert len(ours) == steps + 2, ours                   # one per step, one per evaluation
    scaler = [w for w in reads.where if w.startswith("grad_scaler.py")]
    # GradScaler.step's own, named
    assert len(scaler) == (steps if precision == "fp16" else 0), scaler
    if precision == "fp16": assert len(hist["loss_scale"]) == steps
