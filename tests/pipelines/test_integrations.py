"""The loaders under the training frameworks users plug them into, without the frameworks
(CI does not install them): each test does to a loader what PyTorch Lightning or Hugging
Face accelerate does to it, in the order they do it (their sources are named), with
plain torch. ``docs/integrations.md`` has the runs with the frameworks themselves."""

from __future__ import annotations

import warnings

import pytest

from gpufeed.backends import dali_installed
from tests.pipelines.test_loader_contract import BACKENDS, load


def lightning_sets_epoch(dataloader: object, epoch: int) -> None:
    """What Lightning (2.6, ``lightning.fabric.utilities.data._set_sampler_epoch``) does at
    the start of every training and validation epoch: ``set_epoch`` on the loader's
    ``sampler`` and on its ``batch_sampler.sampler``, where they exist; never on the loader."""
    objects = {}
    if (sampler := getattr(dataloader, "sampler", None)) is not None:
        objects[id(sampler)] = sampler
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    if batch_sampler is not None and (sampler := getattr(batch_sampler, "sampler", None)) is not None:
        objects[id(sampler)] = sampler
    for obj in objects.values():
        if callable(set_epoch := getattr(obj, "set_epoch", None)):
            set_epoch(epoch)


def fingerprints(batches: list) -> list[tuple[float, tuple[int, ...]]]:
    return [(round(float(x.float().sum()), 2), tuple(y.tolist())) for x, y in batches]


@pytest.mark.parametrize("backend", BACKENDS)
def test_lightning_resume_from_a_checkpoint_after_an_epochs_last_batch_trains_the_next_epoch(image_folder, backend):
    """``ModelCheckpoint(every_n_train_steps=len(loader))`` saves after epoch 0's last batch;
    resumed, Lightning loads the loader's state, calls ``iter()`` (``FitLoop.setup_data``),
    then sets the epoch it counts next (1: it knows epoch 0 ran to its end), then takes
    batches. The loader must yield epoch 1 whole, as in the run that never stopped; it
    yielded epoch 0's empty rest, and Lightning trained nothing more."""
    kw = dict(train=True, batch_size=16, size=32, seed=3)
    whole = load(image_folder, backend, **kw)
    lightning_sets_epoch(whole, 0)
    state = None
    for _ in whole:
        state = whole.state_dict()  # on_train_batch_end: the last one is after the epoch's last batch
    lightning_sets_epoch(whole, 1)
    epoch1 = fingerprints(list(whole))

    resumed = load(image_folder, backend, **kw)
    resumed.load_state_dict(state)
    batches = iter(resumed)  # setup_data: iter(data_fetcher), before the epoch is set
    lightning_sets_epoch(resumed, 1)
    assert fingerprints(list(batches)) == epoch1 and len(epoch1) == len(resumed) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_lightning_resume_mid_epoch_and_limit_train_batches_keep_the_epochs(image_folder, backend):
    """A mid-epoch checkpoint keeps its cut when Lightning sets that epoch; under
    ``limit_train_batches`` (2 of 3 batches: Lightning stops taking batches), a checkpoint
    after the limit's last batch resumes with the next epoch whole, not the cut epoch's rest."""
    kw = dict(train=True, batch_size=16, size=32, seed=3)
    whole = load(image_folder, backend, **kw)
    runs = []
    for epoch in range(2):
        lightning_sets_epoch(whole, epoch)
        runs.append(fingerprints(list(whole)))

    cut = load(image_folder, backend, **kw)
    lightning_sets_epoch(cut, 0)
    it = iter(cut)
    next(it)
    mid = cut.state_dict()  # after batch 0 of epoch 0
    next(it)
    limited = cut.state_dict()  # after batch 1: limit_train_batches=2 ends Lightning's epoch 0 here

    resumed = load(image_folder, backend, **kw)
    resumed.load_state_dict(mid)
    batches = iter(resumed)
    lightning_sets_epoch(resumed, 0)  # epoch 0 still runs
    assert fingerprints(list(batches)) == runs[0][1:]

    resumed = load(image_folder, backend, **kw)
    resumed.load_state_dict(limited)
    batches = iter(resumed)
    lightning_sets_epoch(resumed, 1)  # Lightning's epoch 0 ran to its limit
    assert fingerprints(list(batches)) == runs[1]


