"""The GPU path: CUDA kernels and their pycuda launchers, plus the numpy twin that checks them.

* ``kernels/``: the CUDA sources (``common.cuh``, ``preprocess.cu``, ``postprocess.cu``,
  ``overlay.cu``, ``lift.cu``) and their prebuilt images (``kernels/images``); ``images`` reads
  them and the manifest, ``loader`` loads the one that fits the device (else a local nvcc's
  build), and ``nvrtc`` / ``build`` make them (``make kernels``, dev only);
* ``constants``: host mirrors of the kernels' constants, table layout and parameter lists;
* ``preprocess``, ``postprocess``, ``overlay``: the launchers the TensorRT backend uses;
  ``lift``: the 3-D lifting launcher (``GpuLift``);
* ``twin``: the kernels' algorithm step for step in numpy, the oracle of the tests and of
  scripts/gpu_check.py; ``frames``: the synthetic frames those checks share. The runtime
  modules never import either (test/gpu/test_trt_lazy.py holds them to it);
* ``lift_twin``: the same for the lift kernels, with the synthetic scenes of their tests and of
  the GPU check, and that check's comparison (``lift_twin.check_against_twin``).

Importing this package imports nothing else; pycuda is imported when a launcher is built.
"""
