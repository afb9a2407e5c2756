"""The shipped kernel images compute the spec's float arithmetic: no multiply and add that the
spec rounds separately is fused into one FMA (docs/gpu.md, "Float arithmetic"). Read from the
images themselves: the PTX text, and the cubins' SASS as nvdisasm prints it.

The only FMAs allowed are those of library sequences that compute one correctly specified
operation: libdevice's ``expf`` (three ``fma.rn`` on its range-reduction constants and one
``fma.rm`` per ``ex2.approx``) and ptxas's expansions of ``rcp.rn.f32``, ``div.rn.f32`` and
``div.rn.f64`` (Newton steps giving the correctly rounded quotient).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from compactinst_ros.gpu import nvrtc
from compactinst_ros.gpu.images import (
    COMPILE_OPTIONS,
    KERNEL_DIR,
    SOURCES,
    TARGETS,
    image_path,
)

#: libdevice ``__nv_expf``'s range-reduction multiplicands: 0x3BBB989D (log2(e) / 252, the
#: reduction's first step), 0x3FB8AA3B (log2(e)) and 0x32A57060 (log2(e)'s low part).
EXPF_CONSTANTS = {"0f3BBB989D", "0f3FB8AA3B", "0f32A57060"}
#: FFMAs ptxas 12.6 (every shipped cubin, sm_75..sm_90) emits inline for one PTX op: a
#: reciprocal's Newton step, a division's fast path, a double division's range test. Their slow
#: paths are the subroutines LIBRARY_ROUTINE names.
EXPANSION_FFMA = {"rcp.rn.f32": 2, "div.rn.f32": 5, "div.rn.f64": 1}
#: ptxas's correctly rounded division and reciprocal subroutines, the only non-kernel functions.
LIBRARY_ROUTINE = re.compile(r"\$__internal_\d+_\$__cuda_sm\d+x?_(rcp|div)_rn_\w+")
#: A PTX f32 or f64 FMA: its rounding and its two multiplicands.
FMA = r"^\s*(?:@!?%p\d+\s+)?fma\.(rn|rm|rp|rz)(?:\.ftz)?\.f(?:32|64)\s+[^,]+,\s*([^,]+),\s*([^,]+),"
#: A PTX f32 or f64 add, subtract or multiply without a rounding modifier.
UNROUNDED = r"(?<![.\w])(?:add|sub|mul)(?:\.ftz)?\.f(?:32|64)\b"
CUBIN_TARGETS = [t for t in TARGETS if t.startswith("sm_")]
PTX_TARGET = next(t for t in TARGETS if t.startswith("compute_"))


def find_nvdisasm() -> Path | None:
    """nvdisasm on PATH, in the CUDA toolkit, or from the ``nvidia-cuda-nvdisasm`` dev wheel."""
    found = shutil.which("nvdisasm")
    if found:
        return Path(found)
    candidates = [Path("/usr/local/cuda/bin/nvdisasm")]
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidates += sorted(Path(location).glob("cu*/bin/nvdisasm"))
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


NVDISASM = find_nvdisasm()
needs_nvdisasm = pytest.mark.skipif(
    NVDISASM is None,
    reason="nvdisasm not found (PATH, /usr/local/cuda/bin, the nvidia-cuda-nvdisasm wheel of "
    "the dev extra): the cubins' SASS is unchecked; the PTX check still runs",
)


def ptx_arithmetic(text: str) -> dict[str, Counter]:
    """Per kernel of a PTX text: FMAs by origin (``fma_expf``, ``fma_directed``, ``fma_other``),
    f32/f64 add/sub/mul without a rounding modifier (``unrounded``: the driver's JIT may
    contract those), and the ops ptxas expands with FMAs of its own (EXPANSION_FFMA, ``ex2``)."""
    entries = [(m.group(1), m.start()) for m in re.finditer(r"\.entry\s+(\w+)", text)]
    found = {}
    for i, (name, start) in enumerate(entries):
        body = text[start : entries[i + 1][1] if i + 1 < len(entries) else len(text)]
        constant = dict(re.findall(r"mov\.f32\s+(%f\d+),\s*(0f[0-9A-F]{8});", body))
        counts: Counter = Counter()
        for rounding, a, b in re.findall(FMA, body, re.MULTILINE):
            operands = {constant.get(x.strip(), x.strip()) for x in (a, b)}
            if rounding != "rn":
                counts["fma_directed"] += 1  # a contraction always rounds to nearest
            else:
                counts["fma_expf" if operands & EXPF_CONSTANTS else "fma_other"] += 1
        # An op, not an atomic's ``atom.global.add.f64``: a read-modify-write of memory is
        # never contracted with a multiply.
        counts["unrounded"] = len(re.findall(UNROUNDED, body))
        for op in EXPANSION_FFMA:
            counts[op] = len(re.findall(rf"\b{re.escape(op)}\b", body))
        counts["ex2"] = len(re.findall(r"\bex2\.approx(?:\.ftz)?\.f32\b", body))
        found[name] = counts
    return found


def sass_arithmetic(cubin: bytes, tmp_path: Path) -> dict[str, Counter]:
    """Per function of a cubin's SASS (kernels and ptxas's subroutines): FFMA (any rounding or
    saturation) and MUFU.EX2 counts."""
    path = tmp_path / "image.cubin"
    path.write_bytes(cubin)
    proc = subprocess.run(
        [str(NVDISASM), "-c", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    found: dict[str, Counter] = {}
    function = None
    for line in proc.stdout.splitlines():
        label = re.match(r"^([$\w][^\s:]*):\s*$", line)
        if label:
            function = label.group(1)
            found.setdefault(function, Counter())
            continue
        op = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*(?:\.[A-Z0-9]+)*)", line)
        if op and function:
            name = op.group(1)
            if name.split(".")[0] == "FFMA":
                found[function]["FFMA"] += 1
            elif name == "MUFU.EX2":
                found[function]["MUFU.EX2"] += 1
    return found


def contractions_in_ptx(text: str) -> dict[str, Counter]:
    """Kernels whose PTX fuses (or lets the JIT fuse) what the spec rounds separately."""
    return {
        name: Counter(fma_other=c["fma_other"], unrounded=c["unrounded"])
        for name, c in ptx_arithmetic(text).items()
        if c["fma_other"] or c["unrounded"]
    }


def contractions_in_sass(cubin: bytes, ptx: str, tmp_path: Path) -> dict[str, str]:
    """Functions whose SASS holds FFMAs beyond the allowed library sequences of its PTX's ops
    (or that are neither a kernel nor one of ptxas's division subroutines), with why."""
    allowed = ptx_arithmetic(ptx)
    sass = sass_arithmetic(cubin, tmp_path)
    problems = {name: "kernel of the PTX missing in the cubin" for name in allowed.keys() - sass}
    for function, counts in sass.items():
        if function.startswith(".") or LIBRARY_ROUTINE.fullmatch(function):
            continue
        if function not in allowed:
            problems[function] = "neither a kernel nor a ptxas division routine"
            continue
        ops = allowed[function]
        expected = ops["fma_expf"] + ops["fma_directed"]
        expected += sum(n * ops[op] for op, n in EXPANSION_FFMA.items())
        if counts["FFMA"] != expected or counts["MUFU.EX2"] != ops["ex2"]:
            problems[function] = (
                f"{counts['FFMA']} FFMA and {counts['MUFU.EX2']} MUFU.EX2; the spec's "
                f"arithmetic needs {expected} FFMA and {ops['ex2']} MUFU.EX2"
            )
    return problems


@pytest.mark.parametrize("source", SOURCES)
def test_shipped_ptx_fuses_nothing_the_spec_rounds_separately(source: str) -> None:
    text = image_path(source, PTX_TARGET).read_text()
    assert ptx_arithmetic(text), f"no kernels read from {source}.{PTX_TARGET}.ptx"
    found = contractions_in_ptx(text)
    assert not found, f"{source}: fused or contractible float ops {found}; keep --fmad=false"


@needs_nvdisasm
@pytest.mark.parametrize("target", CUBIN_TARGETS)
@pytest.mark.parametrize("source", SOURCES)
def test_shipped_cubins_fuse_nothing_the_spec_rounds_separately(
    source: str, target: str, tmp_path: Path
) -> None:
    cubin = image_path(source, target).read_bytes()
    ptx = image_path(source, PTX_TARGET).read_text()
    found = contractions_in_sass(cubin, ptx, tmp_path)
    assert not found, f"{source}.{target}.cubin: {found}; keep --fmad=false"


def test_checks_catch_nvrtcs_default_contraction(tmp_path: Path) -> None:
    """The checks can fail: NVRTC's default (--fmad=true) fuses the semantic class sums."""
    source = (KERNEL_DIR / "postprocess.cu").read_text()
    options = [o for o in COMPILE_OPTIONS if o != "--fmad=false"] + [f"-I{KERNEL_DIR}"]
    ptx = nvrtc.compile_source(source, "postprocess.cu", PTX_TARGET, options).decode()
    found = contractions_in_ptx(ptx)
    assert found["pp_stats"]["fma_other"] >= 32  # one per class of a semantic chunk
    assert {"pp_stats", "pp_tiles"} <= set(found)
    if NVDISASM is None:
        pytest.skip(needs_nvdisasm.kwargs["reason"])
    cubin = nvrtc.compile_source(source, "postprocess.cu", "sm_87", options)
    assert {"pp_stats", "pp_tiles"} <= set(contractions_in_sass(cubin, ptx, tmp_path))
