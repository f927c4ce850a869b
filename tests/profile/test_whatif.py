"""The what-if against injected delays: the verdict and the loader that keeps up."""

import pytest

from gpufeed.profile import WhatIf, what_if
from tests.profile.fakes import SleepyLoader, known, sleepy_step

STEPS, WARMUP = 10, 2


def test_input_bound_verdict_and_the_loader_that_would_keep_up():
    result = what_if(sleepy_step(0.010), SleepyLoader(0.040), steps=STEPS, warmup=WARMUP, device="cpu",
                     loader_name="slow", alternatives={"fast": SleepyLoader(0.002), "slower": SleepyLoader(0.060)})
    assert result.bound == "input"
    assert abs(result.predicted_stall_pct - 75) < 5  # 1 - (4 per 40 ms) / (4 per 10 ms)
    assert abs(result.actual.stall_pct - 80) < 5     # 40 ms wait of every 50 ms
    assert result.verdict.startswith(f"input-bound by {result.predicted_stall_pct:.0f}%")
    assert result.keeps_up == ["fast"] and "fast would remove the stall" in result.advice
    assert result.advice.startswith("load in the background first")  # a loader without workers: overlap first
    text = result.to_text()
    assert "model alone" in text and "loader alone (slow" in text and "slow" in text and "verdict: input-bound" in text


class Prefetching:
    """A loader that prepares the next batch on a thread while the step runs (as DataLoader
    workers do), without forking."""

    def __init__(self, inner: SleepyLoader) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):  # noqa: ANN204 - a generator
        import queue
        import threading

        ready: queue.Queue = queue.Queue(maxsize=2)
        end = object()
        threading.Thread(target=lambda: [*map(ready.put, self.inner), ready.put(end)], daemon=True).start()
        while (item := ready.get()) is not end:
            yield item


def test_compute_bound_verdict_with_a_prefetching_loader():
    result = what_if(sleepy_step(0.040), Prefetching(SleepyLoader(0.010)), steps=STEPS, warmup=WARMUP,
                     device="cpu")
    assert result.bound == "compute" and result.predicted_stall_pct == 0
    assert result.verdict.startswith("compute-bound")
    assert result.actual.stall_pct < 5 and not result.in_foreground
    assert "not the bottleneck" in result.advice


def test_a_loader_that_loads_in_the_foreground_is_told_to_load_in_the_background():
    """A DataLoader without workers keeps up alone but loads while the step waits: it had
    been told it was not the bottleneck, and the note blamed shared CPU cores."""
    result = what_if(sleepy_step(0.040), SleepyLoader(0.010), steps=STEPS, warmup=WARMUP, device="cpu")
    assert result.bound == "compute" and result.in_foreground
    assert abs(result.actual.stall_pct - 100 * 10 / 50) < 5
    assert result.advice.startswith("load in the background") and "num_workers >= 1" in result.advice
    assert any("loading did not overlap the step" in n for n in result.notes)
    assert not any("CPU cores" in n for n in result.notes)


def test_a_background_loader_on_shared_cores_is_not_told_to_load_in_the_background():
    """The same back-to-back loop from a loader that does prefetch (workers, DALI) sharing two
    CPU cores with the step: the kit's DALI loader had been told to use "a prefetching loader
    (the kit's)". The cause is contention for the cores."""
    result = what_if(sleepy_step(0.040), SleepyLoader(0.010), steps=STEPS, warmup=WARMUP, device="cpu",
                     background=True)
    assert result.bound == "compute" and not result.in_foreground
    assert "not the bottleneck" in result.advice and "load in the background" not in result.advice
    assert any("share this machine's CPU cores" in n for n in result.notes)
    assert result.as_dict()["advice"] == result.advice


def test_rates_given_as_numbers_and_none_that_keeps_up():
    result = WhatIf(model_rate=400.0, loader_rate=100.0, actual=known(), loader="torch",
                    loaders_alone={"torch": 100.0, "pil": 50.0, "dali": 300.0})
    assert result.keeps_up == [] and result.predicted_stall_pct == pytest.approx(75.0)
    assert result.advice.startswith("none of the other loaders measured keeps up: the fastest, dali")
    assert "25% short" in result.advice
    doc = result.as_dict()
    assert {"model_alone", "loader_alone", "together", "bound", "predicted_stall_pct", "verdict",
            "loaders_alone", "keeps_up", "advice", "notes"} <= set(doc)
    # Together, known() ran at 200 images/s: above min(400, 100), so nothing to note.
    assert doc["notes"] == []


def test_a_slow_together_run_is_noted():
    result = WhatIf(model_rate=1000.0, loader_rate=1000.0, actual=known())  # together: 200/s
    assert result.notes and "CPU cores" in result.notes[0]


def test_a_one_shot_iterator_is_refused():
    with pytest.raises(ValueError, match="re-iterable"):
        what_if(sleepy_step(0), iter(SleepyLoader(0, batches=3)), device="cpu")
    with pytest.raises(ValueError, match="steps"):
        what_if(sleepy_step(0), SleepyLoader(0), steps=0, device="cpu")


def test_a_compute_bound_loop_that_still_waited_says_why():
    # Alone, the loader (1000/s) outruns the model (250/s), yet known() waited 75 % of its time.
    result = WhatIf(model_rate=250.0, loader_rate=1000.0, actual=known())
    assert result.bound == "compute"
    assert any("75% of the loop still went to waiting for data: likely" in n for n in result.notes)


