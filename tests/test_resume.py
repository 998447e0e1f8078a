"""A PyTorch `DataLoader` resumes exactly through `TorchLoader` (issue 40's referee, finding 2).

`fit` reads a `DataLoader` through `txbook.distributed.TorchLoader`. Each pass sets the loader's
generator (the seed its workers get) and its samplers' generators to one generator seeded by (seed,
epoch), and a start in mid-epoch is skipped among the indices, without loading (or augmenting) the
skipped samples. So a run interrupted and resumed from its checkpoint ends with the weights of the
uninterrupted run, in the three setups the referee found silently inexact before:

- (a) `DataLoader(shuffle=True, generator=G)` resumed at an epoch boundary (the resumed epoch
  replayed epoch 0's order: the generator's state was not in the checkpoint);
- (b) a `DistributedSampler` and a dataset that augments in `__getitem__` from the global generator,
  resumed in mid-epoch, `num_workers=0` (skipping by drawing the batches augmented them after the
  generator was restored);
- (c) the same with `num_workers=2` and the loader's own generator, resumed at an epoch boundary
  (the workers' seeds come from the loader's generator, whose state was not saved);

and in two more: a shuffling loader with and without its own generator, resumed in mid-epoch. What
cannot be replayed is said: workers' random draws in mid-epoch (a warning), and a sampler whose
randomness the adapter cannot see, in mid-epoch (a ValueError).
"""
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

from txbook.core import seed_everything
from txbook.distributed import TorchLoader
from txbook.optim import WarmupCosine
from txbook.train import fit

g0 = torch.Generator().manual_seed(1)
X, Y = torch.randn(40, 5, generator=g0), torch.randint(0, 3, (40,), generator=g0)   # 5 batches of 8


class Noisy(Dataset):
    """torchvision's idiom: each sample augmented in __getitem__ from the global generator; loads
    counted"""
    loaded = 0

    def __len__(self): return len(X)

    def __getitem__(self, i):
        Noisy.loaded += 1
        return X[i] + 0.1 * torch.randn(X.shape[1:]), Y[i]


def shuffled(own_generator=True):
    return DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True,
                      generator=torch.Generator().manual_seed(7) if own_generator else None)


def sampled(workers=0):
    ds = Noisy()
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=3)
    return DataLoader(ds, batch_size=8, sampler=sampler, num_workers=workers,
                      generator=torch.Generator().manual_seed(7) if workers else None)


def run(make_dl, checkpoint=None, max_steps=None):
    """Three epochs of a linear classifier on `make_dl()`; dropout-free, so only the data's draws
    matter"""
    seed_everything(0)
    net = nn.Linear(5, 3)
    h = fit(net, make_dl(), epochs=3, lr=1e-2, schedule=WarmupCosine(0), device='cpu',
            progress=False, verbose=False, checkpoint=checkpoint, max_steps=max_steps)
    return net, h


SETUPS = {   # name -> (loader, the step the run is interrupted at: 5 = an epoch boundary)
    'a-shuffle-own-generator-epoch-boundary': (shuffled, 5),
    'b-sampler-global-augment-mid-epoch': (sampled, 7),
    'c-sampler-workers-augment-epoch-boundary': (lambda: sampled(workers=2), 5),
    'shuffle-own-generator-mid-epoch': (shuffled, 7),
    'shuffle-global-generator-mid-epoch': (lambda: shuffled(own_generator=False), 7),
}


@pytest.mark.parametrize('name', list(SETUPS))
def test_resume_is_exact(name, tmp_path):
    make, stop = SETUPS[name]
    full, h_full = run(make)
    ck = tmp_path / 'run.safetensors'
    run(make, ck, max_steps=stop)
    with warnings.catch_warnings():
        warnings.simplefilter('error')                 # none of these resumes may warn
        resumed, h_res = run(make, ck)
    assert h_res['loss'] == h_full['loss']
    for (k, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), k


def test_skipped_batches_are_not_loaded(tmp_path):
    "A resume at batch 2 of epoch 2 (of 5 batches) loads the 3 batches from it on, not the 2 before"
    ck = tmp_path / 'run.safetensors'
    run(sampled, ck, max_steps=7)
    Noisy.loaded = 0
    run(sampled, ck, max_steps=10)                    # to the end of that epoch
    assert Noisy.loaded == 8 * 3, Noisy.loaded


def test_epoch_zero_is_the_loaders_own_pass():
    "Seed + epoch 0 is the loader's own generator: fit's first epoch is the DataLoader's first pass"
    assert [y.tolist() for _, y in TorchLoader(shuffled())] == [y.tolist() for _, y in shuffled()]


def test_callers_generators_put_back():
    dl = shuffled()
    g, s = dl.generator, dl.sampler.generator
    tl = TorchLoader(dl)
    tl.set_epoch(2)
    list(tl)
    assert dl.generator is g and dl.sampler.generator is s and g.initial_seed() == 7


def test_workers_in_mid_epoch_warn(tmp_path):
    "Workers' generators are not in the checkpoint: a resume in mid-epoch with workers says so"
    ck = tmp_path / 'run.safetensors'
    run(lambda: sampled(workers=2), ck, max_steps=7)
    with pytest.warns(UserWarning, match='resuming at batch 2 of epoch 1 with 2 workers'):
        run(lambda: sampled(workers=2), ck)


def test_persistent_workers_warn_on_any_resume():
    dl = DataLoader(TensorDataset(X, Y), batch_size=8, num_workers=1, persistent_workers=True)
    with pytest.warns(UserWarning, match='resuming at batch 0 of epoch 1 with 1 workers'):
        TorchLoader(dl).set_epoch(1)


def test_unseen_randomness_refused_in_mid_epoch():
    class Mine(torch.utils.data.Sampler):
        "A sampler with randomness of its own: no set_epoch, no generator"
        def __len__(self): return len(X)
        def __iter__(self): return iter(torch.randperm(len(X)).tolist())
    tl = TorchLoader(DataLoader(TensorDataset(X, Y), batch_size=8, sampler=Mine()))
    # an epoch boundary: the global generator is restored
    tl.set_epoch(1)
    with pytest.raises(ValueError, match='resuming at batch 2 of an epoch needs an order '
                                         'TorchLoader can draw'):
        tl.set_epoch(1, start=2)
