"""The stall meter against injected delays (the truth is known), and how it counts steps."""

import time

import pytest
import torch

from gpufeed.profile import StallMeter
from tests.profile.fakes import SleepyLoader, batch

STEPS, WARMUP = 10, 2


def metered(loader_delay: float, step_delay: float, **meter_kwargs) -> StallMeter:
    meter = StallMeter(SleepyLoader(loader_delay, batches=STEPS + WARMUP), device="cpu", **meter_kwargs)
    for _ in meter:
        time.sleep(step_delay)
    return meter


@pytest.mark.parametrize(("loader_delay", "step_delay"), [(0.040, 0.010), (0.005, 0.040)],
                         ids=["input-bound", "compute-bound"])
def test_stall_is_within_5_points_of_the_injected_truth(loader_delay, step_delay):
    report = metered(loader_delay, step_delay).report()
    truth = 100 * loader_delay / (loader_delay + step_delay)
    assert abs(report.stall_pct - truth) < 5, (report.stall_pct, truth)
    assert report.as_dict()["steps"] == STEPS and sum(report.samples[report.measured]) == 4 * STEPS


def test_warmup_steps_are_left_out_of_the_figures():
    slow_start = [0.3, 0.3] + [0.02] * 6  # worker start-up: two slow first batches
    meter = StallMeter(SleepyLoader(delays=slow_start), device="cpu")
    for _ in meter:
        time.sleep(0.02)
    report = meter.report()
    assert len(report.wait) == 8 and report.warmup == 2
    assert abs(report.stall_pct - 50) < 5
    assert report.as_dict()["per_step_ms"]["wait"]["max"] < 100  # the 300 ms waits are not in it
    with_them = StallMeter(SleepyLoader(delays=slow_start), device="cpu", warmup=0)
    for _ in with_them:
        time.sleep(0.02)
    assert with_them.report().stall_pct > 70


def test_samples_are_counted_from_each_batchs_first_tensor():
    batches = [batch(4), batch(3), {"x": torch.zeros(5, 2), "y": torch.zeros(5)},
               [{"data": torch.zeros(6, 3, 2, 2), "label": torch.zeros(6, 1)}], torch.zeros(2, 7)]
    meter = StallMeter(batches, warmup=0, device="cpu")
    for _ in meter:
        pass
    assert meter.report().samples == (4, 3, 5, 6, 2)


def test_batch_size_of_counts_batches_the_default_cannot():
    meter = StallMeter([object(), object()], warmup=0, device="cpu", batch_size_of=lambda b: 10)
    for _ in meter:
        pass
    assert sum(meter.report().samples) == 20
    with pytest.raises(ValueError, match="batch_size_of"):
        next(iter(StallMeter([object()], device="cpu")))


def test_a_step_ends_when_the_loop_is_left():
    meter = StallMeter(SleepyLoader(0.0, batches=5), warmup=0, device="cpu")
    for _ in meter:
        time.sleep(0.03)
        break
    report = meter.report()
    assert len(report.step) == 1 and report.step[0] >= 0.03
    ended = StallMeter(SleepyLoader(0.0, batches=5), warmup=0, device="cpu")
    for _step, _ in zip(range(2), ended, strict=False):  # zip stops first: the meter is closed after
        time.sleep(0.01)
    assert len(ended.report().step) == 2


def test_an_open_step_is_left_out_and_epochs_add_up():
    meter = StallMeter(SleepyLoader(0.0, batches=3), warmup=0, device="cpu")
    for i, _ in enumerate(meter):
        if i == 1:
            assert len(meter.report().step) == 1  # the step in progress is not counted yet
    for _ in meter:  # a second epoch
        pass
    assert len(meter.report().step) == 6
    meter.reset()
    with pytest.raises(ValueError, match="nothing to report"):
        meter.report()


def test_the_time_iter_takes_is_waiting_for_the_first_batch():
    # A DataLoader starts its workers in iter(), every epoch without persistent_workers:
    # a stall the report must show (it was outside both clocks).
    class SlowStart:
        def __iter__(self):
            time.sleep(0.2)
            return iter([batch()] * 2)

    meter = StallMeter(SlowStart(), warmup=0, device="cpu")
    for _ in range(3):
        for _ in meter:
            time.sleep(0.01)
    report = meter.report()
    assert report.wait_s >= 0.6 and len(report.step) == 6
    assert report.wait[0] >= 0.2 and report.wait[2] >= 0.2 and report.wait[1] < 0.1
    assert report.stall_pct > 80