def test_the_epoch_hook_is_where_lightning_looks_and_nowhere_else(image_folder):
    """Only ``batch_sampler.sampler``: a loader ``sampler`` would make Lightning's
    ``overfit_batches`` try to rebuild the loader as a DataLoader, and accelerate's
    ``skip_first_batches`` build a DataLoader over the raw samples."""
    loader = load(image_folder, "torch", train=True, batch_size=16, size=32)
    assert getattr(loader, "sampler", None) is None
    loader.batch_sampler.sampler.set_epoch(4)
    assert loader.state_dict()["epoch"] == 4


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_a_dali_iterator_iterated_again_mid_epoch_warns_that_the_pass_is_short(image_folder):
    """Lightning's sanity check takes ``num_sanity_val_steps`` (2) batches of the val
    iterator and drops it; the validation run then calls ``iter()`` again. A DALI iterator
    cannot restart an epoch and goes on with its rest: the first validation saw 1 of 3
    batches, silently (DALI's reader iterators log it; the kit-fed one said nothing)."""
    it = load(image_folder, "dali", train=False, batch_size=16, size=32).dali_iterator()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # whole passes: no warning
        assert [sum(1 for _ in it) for _ in range(2)] == [3, 3]
        batches = iter(it)
        for _ in range(len(it)):  # Lightning takes len() batches, never asking for the end
            next(batches)
        assert sum(1 for _ in iter(it)) == 3
    batches = iter(it)
    next(batches), next(batches)  # the sanity check stops here
    with pytest.warns(UserWarning, match=r"after 2 of this epoch's 3 batches goes on with the remaining 1"):
        rest = sum(1 for _ in iter(it))
    assert rest == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sum(1 for _ in it) == 3  # the next pass is whole again, without a word


# ------------------------------------------------------------------ tables: iter_batches


def _table_batches(**kwargs: object) -> object:
    import numpy as np
    import pandas as pd

    from gpufeed.pipelines.tables import iter_batches

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": np.arange(1000, dtype=np.float64), "b": rng.random(1000),
                          "label": rng.integers(0, 4, 1000)})
    return iter_batches(frame, ["a", "b"], "label", batch_size=kwargs.pop("batch_size", 100), device="cpu",
                        **kwargs)


def _rows(batches: list) -> list[list[int]]:
    return [x[:, 0].long().tolist() for x, _ in batches]


def test_iter_batches_iterated_once_per_epoch_gives_every_epoch_its_batches_in_a_new_order():
    """Lightning (``FitLoop``) and a DataLoader-style loop call ``iter()`` once per epoch and
    ``len()`` for the progress bar. A one-shot generator gave epoch 0 its 10 batches and
    every later epoch none, without a word. Each pass is now the next epoch: the batches
    ``iter_batches(..., epoch=k)`` gives, in a new order each epoch with ``shuffle``."""
    batches = _table_batches(shuffle=True, seed=3, epoch=5)
    assert len(batches) == 10
    passes = [_rows(list(batches)) for _ in range(3)]
    assert [len(p) for p in passes] == [10, 10, 10]
    for k, rows in enumerate(passes):
        assert rows == _rows(list(_table_batches(shuffle=True, seed=3, epoch=5 + k)))  # the epoch's own order
        assert sorted(sum(rows, [])) == list(range(1000))  # every row once
    assert passes[0] != passes[1] != passes[2]
    assert len(_table_batches(drop_last=True, batch_size=300)) == 3 and len(_table_batches(batch_size=300)) == 4


def test_iter_batches_pass_left_early_is_followed_by_the_next_epoch():
    """``limit_train_batches`` and the sanity check leave a pass early; the next ``iter()``
    is the next epoch from its start, not the same first batches again."""
    batches = _table_batches(shuffle=True, seed=1)
    it = iter(batches)
    first_two = _rows([next(it), next(it)])
    assert first_two == _rows(list(_table_batches(shuffle=True, seed=1, epoch=0)))[:2]
    assert _rows(list(batches)) == _rows(list(_table_batches(shuffle=True, seed=1, epoch=1)))


def test_iter_batches_next_reads_one_pass_as_the_generator_did():
    batches = _table_batches(batch_size=400)
    got = [next(batches), next(batches), next(batches)]
    assert [len(x) for x, _ in got] == [400, 400, 200]
    with pytest.raises(StopIteration):
        next(batches)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("cut", [0, 3, 10])
