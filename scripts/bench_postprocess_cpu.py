#!/usr/bin/env python3
"""CPU micro benchmark of the numpy post-processing: the reference and the tiled fast path.

A realistic frame: Q=100 queries, mask logits at 1/8 of the model input, a few confident thing
queries (elliptic blobs), two stuff queries and the rest low-confidence no-object. Camera frame
== model input (no letterbox). Prints the median time per output and for all three, for the
reference (``reference.postprocess``) and the fast path (``fast.fast_postprocess``, checked
equal first), next to the step the detectron2/Mask2Former path cannot skip: sampling all Q
masks at camera resolution (done here in row chunks so memory stays bounded).

    .venv/bin/python scripts/bench_postprocess_cpu.py [--sizes 512x1024 1024x2048] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from compactinst_ros.labels import SYNTHETIC_LABELS
from compactinst_ros.postprocess import postprocess
from compactinst_ros.postprocess.fast import fast_postprocess
from compactinst_ros.postprocess.resample import Resampler, rows_per_chunk, sigmoid
from compactinst_ros.structures import FrameMeta, OutputSet, PostprocessOptions, RawOutputs

OUTPUTS = {
    "instance": OutputSet(True, False, False),
    "panoptic": OutputSet(False, True, False),
    "semantic": OutputSet(False, False, True),
    "all three": OutputSet(),
}


def realistic_frame(height: int, width: int, queries: int = 100, things: int = 6) -> RawOutputs:
    """Decoder outputs with ``things`` confident thing queries, 2 stuff queries, rest no-object."""
    rng = np.random.default_rng(0)
    k = SYNTHETIC_LABELS.num_classes
    h, w = height // 8, width // 8
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    centre = rng.uniform(0.1, 0.9, (queries, 2, 1, 1)) * np.array([h, w])[None, :, None, None]
    radius = rng.uniform(0.03, 0.12, (queries, 2, 1, 1)) * np.array([h, w])[None, :, None, None]
    dist = ((ys - centre[:, 0]) / radius[:, 0]) ** 2 + ((xs - centre[:, 1]) / radius[:, 1]) ** 2
    masks = 8.0 * (1.0 - dist) + rng.normal(0.0, 1.0, (queries, h, w))
    masks[things] = np.where(ys > h * 0.6, 6.0, -6.0)  # road: bottom 40 %
    masks[things + 1] = np.where(ys < h * 0.3, 6.0, -6.0)  # sky: top 30 %
    cls = rng.normal(0.0, 1.0, (queries, k + 1))
    cls[:, k] += 5.0  # no-object by default
    thing_ids = np.flatnonzero(SYNTHETIC_LABELS.thing_mask)
    cls[np.arange(things), rng.choice(thing_ids, things)] += 12.0
    cls[things, 5] += 12.0
    cls[things + 1, 6] += 12.0
    return RawOutputs(cls.astype(np.float32), masks.astype(np.float32), 8)


def dense_upsample(raw: RawOutputs, meta: FrameMeta) -> float:
    """Sample every query's mask at every camera pixel, with sigmoid (row chunks); checksum."""
    q, h, w = raw.mask_logits.shape
    resampler = Resampler(meta, raw.mask_stride, h, w)
    step = rows_per_chunk(q, meta.src_w, 16 * 1024 * 1024)
    total = 0.0
    for y in range(0, meta.src_h, step):
        rows = slice(y, min(y + step, meta.src_h))
        total += float(sigmoid(resampler.sample(raw.mask_logits, rows))[:, 0, 0].sum())
    return total


def median_ms(fn: object, repeats: int) -> tuple[float, float]:
    """Median wall and process-CPU time of ``fn()`` over ``repeats`` runs after a warm-up, ms.

    The CPU time is what the run would take on an idle core (numpy runs single-threaded
    here); the wall time includes waiting for a shared, loaded machine.
    """
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def main() -> int:
    """Run the benchmark and print one table per size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["512x1024", "1024x2048"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-dense", action="store_true", help="skip the dense baseline")
    args = parser.parse_args()
    print(
        f"numpy {np.__version__}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}, median of {args.repeats} runs"
    )
    options = PostprocessOptions()
    for size in args.sizes:
        height, width = (int(v) for v in size.split("x"))
        meta = FrameMeta.letterbox(height, width, height, width)
        raw = realistic_frame(height, width)
        result = postprocess(raw, meta, SYNTHETIC_LABELS, options, OutputSet())
        print(
            f"\n{size}: Q=100, masks {raw.mask_logits.shape[1]}x{raw.mask_logits.shape[2]}, "
            f"{len(result.instances)} instances, {len(result.segments)} panoptic segments"
        )
        dense_cpu = None
        if not args.no_dense:
            wall, dense_cpu = median_ms(
                lambda r=raw, m=meta: dense_upsample(r, m), max(1, args.repeats // 2)
            )
            print(f"  dense: 100 masks + sigmoid  wall {wall:8.1f} ms  cpu {dense_cpu:8.1f} ms")
        fast = fast_postprocess(raw, meta, SYNTHETIC_LABELS, options, OutputSet())
        for name in ("instance_raster", "panoptic_raster", "semantic_raster"):
            if not np.array_equal(getattr(fast, name), getattr(result, name)):
                raise SystemExit(f"fast post-processing differs from the reference in {name}")
        for name, outputs in OUTPUTS.items():
            cells = []
            for label, implementation in (("reference", postprocess), ("fast", fast_postprocess)):
                wall, cpu = median_ms(
                    lambda o=outputs, r=raw, m=meta, f=implementation: f(
                        r, m, SYNTHETIC_LABELS, options, o
                    ),
                    args.repeats,
                )
                ratio = f" ({dense_cpu / cpu:5.1f}x below dense)" if dense_cpu else ""
                cells.append(f"{label} wall {wall:7.1f} ms cpu {cpu:7.1f} ms{ratio}")
            print(f"  {name:<10} " + "  |  ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
