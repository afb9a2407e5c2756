"""Batches overlapped on the TensorRT backend's two streams, on the stand-ins of emu/: the next
batch's uploads, preprocessing and encoder are enqueued while this one is still to be decoded, and
every result equals the same frames run one batch at a time. The emulated streams run in both
of their legal schedules (work as late as something waits for it, and as early as its waits
allow), so a consumer that forgets its wait and a producer that reuses a buffer too soon each
fail here."""

from __future__ import annotations

import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import pycuda_emu
import tensorrt_emu

from compactinst_ros.backends.trt import RING
from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.errors import BackendError
from compactinst_ros.gpu.frames import encode, smooth_rgb
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.ros.worker import Finisher
from compactinst_ros.structures import OutputSet

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
RASTERS = ("instance_raster", "panoptic_raster", "semantic_raster")
#: four batches of two cameras, each frame its own content
BATCHES = [[(96, 128, 10 * b + c, ("bgr8", "yuyv")[c]) for c in range(2)] for b in range(4)]


@pytest.fixture(params=pycuda_emu.SCHEDULES)
def gpu(request, emu_lib, monkeypatch, tmp_path):
    """The stand-ins with the emulated streams in one schedule."""
    monkeypatch.setenv("COMPACTINST_ENGINE_CACHE", str(tmp_path / "engines"))
    driver = pycuda_emu.install(monkeypatch, emu_lib, schedule=request.param)
    tensorrt_emu.install(monkeypatch)
    return driver


def prepared(pipe: Pipeline, outputs: OutputSet) -> list[list]:
    return [
        [
            pipe.prepare(np.ascontiguousarray(encode(smooth_rgb(h, w, seed), enc)), enc, outputs)
            for h, w, seed, enc in batch
        ]
        for batch in BATCHES
    ]


def assert_same(got, want) -> None:
    for name in RASTERS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    np.testing.assert_array_equal(got.instances.score, want.instances.score)
    np.testing.assert_array_equal(got.segments.ids, want.segments.ids)


def test_overlapped_batches_equal_one_batch_at_a_time(gpu) -> None:
    """Two batches in flight (encode 0, encode 1, decode 0, encode 2, decode 1, ...) give each
    frame what the batches run one at a time give; a third encode before a decode is refused, as
    is a decode out of order."""
    with Pipeline(default_bundle_path(), backend="tensorrt", batch_sizes=(2,)) as pipe:
        assert pipe.splits_stages
        batches = prepared(pipe, OutputSet())
        trackers = [pipe.make_tracker() for _ in range(2)]
        serial = [pipe.infer_batch(items, trackers) for items in batches]
        assert not np.array_equal(serial[0][0].instance_raster, serial[1][0].instance_raster)
        pending = [pipe.encode_batch(batches[0]), pipe.encode_batch(batches[1])]
        with pytest.raises(BackendError, match=f"{RING} batches are already encoded"):
            pipe.encode_batch(batches[2])
        with pytest.raises(BackendError, match="decode batches in the order"):
            pipe.decode_batch(pending[1], trackers)
        overlapped = []
        for items in batches[2:]:
            overlapped.append(pipe.decode_batch(pending.pop(0), trackers))
            pending.append(pipe.encode_batch(items))
        overlapped += [pipe.decode_batch(p, trackers) for p in pending]
        for got_batch, want_batch in zip(overlapped, serial, strict=True):
            for got, want in zip(got_batch, want_batch, strict=True):
                assert_same(got, want)
                assert set(got.timings_ms) >= {"preprocess", "encoder", "decoder", "postprocess"}