def test_iter_batches_resumed_from_its_state_gives_the_rest_of_the_epoch(shuffle, cut):
    """Lightning saves a loader's ``state_dict()`` in a mid-epoch checkpoint and, resumed,
    calls ``load_state_dict`` on a new one, then ``iter()``: before + after is the epoch
    (after its last batch: the epoch's end, the rest empty; after its end: the next epoch)."""
    epoch = [_rows(list(_table_batches(shuffle=shuffle, seed=7, epoch=e))) for e in (2, 3)]
    batches = _table_batches(shuffle=shuffle, seed=7, epoch=2)
    it = iter(batches)
    before = _rows([next(it) for _ in range(cut)])
    state = batches.state_dict()
    assert state["epoch"] == 2 and state["batches_done"] == cut
    resumed = _table_batches(shuffle=shuffle, seed=7)
    resumed.load_state_dict(state)
    after = _rows(list(resumed))
    assert before + after == epoch[0]
    assert _rows(list(resumed)) == epoch[1]
    if cut == 10:  # the pass closed (its StopIteration): the next epoch's start
        assert next(it, None) is None
        assert {k: batches.state_dict()[k] for k in ("epoch", "batches_done")} == {"epoch": 3, "batches_done": 0}


@pytest.mark.parametrize("calls_set_epoch", [False, True])
def test_iter_batches_checkpointed_after_an_epochs_last_batch_resumes_each_epoch_once(calls_set_epoch):
    """A step-based checkpoint right after an epoch's last batch, resumed by a loop over
    ``range(saved_epoch, E)``, with or without ``set_epoch`` (as the image loader documents):
    the state named the next epoch's start, so epoch 1 ran twice (12 batches for 9) or the
    loop got one epoch too many."""
    def run(batches: object, first: int, log: list, stop_after: int | None = None) -> tuple[int, dict] | None:
        for epoch in range(first, 3):
            if calls_set_epoch:
                batches.set_epoch(epoch)
            for batch in batches:
                log.append(_rows([batch]))
                if len(log) == stop_after:
                    return epoch, batches.state_dict()
        return None

    whole: list = []
    run(_table_batches(shuffle=True, seed=2, batch_size=400), 0, whole)
    cut: list = []
    saved_epoch, state = run(_table_batches(shuffle=True, seed=2, batch_size=400), 0, cut, stop_after=3)
    resumed = _table_batches(shuffle=True, seed=2, batch_size=400)
    resumed.load_state_dict(state)
    rest: list = []
    run(resumed, saved_epoch, rest)
    assert len(whole) == 9 and cut + rest == whole


def test_iter_batches_state_after_set_epoch_is_that_epochs_start():
    """``set_epoch`` makes the next pass that epoch, so a state taken then says so; it named
    the pass left early before it (epoch 0 after 3 batches), and the run resumed from it
    trained the rest of epoch 0 instead of epoch 7."""
    batches = _table_batches(shuffle=True, seed=2)
    it = iter(batches)
    for _ in range(3):
        next(it)
    batches.set_epoch(7)
    state = batches.state_dict()
    assert (state["epoch"], state["batches_done"]) == (7, 0)
    resumed = _table_batches(shuffle=True, seed=2)
    resumed.load_state_dict(state)
    assert _rows(list(resumed)) == _rows(list(batches)) == _rows(list(_table_batches(shuffle=True, seed=2, epoch=7)))


def test_iter_batches_next_after_set_epoch_reads_that_epoch():
    """``next()`` reads one pass; after ``set_epoch`` (as after ``load_state_dict``) the pass
    it reads is the set epoch's, which ``state_dict()`` then counts. It went on with the
    old pass while the state stayed at the set epoch's start."""
    batches = _table_batches(shuffle=True, seed=8)
    next(batches)
    batches.set_epoch(5)
    assert _rows([next(batches)]) == _rows(list(_table_batches(shuffle=True, seed=8, epoch=5)))[:1]
    assert (batches.state_dict()["epoch"], batches.state_dict()["batches_done"]) == (5, 1)


