"""``make kernels``: build every kernel image with NVRTC 12.6 (the CUDA of JetPack 6.1/6.2) into
kernels/images and write the manifest; ``--check`` rebuilds in memory and fails if the shipped
images or manifest differ (a source edited without ``make kernels``, or another compiler).

NVRTC's output depends only on the source text, the options and the NVRTC version (not on paths
or the machine), so the rebuild is byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from importlib import metadata

from . import nvrtc
from .images import (
    COMPILE_OPTIONS,
    KERNEL_DIR,
    MANIFEST,
    SOURCES,
    TARGETS,
    image_path,
    source_digest,
)


def build_all(targets: Sequence[str] = TARGETS) -> tuple[dict[str, bytes], dict]:
    """Every (source, target) image of ``targets``, by file name, and the manifest that
    describes them (the shipped manifest when ``targets`` is all of TARGETS)."""
    options = [*COMPILE_OPTIONS, f"-I{KERNEL_DIR}"]
    files: dict[str, bytes] = {}
    sources = {}
    for source in SOURCES:
        text = (KERNEL_DIR / f"{source}.cu").read_text()
        images = {}
        for target in targets:
            data = nvrtc.compile_source(text, f"{source}.cu", target, options)
            name = image_path(source, target).name
            files[name] = data
            images[target] = {"file": name, "sha256": hashlib.sha256(data).hexdigest()}
        sources[source] = {"digest": source_digest(source), "images": images}
    manifest = {
        "compiler": f"NVRTC {'.'.join(map(str, nvrtc.version()))}",
        "nvrtc_wheel": f"{nvrtc.WHEEL}=={metadata.version(nvrtc.WHEEL)}",
        "cuda": list(nvrtc.version()),
        "options": list(COMPILE_OPTIONS),
        "sources": sources,
    }
    return files, manifest


def manifest_text(manifest: dict) -> str:
    """The manifest as written to disk (stable key order, trailing newline)."""
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def differences(files: dict[str, bytes], manifest: dict) -> list[str]:
    """What the shipped images and manifest lack or hold differently from a fresh build."""
    found = []
    for name, data in files.items():
        path = MANIFEST.parent / name
        if not path.is_file():
            found.append(f"{name}: missing")
        elif path.read_bytes() != data:
            found.append(f"{name}: differs from a fresh build")
    if not MANIFEST.is_file() or MANIFEST.read_text() != manifest_text(manifest):
        found.append(f"{MANIFEST.name}: differs from a fresh build")
    found += [f"{name}: not a target any more" for name in leftovers(files)]
    return found


def leftovers(files: dict[str, bytes]) -> list[str]:
    """Images in kernels/images that a fresh build no longer writes (a dropped target): they
    would ship in every install for nothing."""
    kept = {*files, MANIFEST.name}
    return sorted(p.name for p in MANIFEST.parent.iterdir() if p.name not in kept)


def main(argv: list[str] | None = None) -> int:
    """Write the images (or, with ``--check``, compare them); 1 if a check finds differences."""
    parser = argparse.ArgumentParser(prog="make kernels", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    files, manifest = build_all()
    if args.check:
        found = differences(files, manifest)
        for line in found:
            print(line, file=sys.stderr)
        if found:
            print("stale kernel images: run `make kernels` and commit them", file=sys.stderr)
        return 1 if found else 0
    MANIFEST.parent.mkdir(exist_ok=True)
    for name in leftovers(files):
        (MANIFEST.parent / name).unlink()
    for name, data in files.items():
        (MANIFEST.parent / name).write_bytes(data)
    MANIFEST.write_text(manifest_text(manifest))
    total = sum(len(d) for d in files.values())
    print(f"{len(files)} images ({total / 1024:.0f} KiB) and {MANIFEST.name} in {MANIFEST.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