def test_a_report_comes_back_from_its_json():
    import json

    from gpufeed.profile.report import StallReport

    report = metered(0.002, 0.001).report()
    again = StallReport.from_dict(json.loads(report.to_json()))
    assert again == report and again.as_dict() == report.as_dict()


def test_too_few_steps_for_the_warmup_is_refused_clearly():
    meter = StallMeter([batch(), batch()], warmup=2, device="cpu")
    for _ in meter:
        pass
    with pytest.raises(ValueError, match="2 steps measured and warmup=2"):
        meter.report()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"batches": 5}, "iterable"), ({"warmup": -1}, "warmup"), ({"warmup": 1.5}, "warmup"),
    ({"batch_size_of": 3}, "batch_size_of"), ({"device": "tpu"}, "device"),
])
def test_bad_arguments_raise_value_errors(kwargs, message):
    args = {"batches": [batch()], **kwargs}
    with pytest.raises(ValueError, match=message):
        StallMeter(args.pop("batches"), **args)


def test_len_is_the_loaders():
    assert len(StallMeter(SleepyLoader(batches=7), device="cpu")) == 7


@pytest.mark.gpu
def test_on_cuda_the_step_includes_its_queued_gpu_work():
    x = torch.randn(4096, 4096, device="cuda")
    meter = StallMeter([batch(), batch(), batch()], warmup=1, device="cuda")
    for _ in meter:
        for _ in range(20):  # launches return at once; the GPU works on after the loop body
            x = x @ x
            x = x / x.norm()
    report = meter.report()
    assert "CUDA" in report.clock and report.gpu is not None and len(report.gpu) == 3
    # Synchronised: the step's wall time covers the GPU time of its kernels.
    assert all(s >= g * 0.95 for s, g in zip(report.step, report.gpu, strict=True))
    assert report.gpu_busy_pct > 50


def test_on_cuda_the_meter_waits_for_torchs_stream_not_the_whole_device(monkeypatch):
    # A device-wide synchronise also waited for the loader's own streams (DALI decoding the
    # next batches ahead), charging that overlapped work to the step. CUDA faked here.
    from gpufeed.profile import stall

    calls: list[str] = []

    class Stream:
        def synchronize(self):
            calls.append("stream")

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self, stream):
            assert isinstance(stream, Stream)
            calls.append("event")

        def elapsed_time(self, end):
            return 2.0

    def device_wide(*args):
        raise AssertionError("device-wide synchronize")

    monkeypatch.setattr(stall, "resolve_device", lambda device: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "synchronize", device_wide)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "Event", Event)
    meter = StallMeter([batch(), batch(), batch()], warmup=1, device="cuda")
    for _ in meter:
        pass
    report = meter.report()
    assert report.gpu == (0.002, 0.002, 0.002) and "CUDA" in report.clock
    # iter(), then per step: sync + start event, end event + sync; the closing next() syncs once
    assert calls == ["stream"] + ["stream", "event", "event", "stream"] * 3 + ["stream"]


@pytest.mark.gpu
def test_on_cuda_a_loaders_side_stream_work_is_not_charged_to_the_step():
    # A thread keeps its own stream busy while the loop runs, as DALI's executor decodes the
    # next batches: a device-wide synchronise at the step's end waited for it.
    import threading

    side, stop, bursts = torch.cuda.Stream(), threading.Event(), []

    def decode_ahead():
        with torch.cuda.stream(side):
            y = torch.randn(4096, 4096, device="cuda")
            while not stop.is_set():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(side)
                for _ in range(20):
                    y = y @ y
                    y = y / y.norm()
                end.record(side)
                end.synchronize()
                bursts.append(start.elapsed_time(end) / 1e3)

    thread = threading.Thread(target=decode_ahead, daemon=True)
    thread.start()
    try:
        while not bursts:  # warmed up: one burst done
            time.sleep(0.01)
        meter = StallMeter([batch() for _ in range(21)], warmup=1, device="cuda")
        for _ in meter:
            time.sleep(0.002)  # a host-only step: no GPU work on torch's stream
    finally:
        stop.set()
        thread.join()
    steps = meter.report().step
    burst = sorted(bursts)[len(bursts) // 2]
    assert burst > 0.005, burst  # the side work is long enough to tell apart
    assert sorted(steps)[len(steps) // 2] < 0.002 + burst / 4, (steps, burst)


def test_a_negative_sample_count_is_refused():
    meter = StallMeter([object()], warmup=0, device="cpu", batch_size_of=lambda b: -3)
    with pytest.raises(ValueError, match="batch_size_of returned -3"):
        for _ in meter:
            pass