def test_iter_batches_set_epoch_of_the_resumed_epoch_keeps_its_cut():
    """A loop that calls ``set_epoch(epoch)`` every epoch (as with ``DistributedSampler``, and
    as docs/integrations.md does with the image loader) after ``load_state_dict``: the
    resumed epoch goes on from its cut; it was replayed from its first batch (the 4 batches
    before the cut trained twice). Another epoch starts afresh, as on the image loader."""
    whole = _rows(list(_table_batches(shuffle=True, seed=4, epoch=2)))
    first = _table_batches(shuffle=True, seed=4, epoch=2)
    it = iter(first)
    before = _rows([next(it) for _ in range(4)])
    state = first.state_dict()
    resumed = _table_batches(shuffle=True, seed=4)
    resumed.load_state_dict(state)
    resumed.set_epoch(state["epoch"])
    assert resumed.state_dict()["batches_done"] == 4
    assert before + _rows(list(resumed)) == whole
    other = _table_batches(shuffle=True, seed=4)
    other.load_state_dict(state)
    other.set_epoch(3)
    assert _rows(list(other)) == _rows(list(_table_batches(shuffle=True, seed=4, epoch=3)))


def test_iter_batches_under_lightning_resumed_after_limit_train_batches_trains_the_next_epoch():
    """As the image loader's test above: Lightning under ``limit_train_batches=2`` leaves each
    pass after 2 batches. A checkpoint after the limit's last batch, resumed (state loaded,
    ``iter()``, then Lightning sets epoch 1), must give epoch 1's batches; it gave the rest of
    epoch 0 (Lightning never told the batches that epoch 0 had ended), and every later epoch
    one behind the uninterrupted run's. A mid-epoch checkpoint still resumes its cut."""
    runs = []
    whole = _table_batches(shuffle=True, seed=6)
    for epoch in range(2):
        lightning_sets_epoch(whole, epoch)
        it = iter(whole)
        runs.append(_rows([next(it), next(it)]))

    cut = _table_batches(shuffle=True, seed=6)
    lightning_sets_epoch(cut, 0)
    it = iter(cut)
    next(it)
    mid = cut.state_dict()
    next(it)
    limited = cut.state_dict()

    resumed = _table_batches(shuffle=True, seed=6)
    resumed.load_state_dict(mid)
    batches = iter(resumed)
    lightning_sets_epoch(resumed, 0)  # epoch 0 still runs
    assert _rows([next(batches)]) == runs[0][1:]

    resumed = _table_batches(shuffle=True, seed=6)
    resumed.load_state_dict(limited)
    batches = iter(resumed)
    lightning_sets_epoch(resumed, 1)  # Lightning's epoch 0 ran to its limit
    assert _rows([next(batches), next(batches)]) == runs[1]
    assert getattr(resumed, "sampler", None) is None  # Lightning's shuffle checks leave it alone


def test_iter_batches_state_in_a_lightning_checkpoint_loads_with_weights_only():
    """Lightning keeps ``state_dict()`` in the checkpoint (``torch.save``) and ``fit(ckpt_path=...)``
    loads it with ``torch.load``'s default ``weights_only=True`` (torch 2.6 and later). With
    numpy arguments (``seed=np.int64(3)``, a ``batch_size`` or ``shuffle`` from a numpy
    config) the state held numpy scalars, and the checkpoint failed to load (``Unsupported
    global: numpy._core.multiarray.scalar``): the run could not resume at all."""
    import io

    import numpy as np
    import torch

    kw = dict(shuffle=np.bool_(True), seed=np.int64(3), drop_last=np.bool_(False), epoch=np.int64(1))
    whole = _rows(list(_table_batches(batch_size=np.int64(100), **kw)))
    cut = _table_batches(batch_size=np.int64(100), **kw)
    it = iter(cut)
    before = _rows([next(it) for _ in range(4)])
    saved = io.BytesIO()
    torch.save({"combined_loader": [cut.state_dict()]}, saved)
    saved.seek(0)
    state = torch.load(saved, weights_only=True)["combined_loader"][0]
    assert all(v is None or type(v) in (int, bool) or (type(v) is list and all(type(c) is str for c in v))
               for v in state.values())
    resumed = _table_batches(batch_size=np.int64(100), **kw)
    resumed.load_state_dict(state)
    assert before + _rows(list(resumed)) == whole


