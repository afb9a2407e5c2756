"""The runtime (pipeline, backends, node) must import without torch or ray: the vehicle has
neither (ray is the optional ``fleet`` extra of ``compactinst replay-fleet``)."""

import subprocess
import sys

RUNTIME_MODULES = [
    "compactinst_ros.pipeline",
    "compactinst_ros.backends.ort",
    "compactinst_ros.postprocess",
    "compactinst_ros.ros.node",
]


def test_runtime_imports_do_not_load_torch_or_ray() -> None:
    code = (
        "import sys, importlib\n"
        f"for m in {RUNTIME_MODULES!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray'))\n"
        "print('LOADED', bad[:5])\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