def test_an_overlapped_loop_that_stalls_for_another_reason_is_not_told_to_load_in_the_background():
    """With a loader 10x the model, loading and step back to back run at almost the model's
    rate, so the rate alone took this overlapped loop (a 13% stall, where loading in the
    foreground would cost 9%) for one that loads in the foreground."""
    from gpufeed.profile.stall import StallReport

    overlapped = StallReport(wait=(0.0015,) * 30, step=(0.0103,) * 30, samples=(8,) * 30, warmup=0, clock="wall",
                             device="cpu")
    result = WhatIf(model_rate=800.0, loader_rate=8000.0, actual=overlapped)
    assert not result.in_foreground and "not the bottleneck" in result.advice


def test_whether_a_loader_loads_in_the_background_is_read_from_it(image_folder):
    # A kit loader measured from Python was told to "load in the background" like a plain
    # generator: only gpufeed stall passed background=.
    import torch

    from gpufeed.backends import dali_installed
    from gpufeed.pipelines import classification_loader
    from gpufeed.profile.whatif import prepares_in_background

    def kit(backend, workers):
        return classification_loader(str(image_folder), train=False, backend=backend, device="cpu", batch_size=4, size=32,
                                     num_workers=workers)

    assert prepares_in_background(kit("torch", 0)) is False
    assert prepares_in_background(kit("torch", 2)) is True
    if dali_installed():
        assert prepares_in_background(kit("dali", 1)) is True
    data = torch.utils.data.TensorDataset(torch.zeros(4, 1))
    assert prepares_in_background(torch.utils.data.DataLoader(data, num_workers=2)) is True
    assert prepares_in_background(torch.utils.data.DataLoader(data)) is False
    assert prepares_in_background([1, 2]) is None


class _Banking(SleepyLoader):
    """Workers that banked ``batches_ahead`` batches while the loader started: the first
    takes 200 ms, the other four come with it, then each batch takes 20 ms to make."""

    batches_ahead = 5

    def __init__(self) -> None:
        super().__init__(delays=[0.2] + [0.0] * 4 + [0.02] * 40)


def test_the_loader_alone_is_timed_past_the_batches_it_banked():
    from gpufeed.profile.whatif import loader_rate

    # warmup=0: the bank, drawn before the meter starts, must not land in the first step.
    auto = loader_rate(_Banking(), steps=8, warmup=0, device="cpu", settle=False)
    assert len(auto.wait) == 10  # the bank drawn first, unmeasured; 8 steps rounded up to 2 banks of 5
    assert 150 < auto.samples_per_s < 300  # 4 samples per 20 ms: 200/s (the start inside: 100/s)
    early = loader_rate(_Banking(), steps=3, warmup=2, drain=0, device="cpu", settle=False)  # 2 of 3 from the bank
    assert early.samples_per_s > 2 * auto.samples_per_s


def test_what_a_loader_banks_ahead_is_read_from_it(image_folder):
    import torch

    from gpufeed.backends import dali_installed
    from gpufeed.pipelines import classification_loader
    from gpufeed.profile.whatif import batches_ahead, drain_for

    def kit(backend, workers):
        return classification_loader(str(image_folder), train=False, backend=backend, device="cpu", batch_size=4,
                                     size=32, num_workers=workers)

    assert batches_ahead(kit("torch", 0)) == 0
    assert batches_ahead(kit("torch", 2)) == 8  # 2 workers x prefetch 4
    if dali_installed():
        assert batches_ahead(kit("dali", 2)) == 3  # DALI's CPU queue; no feed workers on a CPU
    data = torch.utils.data.TensorDataset(torch.zeros(4, 1))
    assert batches_ahead(torch.utils.data.DataLoader(data, num_workers=3, prefetch_factor=4)) == 12
    assert batches_ahead(torch.utils.data.DataLoader(data)) == 0
    assert batches_ahead([1, 2]) is None
    assert drain_for([1, 2], None) == 0 and drain_for(kit("torch", 2), None) == 8
    assert drain_for(kit("torch", 2), 1) == 1  # as given
    with pytest.raises(ValueError, match="drain"):
        drain_for([1], -1)


def test_the_verdict_does_not_flip_on_noise_near_the_balance():
    from tests.profile.fakes import known

    near = WhatIf(model_rate=1000.0, loader_rate=995.0, actual=known())
    assert near.balanced and near.verdict.startswith("balanced") and "by 0%" not in near.verdict
    short = WhatIf(model_rate=1000.0, loader_rate=800.0, actual=known(), loaders_alone={"loader": 800.0, "x": 998.0})
    assert "input-bound by 20%" in short.verdict and "<1% short" in short.advice


def test_an_input_bound_loop_loading_in_the_foreground_is_told_to_load_in_the_background():
    # A DataLoader without workers, input-bound: "no other loader was measured" was all it said.
    result = what_if(sleepy_step(0.01), SleepyLoader(0.02, batches=40), steps=10, device="cpu", background=False)
    assert result.bound == "input" and result.advice.startswith("load in the background first")


def test_a_step_slowed_by_the_loaders_work_is_noted():
    from tests.profile.fakes import known

    # known(): steps of 10 ms in the loop; alone the step took 2 ms.
    result = WhatIf(model_rate=2000.0, loader_rate=8000.0, actual=known(), model_step_s=0.002)
    assert result.step_slowdown == pytest.approx(5.0)
    assert any("5.0x as long in the loop" in n and "torch.set_num_threads" in n for n in result.notes)