def test_iter_batches_cycled_by_lightning_within_an_epoch_resumes_where_it_was():
    """Two train loaders of unequal length (``{"a": ..., "b": ...}``, Lightning's default
    ``max_size_cycle``): ``_MaxSizeCycle.__next__`` calls ``iter()`` on the shorter one again
    within the epoch (``lightning/pytorch/utilities/combined_loader.py``), so its second pass
    is its epoch 1 while Lightning's epoch is 0. A checkpoint then, resumed (state loaded,
    ``iter()``, Lightning sets epoch 0 again), gave epoch 0's batches from the start instead
    of the rest of that pass: with lightning 2.6.6, the resumed run differed from the
    uninterrupted one from steps 8, 20 and 32 on (11 and 7 batches a pass), and from the
    checkpoints at an epoch's last step (11, 22)."""
    def cycled(batches: object, epoch: int, steps: int) -> list:
        lightning_sets_epoch(batches, epoch)
        it, out = iter(batches), []
        while len(out) < steps:
            try:
                out.append(next(it))
            except StopIteration:
                it = iter(batches)  # _MaxSizeCycle resets the consumed loader
        return out

    short = dict(shuffle=True, seed=5, batch_size=150)  # 7 batches; the other loader has 11
    whole = _table_batches(**short)
    epoch0 = _rows(cycled(whole, 0, 11))  # 11 steps: its 7 batches, then 4 of its next pass
    cut = _table_batches(**short)
    before = _rows(cycled(cut, 0, 8))  # checkpoint after step 8: the second pass's first batch
    state = cut.state_dict()
    resumed = _table_batches(**short)
    resumed.load_state_dict(state)
    assert before + _rows(cycled(resumed, 0, 3)) == epoch0
    epoch1 = _rows(cycled(whole, 1, 11))
    assert _rows(cycled(resumed, 1, 11)) == epoch1  # the next epoch as before

    # A checkpoint at the epoch's last step (4 batches into the second pass), resumed:
    # Lightning sets epoch 1, which starts afresh as in the uninterrupted run; it went on
    # from batch 4 of the pass (epoch 1's order, its first 4 batches never trained).
    cut = _table_batches(**short)
    cycled(cut, 0, 11)
    resumed = _table_batches(**short)
    resumed.load_state_dict(cut.state_dict())
    assert _rows(cycled(resumed, 1, 11)) == epoch1


def test_iter_batches_refuses_a_state_of_other_batches():
    state = _table_batches(shuffle=True).state_dict()
    with pytest.raises(ValueError, match="batch_size=100 vs 50"):
        _table_batches(shuffle=True, batch_size=50).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle=True vs False"):
        _table_batches().load_state_dict(state)


@pytest.mark.parametrize(("key", "value"), [("batches_done", -1), ("batches_done", 11), ("batches_done", 2.7),
                                            ("batches_done", True), ("epoch", -1), ("epoch", "3"),
                                            ("set_epoch", -1), ("set_epoch", 1.5)])
def test_iter_batches_refuses_a_state_whose_position_is_not_one(key, value):
    """As the image loader refuses one: ``batches_done=-1`` gave 11 batches, the first of
    the last 100 rows and then empty ones; 2.7 was taken for 2."""
    state = _table_batches().state_dict()
    state[key] = value
    with pytest.raises(ValueError, match=key):
        _table_batches().load_state_dict(state)


