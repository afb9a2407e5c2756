"""Rasters in message memory: handed out again only once nothing holds them, never copied into
a message when whole, copied when a part."""

from __future__ import annotations

import gc

import numpy as np

from compactinst_ros.raster_memory import message_bytes, message_raster


def address(raster: np.ndarray) -> int:
    """Where the raster's array.array keeps its bytes (no reference to it is kept)."""
    return message_bytes(raster).buffer_info()[0]


def test_a_dropped_raster_is_reused_and_a_held_one_never() -> None:
    shape = (7, 11)  # a size no other test uses, so the kept buffers are this test's
    first = message_raster(shape, np.uint16)
    first_at = address(first)
    second = message_raster(shape, np.uint16)
    assert address(second) != first_at  # the first is still held
    del first
    gc.collect()
    third = message_raster(shape, np.uint16)
    assert address(third) == first_at  # reused once dropped
    held = message_bytes(third)  # as a published message holds it
    view = second[2:, 3:]  # a numpy view of the second
    del third, second
    gc.collect()
    fourth = message_raster(shape, np.uint16)
    assert address(fourth) not in (first_at, held.buffer_info()[0])
    assert address(fourth) != address(view.base)  # the viewed raster was not handed out either


def test_whole_rasters_go_as_they_are_and_parts_are_copied() -> None:
    raster = message_raster((5, 9), np.int32)
    raster[:] = np.arange(45).reshape(5, 9)
    whole = message_bytes(raster)
    assert np.shares_memory(np.frombuffer(whole, np.int32), raster)
    for part in (raster[1:], raster[:, 2:], raster.copy(), raster.T):
        copied = message_bytes(part)
        assert not np.shares_memory(np.frombuffer(copied, np.uint8), raster)
        np.testing.assert_array_equal(
            np.frombuffer(copied, np.int32), np.ascontiguousarray(part).ravel()
        )


def test_sizes_and_types_are_kept_apart() -> None:
    a = message_raster((6, 6), np.uint8)
    b = message_raster((6, 3), np.uint16)  # the same byte count, another shape and type
    assert a.shape == (6, 6) and a.dtype == np.uint8 and b.shape == (6, 3) and b.dtype == np.uint16
    assert a.flags.c_contiguous and b.flags.writeable and address(a) != address(b)
