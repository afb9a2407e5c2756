"""``min_area``: instances and panoptic things of fewer camera pixels (specks) are removed by
the post-processing rule itself, so every implementation (numpy reference, tiled fast path,
GPU twin and kernels, all cross-checked elsewhere) drops them and numbers the rest 1..N."""

from __future__ import annotations

import numpy as np
import pytest

from compactinst_ros.errors import ConfigError
from compactinst_ros.gpu.frames import speck_frame
from compactinst_ros.labels import SYNTHETIC_LABELS
from compactinst_ros.postprocess import postprocess
from compactinst_ros.postprocess.fast import fast_postprocess
from compactinst_ros.structures import OutputSet, PostprocessOptions


@pytest.mark.parametrize("implementation", [postprocess, fast_postprocess])
def test_a_speck_is_removed_and_the_rest_numbered_1_to_n(implementation) -> None:
    raw, meta = speck_frame()
    kept = implementation(raw, meta, SYNTHETIC_LABELS, PostprocessOptions(min_area=0), OutputSet())
    assert len(kept.instances) == 3
    speck = int(np.argmin(kept.instances.area))
    speck_area = int(kept.instances.area[speck])
    assert 0 < speck_area < PostprocessOptions().min_area  # the default removes it
    things = kept.segments.isthing
    assert int(things.sum()) == 3 and sorted(kept.segments.area[things])[0] == speck_area

    result = implementation(raw, meta, SYNTHETIC_LABELS, PostprocessOptions(), OutputSet())
    others = [i for i in range(3) if i != speck]
    np.testing.assert_array_equal(result.instances.ids, [1, 2])
    np.testing.assert_array_equal(result.instances.area, kept.instances.area[others])
    np.testing.assert_array_equal(result.instances.box, kept.instances.box[others])
    expected = np.zeros_like(kept.instance_raster)  # the speck's pixels become background
    for new_id, old in enumerate(others, start=1):
        expected[kept.instance_raster == kept.instances.ids[old]] = new_id
    np.testing.assert_array_equal(result.instance_raster, expected)
    assert int(result.segments.isthing.sum()) == 2
    assert speck_area not in result.segments.area[result.segments.isthing]
    assert (result.panoptic_raster != 0).sum() == (kept.panoptic_raster != 0).sum() - speck_area
    np.testing.assert_array_equal(result.semantic_raster, kept.semantic_raster)  # per class


def test_min_area_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"min_area=-1 must be in \[0, "):
        PostprocessOptions(min_area=-1)