def test_iter_batches_refuses_bad_arguments_when_called():
    """At the call, where the mistake is, not at the first batch of the first epoch."""
    with pytest.raises(ValueError, match="batch_size must be a whole number >= 1"):
        _table_batches(batch_size=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loaders_missing_sampler_says_what_to_use_instead(image_folder, backend):
    """accelerate's ``skip_first_batches(loader, n)`` and DataLoader code reach for
    ``loader.sampler``; the error says how to go on from a batch with the kit. Lightning's
    ``getattr(loader, "sampler", None)`` still gets None."""
    loader = load(image_folder, backend, train=True, batch_size=8)
    with pytest.raises(AttributeError, match=r"has no sampler.*state_dict\(\).*register_for_checkpointing"):
        loader.sampler  # noqa: B018
    assert getattr(loader, "sampler", None) is None
    with pytest.raises(AttributeError, match="object has no attribute 'nothing_here'"):
        loader.nothing_here  # noqa: B018


@pytest.mark.parametrize("name", ["dataset", "sampler"])
def test_table_batches_missing_dataloader_attributes_say_what_to_use_instead(name):
    """accelerate's ``skip_first_batches(batches, n)`` reached for ``batches.dataset`` and
    failed naming the attribute only."""
    batches = _table_batches()
    with pytest.raises(AttributeError, match=rf"TableBatches has no {name}:.*state_dict\(\)"):
        getattr(batches, name)
    assert getattr(batches, name, None) is None
    with pytest.raises(AttributeError, match="object has no attribute 'nothing_here'"):
        batches.nothing_here  # noqa: B018


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loader_cycled_by_lightning_within_an_epoch_resumes_where_it_was(image_folder, backend):
    """Two train loaders of unequal length: Lightning's ``max_size_cycle`` (its default)
    iterates the shorter one again within an epoch, so its second pass there is the next
    epoch's order. A checkpoint in that pass, resumed (``load_state_dict``, ``iter()``, then
    Lightning's ``set_epoch`` of its own epoch), must go on in that pass, not restart the
    Lightning epoch's order."""
    kw = dict(train=True, batch_size=16, shuffle=True, seed=4)
    loader = load(image_folder, backend, **kw)
    lightning_sets_epoch(loader, 0)
    first = fingerprints(list(loader))
    second = iter(loader)  # cycled: the Lightning epoch goes on
    before = fingerprints([next(second), next(second)])
    state = loader.state_dict()
    rest = fingerprints(list(second))
    del loader, second
    resumed = load(image_folder, backend, **kw)
    resumed.load_state_dict(state)
    it = iter(resumed)  # FitLoop.setup_data
    lightning_sets_epoch(resumed, 0)  # on_advance_start: Lightning's epoch
    assert before + fingerprints(list(it)) == before + rest
    assert len(first) == len(before + rest)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cycled_loader_checkpointed_after_lightnings_epoch_ends_starts_the_next_epoch_afresh(image_folder, backend):
    """The shorter of two train loaders is in its second pass (the loader's epoch 1) when
    the longer one ends Lightning's epoch 0, and the checkpoint is taken there. Lightning
    then sets epoch 1, which restarts the loader's epoch 1 from its first batch in the run
    that never stopped; resumed (``load_state_dict``, ``iter()``, ``set_epoch(1)``), the
    loader went on from the cut of that pass instead (lightning 2.6.6, checked)."""
    kw = dict(train=True, batch_size=16, shuffle=True, seed=4)
    loader = load(image_folder, backend, **kw)
    lightning_sets_epoch(loader, 0)
    list(loader)
    second = iter(loader)  # cycled: the Lightning epoch goes on
    next(second)
    state = loader.state_dict()  # the longer loader ended Lightning's epoch 0 here
    del second
    lightning_sets_epoch(loader, 1)
    epoch1 = fingerprints(list(loader))
    del loader
    resumed = load(image_folder, backend, **kw)
    resumed.load_state_dict(state)
    it = iter(resumed)  # FitLoop.setup_data
    lightning_sets_epoch(resumed, 1)  # on_advance_start: Lightning's next epoch
    assert fingerprints(list(it)) == epoch1 and len(epoch1) == len(resumed)


@pytest.mark.parametrize(("ranks", "batch_size", "last_batch", "train", "warns"), [
    (3, 13, "partial", True, True),  # 40 images: slices of 13, 13, 14 -> 1 or 2 batches
    (6, 6, "partial", True, True),  # 6 or 7 -> 1 or 2
    (3, 8, "partial", True, False),  # 13 or 14 -> 2 batches on every rank
    (2, 8, "partial", True, False),  # 20 and 20
    (3, 13, "drop", True, False),
    (3, 13, "fill", True, False),
    (3, 13, "partial", False, False),  # evaluation: partial is what it wants
])
def test_ddp_training_with_partial_batches_of_unequal_counts_warns(image_folder, ranks, batch_size, last_batch,
                                                                   train, warns):
    """Under Lightning's DDP on CPU (2 ranks, 65 images, batch 8: 4 and 5 steps) the rank with
    a step more synced it with the other's next epoch, then died when it finished, and the
    job exited 0 (NCCL would hang). A training loader whose rank slices take different
    numbers of batches under ``partial`` says so when it is built."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load(image_folder, "torch", train=train, batch_size=batch_size, last_batch=last_batch, shard_id=0,
             num_shards=ranks)
    said = [str(w.message) for w in caught if "rank slices" in str(w.message)]
    assert bool(said) == warns, said
    if warns:
        assert "take 1 or 2 batches" in said[0] and "last_batch='drop'" in said[0]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("ranks", [2, 3])
def test_iter_batches_shards_each_epoch_across_ranks_exactly_once(shuffle, drop_last, ranks):
    """``shard_id``/``num_shards`` (a DistributedSampler's rank and replicas): each epoch every
    row on one rank at most once (every row, without ``drop_last``); with ``drop_last`` every
    rank the same number of full batches, as DDP needs; each rank resumable on its own."""
    n, size = 1000, 64
    per_rank = [_table_batches(shuffle=shuffle, seed=2, drop_last=drop_last, batch_size=size, shard_id=r,
                               num_shards=ranks) for r in range(ranks)]
    for epoch in range(2):
        rows = [sum(_rows(list(b)), []) for b in per_rank]
        together = sum(rows, [])
        assert len(together) == len(set(together))  # no row on two ranks, none twice
        if drop_last:
            assert len({len(b) for b in per_rank}) == 1  # every rank steps alike
            assert len(together) == ranks * ((n // ranks) // size * size)
        else:
            assert sorted(together) == list(range(n))
        assert [len(r) for r in rows] == [min(len(b) * size, len(r)) for b, r in zip(per_rank, rows, strict=True)]
        if not shuffle and epoch == 0:
            assert rows[0][0] == 0 and rows[1][0] == n // ranks  # contiguous slices of the order
    cut = per_rank[1]
    cut.set_epoch(5)
    it = iter(cut)
    before = _rows([next(it)])
    again = _table_batches(shuffle=shuffle, seed=2, drop_last=drop_last, batch_size=size, shard_id=1,
                           num_shards=ranks)
    again.load_state_dict(cut.state_dict())
    whole = _table_batches(shuffle=shuffle, seed=2, drop_last=drop_last, batch_size=size, shard_id=1,
                           num_shards=ranks, epoch=5)
    assert before + _rows(list(again)) == _rows(list(whole))
    with pytest.raises(ValueError, match="num_shards=2 vs 4"):
        _table_batches(shuffle=shuffle, seed=2, drop_last=drop_last, batch_size=size, shard_id=1,
                       num_shards=4).load_state_dict(_table_batches(shard_id=1, num_shards=2, shuffle=shuffle, seed=2,
                                                                    drop_last=drop_last, batch_size=size).state_dict())


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("cut", [0, 3, 7])
def test_iter_batches_under_ddp_every_rank_resumes_from_rank_0s_state(shuffle, cut):
    """Lightning under DDP (2.6.6, checked with ``strategy="ddp", devices=2``) writes the
    checkpoint on rank 0 alone: its ``combined_loader`` entry is rank 0's ``state_dict()``
    (``shard_id: 0``), and ``fit(ckpt_path=...)`` loads that file on every rank. Rank 1
    refused it ("differing ... shard_id=0 vs 1"), so no DDP run resumed. The position
    (epoch, batches done) is every rank's, as all ranks step alike: each rank goes on with
    its own rows from there. ``cut``: batches of epoch 1 done (7: all of them)."""
    ranks, size = 2, 64  # 500 rows a rank: 7 full batches each

    def make(rank: int, **kwargs: object) -> object:
        return _table_batches(shuffle=shuffle, seed=1, drop_last=True, batch_size=size, shard_id=rank,
                              num_shards=ranks, **kwargs)

    running = [make(r) for r in range(ranks)]
    seen: list[list[list[int]]] = [[] for _ in range(ranks)]
    for r, batches in enumerate(running):  # each rank: epoch 0 whole, then `cut` batches of epoch 1
        lightning_sets_epoch(batches, 0)
        seen[r] += _rows(list(batches))
        lightning_sets_epoch(batches, 1)
        it = iter(batches)
        seen[r] += _rows([next(it) for _ in range(cut)])
    checkpoint = running[0].state_dict()  # rank 0's alone, as Lightning writes it
    for r in range(ranks):
        resumed = make(r)
        resumed.load_state_dict(checkpoint)  # on every rank
        lightning_sets_epoch(resumed, 1 if cut < 7 else 2)
        rest = _rows(list(resumed))
        whole = [b for e in range(3) for b in _rows(list(make(r, epoch=e)))]
        assert len(rest) == 7 - cut or cut == 7 and len(rest) == 7
        assert seen[r] + rest == whole[:len(seen[r]) + len(rest)]  # this rank's own uninterrupted batches


@pytest.mark.parametrize(("shard_id", "num_shards"), [(2, 2), (-1, 2), (0, 0), (True, 2), (0.5, 2)])
def test_iter_batches_refuses_a_shard_outside_its_count(shard_id, num_shards):
    with pytest.raises(ValueError, match="shard_id must be in 0 .. num_shards - 1"):
        _table_batches(shard_id=shard_id, num_shards=num_shards)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("last_batch", ["drop", "fill"])
@pytest.mark.parametrize("num_shards", [2, 3])  # 40 images: slices of 20, and of 14, 13 and 13
@pytest.mark.parametrize("cut", ["mid-epoch", "epoch end"])
def test_every_ddp_rank_resumes_from_rank_0s_loader_state(image_folder, backend, last_batch, num_shards, cut):
    """Lightning writes a checkpoint on rank 0 only, so ``fit(ckpt_path=...)`` loads rank 0's
    loader state on every rank. Rank 1 refused it (``settings shard_id``), so no DDP run
    resumed; it now goes on with its own slice from the same epoch and batch. Also from a
    state taken at the epoch's last step, after which Lightning sets its next epoch (the
    run under Lightning's DDP in ``docs/integrations.md`` did both, on uneven slices)."""
    kw = dict(train=True, batch_size=4, shuffle=True, seed=6, last_batch=last_batch, num_shards=num_shards)
    last = num_shards - 1  # the rank furthest from rank 0 (a smaller slice when uneven)
    rank0, other = (load(image_folder, backend, shard_id=r, **kw) for r in (0, last))
    for loader in (rank0, other):
        lightning_sets_epoch(loader, 1)
    it0, it1 = iter(rank0), iter(other)
    for _ in range(2 if cut == "mid-epoch" else len(rank0)):
        next(it0), next(it1)
    state = rank0.state_dict()
    rest = fingerprints(list(it1))
    epoch = 1
    if cut == "epoch end":  # nothing left of epoch 1: Lightning sets epoch 2 and iterates again
        assert rest == []
        epoch = 2
        lightning_sets_epoch(other, epoch)
        rest = fingerprints(list(other))
    resumed = load(image_folder, backend, shard_id=last, **kw)
    resumed.load_state_dict(state)
    it = iter(resumed)
    lightning_sets_epoch(resumed, epoch)
    assert fingerprints(list(it)) == rest
    assert resumed.samples_yielded == other.samples_yielded
    with pytest.raises(ValueError, match="num_shards"):  # another split is still refused
        load(image_folder, backend, **{**kw, "num_shards": 4, "shard_id": 1}).load_state_dict(state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_partial_rank_state_past_this_ranks_last_batch_resumes_at_its_epoch_end(image_folder, backend):
    """With ``last_batch="partial"`` ranks may differ by a batch (40 images, 3 ranks, batch
    13: rank 2 has 2 batches, rank 0 one). Rank 2's state after its last batch, loaded on
    rank 0, failed with "batch 2 is outside this plan" and named no rank; rank 0 had ended
    its epoch by then, so it now resumes at its epoch's end and goes on with the next."""
    kw = dict(train=True, batch_size=13, shuffle=True, seed=6, last_batch="partial", num_shards=3)
    rank0, rank2 = (load(image_folder, backend, shard_id=r, **kw) for r in (0, 2))
    assert (len(rank0), len(rank2)) == (1, 2)
    it = iter(rank2)
    next(it), next(it)
    resumed = load(image_folder, backend, shard_id=0, **kw)
    resumed.load_state_dict(rank2.state_dict())
    assert list(resumed) == []  # the rest of epoch 0 on rank 0: nothing
    next_epoch = load(image_folder, backend, shard_id=0, **kw)
    next_epoch.set_epoch(1)
    assert [y.tolist() for _, y in resumed] == [y.tolist() for _, y in next_epoch]
