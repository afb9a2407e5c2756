"""The prebuilt kernel images shipped in ``kernels/images``: where they are, what the manifest
records about them, and how an image's architecture, kernels and parameter layout are read back
from the bytes (cubin ELF or PTX text), so that tests, the loader and the pycuda stand-in judge
an image by its content, not by its file name.

Numpy-free and pycuda-free: ``make kernels`` (gpu/build.py), the runtime loader (gpu/loader.py)
and the tests share it.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
IMAGE_DIR = KERNEL_DIR / "images"
MANIFEST = IMAGE_DIR / "manifest.json"

#: The kernel sources, one module (and one image per target) each.
SOURCES = ("preprocess", "postprocess", "overlay", "lift")
#: Shipped targets: a cubin for each SASS family users have that NVRTC 12.6 writes (Turing
#: sm_75; Ampere sm_80, sm_86 and Jetson Orin's sm_87; Ada sm_89; Hopper sm_90), and PTX of the
#: lowest one, which the driver JIT-compiles for every newer GPU (Blackwell 10.x/12.x, Thor 11.0:
#: NVRTC 12.6 writes no SASS for them). A cubin also runs on later minors of its major (loader.py).
TARGETS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "compute_75")
#: Options of every build of the sources, NVRTC's and nvcc's alike (device code is optimised
#: by default; nvcc's -O3 would only concern host code, of which there is none). Both contract
#: a multiply and an add into one FMA by default; ``--fmad=false`` keeps every operation
#: separately rounded, as the spec computes (docs/gpu.md, "Float arithmetic").
COMPILE_OPTIONS = ("-std=c++17", "--fmad=false")

_ELF_MAGIC = b"\x7fELF"
_EM_CUDA = 190
#: EI_OSABI of a cubin: CUDA 12 and older write 0x33 with the SM in e_flags bits 0-7 (ELF ABI
#: version 7); CUDA 13 writes 0x41 with the SM in bits 8-15 (ABI version 8), which a CUDA 12
#: driver cannot load.
_OSABI_SM_SHIFT = {0x33: 0, 0x41: 8}
#: ``.nv.info.<kernel>`` attribute that describes one kernel parameter (EIATTR_KPARAM_INFO).
_KPARAM_INFO = 0x17
#: ``.nv.info`` attribute holding a kernel's registers per thread (EIATTR_REGCOUNT)
_REGCOUNT = 0x2F
_PTX_PARAM_CHAR = {".u64": "P", ".b64": "P", ".u32": "i", ".s32": "i", ".f32": "f", ".f64": "d"}


class ImageError(ValueError):
    """Bytes that are not a kernel image this project builds (the message says what is off)."""


@dataclass(frozen=True)
class ImageInfo:
    """What an image holds, read from its bytes."""

    kind: str  # "cubin" or "ptx"
    arch: int  # 87 for sm_87 / compute_87
    abi: str  # cubin: "ELF ABI 7" (CUDA 12 drivers load it); PTX: "PTX ISA 8.5"
    #: kernel name -> (offset, size) of each parameter in the launch's parameter buffer
    params: dict[str, tuple[tuple[int, int], ...]]
    #: PTX only: kernel name -> the pycuda prepare() characters of its parameter types
    types: dict[str, str]

    @property
    def target(self) -> str:
        """``sm_XY`` of a cubin, ``compute_XY`` of PTX."""
        return f"{'sm' if self.kind == 'cubin' else 'compute'}_{self.arch}"


def image_path(source: str, target: str) -> Path:
    """File of the image of kernels/``source``.cu for ``target`` (``sm_XY`` cubin or
    ``compute_XY`` PTX)."""
    return IMAGE_DIR / f"{source}.{target}.{'cubin' if target.startswith('sm_') else 'ptx'}"


def source_digest(source: str, kernel_dir: Path = KERNEL_DIR) -> str:
    """sha256 over kernels/``source``.cu and every header it includes with quotes, in include
    order: changes whenever anything the compiler reads for that source changes."""
    digest = hashlib.sha256()
    seen: set[str] = set()

    def add(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        text = (kernel_dir / name).read_bytes()
        digest.update(f"{name}\0{len(text)}\0".encode() + text)
        for include in re.findall(rb'^\s*#\s*include\s+"([^"]+)"', text, re.MULTILINE):
            add(include.decode())

    add(f"{source}.cu")
    return digest.hexdigest()


def load_manifest(path: Path = MANIFEST) -> dict:
    """The manifest ``make kernels`` wrote (compiler, options, per source digest and images)."""
    return json.loads(path.read_text())


def param_layout(signature: str) -> tuple[tuple[int, int], ...]:
    """(offset, size) of each argument as pycuda packs a prepare() string (``struct`` native
    alignment, which is also the kernel ABI's)."""
    layout = []
    for i, char in enumerate(signature):
        size = struct.calcsize(char)
        layout.append((struct.calcsize(signature[: i + 1]) - size, size))
    return tuple(layout)


def read_image(data: bytes) -> ImageInfo:
    """ImageInfo of a cubin or a PTX text; ImageError for anything else."""
    return _read_cubin(data) if data[:4] == _ELF_MAGIC else _read_ptx(data)


def _read_cubin(data: bytes) -> ImageInfo:
    """Architecture from e_flags, kernels from the global functions of the symbol table and the
    parameters from each kernel's ``.nv.info.<kernel>`` section."""
    if len(data) < 64 or data[4] != 2 or data[5] != 1:
        raise ImageError("not a 64-bit little-endian ELF file")
    osabi, abi_version = data[7], data[8]
    e_machine = struct.unpack_from("<H", data, 18)[0]
    if e_machine != _EM_CUDA or osabi not in _OSABI_SM_SHIFT:
        raise ImageError(f"ELF for machine {e_machine}, OS ABI {osabi:#x}: not a CUDA cubin")
    e_flags = struct.unpack_from("<I", data, 48)[0]
    arch = (e_flags >> _OSABI_SM_SHIFT[osabi]) & 0xFF
    headers = _sections(data)
    # STB_GLOBAL << 4 | STT_FUNC: a __global__ function
    kernels = [name for name, st_info in _symbols(data, headers) if st_info == 0x12]
    info = {header[0]: header for header in headers}
    params = {}
    for name in kernels:
        section = info.get(f".nv.info.{name}")
        params[name] = _kernel_params(data, section[2], section[3]) if section else ()
    return ImageInfo("cubin", arch, f"ELF ABI {abi_version}", params, {})


def kernel_registers(data: bytes) -> dict[str, int]:
    """Registers per thread of every kernel of a cubin, from the EIATTR_REGCOUNT records of its
    ``.nv.info`` section (symbol index, count: what cuobjdump's resource usage prints as REG).
    ImageError for bytes that are not a cubin."""
    if read_image(data).kind != "cubin":
        raise ImageError("register counts are in cubins only, not in PTX")
    headers = _sections(data)
    symbols = [name for name, _ in _symbols(data, headers)]
    registers = {}
    for name, _, offset, size, _, _ in headers:
        if name != ".nv.info":
            continue
        for attribute, value in _info_records(data, offset, size):
            if attribute == _REGCOUNT:
                symbol, count = struct.unpack_from("<II", value)
                registers[symbols[symbol]] = count
    return registers


def _symbols(
    data: bytes, headers: list[tuple[str, int, int, int, int, int]]
) -> list[tuple[str, int]]:
    """(name, st_info) of every entry of the symbol table, in index order."""
    for _, sh_type, offset, size, link, entsize in headers:
        if sh_type == 2:  # SHT_SYMTAB
            names_at = headers[link][2]
            entries = [struct.unpack_from("<IB", data, offset + k * entsize)
                       for k in range(size // entsize)]  # fmt: skip
            return [(_c_string(data, names_at + name), info) for name, info in entries]
    return []


def _sections(data: bytes) -> list[tuple[str, int, int, int, int, int]]:
    """Section headers in index order: (name, type, file offset, size, link, entry size)."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]
    return [
        (_c_string(data, names_at + name), sh_type, offset, size, link, entsize)
        for name, sh_type, _, _, offset, size, link, _, _, entsize in raw
    ]


def _c_string(data: bytes, at: int) -> str:
    """The NUL-terminated string at ``at``."""
    return data[at : data.index(b"\0", at)].decode()


def _info_records(data: bytes, offset: int, size: int) -> list[tuple[int, bytes]]:
    """(attribute, value) of the EIFMT_SVAL records of an ``.nv.info`` section.

    Records are (format, attribute, value): formats 1-3 take 4 bytes in all, format 4 (EIFMT_SVAL)
    a 16-bit length and that many bytes."""
    records = []
    at, end = offset, offset + size
    while at < end:
        fmt, attribute = data[at], data[at + 1]
        if fmt != 4:
            at += 4
            continue
        length = struct.unpack_from("<H", data, at + 2)[0]
        records.append((attribute, data[at + 4 : at + 4 + length]))
        at += 4 + length
    return records


def _kernel_params(data: bytes, offset: int, size: int) -> tuple[tuple[int, int], ...]:
    """(offset, size) per parameter from EIATTR_KPARAM_INFO records, in parameter order. A
    KPARAM_INFO value is index u32, ordinal u16, offset u16, then a u32 whose bits 18-31 hold
    the size."""
    params = {}
    for attribute, value in _info_records(data, offset, size):
        if attribute == _KPARAM_INFO:
            _, ordinal, param_offset, word = struct.unpack_from("<IHHI", value)
            params[ordinal] = (param_offset, word >> 18)
    return tuple(params[i] for i in sorted(params))


def _read_ptx(data: bytes) -> ImageInfo:
    """Architecture from ``.target``, kernels and their parameter types from ``.entry``."""
    try:
        text = data.rstrip(b"\0").decode("ascii")
    except UnicodeDecodeError as exc:
        raise ImageError("neither an ELF cubin nor PTX text") from exc
    target = re.search(r"^\.target\s+sm_(\d+)\s*$", text, re.MULTILINE)
    version = re.search(r"^\.version\s+(\d+\.\d+)\s*$", text, re.MULTILINE)
    if not (target and version):
        raise ImageError("PTX without a .version and a plain .target sm_XY line")
    params, types = {}, {}
    for name, plist in re.findall(r"\.entry\s+(\w+)\s*\(([^)]*)\)", text):
        chars = "".join(_PTX_PARAM_CHAR[t] for t in re.findall(r"\.param\s+(\.\w+)", plist))
        types[name], params[name] = chars, param_layout(chars)
    return ImageInfo("ptx", int(target.group(1)), f"PTX ISA {version.group(1)}", params, types)