def test_the_node_s_two_threads_overlap_batches_and_draw_their_overlays(
    emu_lib, monkeypatch, tmp_path
) -> None:
    """The encode half on this thread, the decode half and the overlay on the node's finishing
    thread (ros/worker.Finisher), as the staged node runs them: every frame and overlay equals
    its one-at-a-time run. An overlay asked for after its frames' ring slot was claimed again
    is refused rather than drawn from another frame. (The late schedule: the threads' host order
    then decides what runs when.)"""
    monkeypatch.setenv("COMPACTINST_ENGINE_CACHE", str(tmp_path / "engines"))
    pycuda_emu.install(monkeypatch, emu_lib)
    tensorrt_emu.install(monkeypatch)
    asked = OutputSet(overlay=True)
    with Pipeline(default_bundle_path(), backend="tensorrt", batch_sizes=(2,)) as pipe:
        batches = prepared(pipe, asked)
        serial = [pipe.infer_batch(b, [pipe.make_tracker() for _ in b]) for b in batches]
        got: list = []
        finisher = Finisher(
            lambda p: got.append(pipe.decode_batch(p, [pipe.make_tracker() for _ in range(2)])),
            "test_finish",
        )
        threads = set()
        original = pipe.backend.decode_batch

        def decode_on(encoded, options):
            threads.add(threading.current_thread().name)
            return original(encoded, options)

        pipe.backend.decode_batch = decode_on
        for items in batches:
            finisher.put(pipe.encode_batch(items))
        finisher.close()
        assert threads == {"test_finish"}
        for got_batch, want_batch in zip(got, serial, strict=True):
            for one, want in zip(got_batch, want_batch, strict=True):
                assert_same(one, want)
                np.testing.assert_array_equal(one.overlay, want.overlay)
        colours = np.full((101, 3), 200, np.uint8)
        pipe.backend.render_overlay(colours, 0.5, index=1)  # the last batch's: still there
        for items in batches[:2]:
            pipe.encode_batch(items)  # the last batch's ring slot is claimed again
        with pytest.raises(BackendError, match="replaced on the device"):
            pipe.backend.render_overlay(colours, 0.5, index=1)


def test_each_schedule_catches_what_the_other_lets_through(emu_lib, monkeypatch) -> None:
    """The emulator's teeth, on two streams and copies alone. A consumer that does not wait for
    its producer reads the old contents in the late schedule; a producer that refills its one
    buffer before the consumer's copy was enqueued (where a second buffer was needed) hands over
    the refill in the early schedule. Each is right by chance in the other schedule."""
    read = {}
    for schedule in pycuda_emu.SCHEDULES:
        cuda = pycuda_emu.install(monkeypatch, emu_lib, schedule=schedule)
        produce, consume = cuda.Stream(), cuda.Stream()
        frames = [np.full(64, value, np.uint8) for value in (1, 2)]
        buffer, out, host = cuda.mem_alloc(64), cuda.mem_alloc(64), np.empty(64, np.uint8)
        for case in ("no wait", "refill"):
            for alloc in (buffer, out):
                cuda.memcpy_htod(alloc, np.zeros(64, np.uint8))
            done = cuda.Event()
            cuda.memcpy_htod_async(buffer, frames[0], produce)
            done.record(produce)
            if case == "refill":
                cuda.memcpy_htod_async(buffer, frames[1], produce)
                consume.wait_for_event(done)
            cuda.memcpy_dtod_async(out, buffer, 64, consume)
            consume.synchronize()
            cuda.memcpy_dtoh(host, out)
            read[schedule, case] = int(host[0])
    assert read == {
        ("late", "no wait"): 0,  # caught: the copy ran before its producer
        ("early", "no wait"): 1,
        ("late", "refill"): 1,
        ("early", "refill"): 2,  # caught: the refill ran before the copy
    }


def test_a_failed_half_fails_its_batch_and_the_next_ones_run(emu_lib, monkeypatch, tmp_path):
    """An engine that refuses to enqueue (``execute_async_v3`` returning False) fails its batch
    with the stage named, in encode_batch for the encoder and in decode_batch for the decoder;
    the ring slot and the batch's place are let go, so the batches after it run, one at a time
    and overlapped, and equal their runs before the failure."""
    monkeypatch.setenv("COMPACTINST_ENGINE_CACHE", str(tmp_path / "engines"))
    pycuda_emu.install(monkeypatch, emu_lib)
    tensorrt_emu.install(monkeypatch)
    with Pipeline(default_bundle_path(), backend="tensorrt", batch_sizes=(2,)) as pipe:
        batches = prepared(pipe, OutputSet())
        trackers = [pipe.make_tracker() for _ in range(2)]
        want = [pipe.infer_batch(items, trackers) for items in batches[:2]]
        for index, stage in enumerate(("encoder", "decoder")):
            context = pipe.backend._contexts[2][index]
            with monkeypatch.context() as patch:
                patch.setattr(context, "execute_async_v3", lambda handle: False)
                with pytest.raises(BackendError, match=f"failed to enqueue stage '{stage}'"):
                    pipe.infer_batch(batches[2], trackers)
            for got, one in zip(pipe.infer_batch(batches[0], trackers), want[0], strict=True):
                assert_same(got, one)
            pending = [pipe.encode_batch(batches[0]), pipe.encode_batch(batches[1])]
            for started, want_batch in zip(pending, want, strict=True):
                for got, one in zip(pipe.decode_batch(started, trackers), want_batch, strict=True):
                    assert_same(got, one)
