"""CompactInst perception: image -> preprocess -> encoder -> decoder -> postprocess -> messages.

The runtime modules (this package minus ``model``, ``train``, ``export`` and ``bench``) never
import torch, so the node runs on a vehicle with only numpy, OpenCV and an inference runtime.
"""

__version__ = "0.1.0"
