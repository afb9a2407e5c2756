"""NVRTC through ctypes: compiles the kernel sources to a cubin or PTX for a named architecture
on a machine without a GPU or nvcc (used by ``make kernels`` and its CI check, never at run time).

The library comes from the ``nvidia-cuda-nvrtc-cu12`` wheel pinned in setup.py's dev extra, so
every image is built by the same NVRTC, that of JetPack 6.1/6.2's CUDA 12.6.
"""

from __future__ import annotations

import ctypes
import importlib.util
from functools import lru_cache
from pathlib import Path

#: The wheel that ships libnvrtc, and the file name its soname gives the library.
WHEEL = "nvidia-cuda-nvrtc-cu12"
LIBRARY = "libnvrtc.so.12"


class NvrtcError(RuntimeError):
    """NVRTC is missing or refused a program (the message carries its log)."""


def library_path() -> Path:
    """Where the pinned NVRTC wheel put libnvrtc; NvrtcError naming the fix if it is absent."""
    spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / "lib" / LIBRARY
        if path.is_file():
            return path
    raise NvrtcError(
        f"{LIBRARY} not found: the kernel images are built with NVRTC 12.6 from the {WHEEL} "
        "wheel; run `make venv` (or pip install -e '.[dev]')"
    )


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    """The loaded library with the argument types of the calls used here."""
    lib = ctypes.CDLL(str(library_path()))
    size_p = ctypes.POINTER(ctypes.c_size_t)
    for name, args in {
        "nvrtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
        "nvrtcCreateProgram": [
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
            ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p),
        ],
        "nvrtcDestroyProgram": [ctypes.POINTER(ctypes.c_void_p)],
        "nvrtcCompileProgram": [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        "nvrtcGetProgramLogSize": [ctypes.c_void_p, size_p],
        "nvrtcGetProgramLog": [ctypes.c_void_p, ctypes.c_char_p],
        "nvrtcGetPTXSize": [ctypes.c_void_p, size_p],
        "nvrtcGetPTX": [ctypes.c_void_p, ctypes.c_char_p],
        "nvrtcGetCUBINSize": [ctypes.c_void_p, size_p],
        "nvrtcGetCUBIN": [ctypes.c_void_p, ctypes.c_char_p],
    }.items():  # fmt: skip
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def _check(status: int, call: str) -> None:
    """NvrtcError naming ``call`` and NVRTC's text for a non-zero ``status``."""
    if status != 0:
        raise NvrtcError(f"{call}: {_lib().nvrtcGetErrorString(status).decode()}")


def version() -> tuple[int, int]:
    """(major, minor) CUDA version of the loaded NVRTC."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def compile_source(source: str, name: str, arch: str, options: list[str]) -> bytes:
    """Compile ``source`` for ``arch``: ``sm_XY`` gives a cubin, ``compute_XY`` PTX text
    (without its trailing NUL). ``options`` are NVRTC options such as ``-I<dir>``. An error or
    any warning (NVRTC has no -Werror) raises NvrtcError with NVRTC's log."""
    lib = _lib()
    prog = ctypes.c_void_p()
    _check(
        lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
        "nvrtcCreateProgram",
    )
    try:
        args = [f"--gpu-architecture={arch}", *options]
        argv = (ctypes.c_char_p * len(args))(*(a.encode() for a in args))
        status = lib.nvrtcCompileProgram(prog, len(args), argv)
        log_size = ctypes.c_size_t()
        _check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(log_size)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(log_size.value)
        _check(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        if status != 0 or log.value.strip():
            outcome = lib.nvrtcGetErrorString(status).decode() if status else "warnings"
            raise NvrtcError(
                f"NVRTC could not compile {name} for {arch} ({outcome}):\n{log.value.decode()}"
            )
        if arch.startswith("sm_"):
            get_size, get = lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN
        else:
            get_size, get = lib.nvrtcGetPTXSize, lib.nvrtcGetPTX
        size = ctypes.c_size_t()
        _check(get_size(prog, ctypes.byref(size)), get_size.__name__)
        out = ctypes.create_string_buffer(size.value)
        _check(get(prog, out), get.__name__)
        data = out.raw[: size.value]
        return data if arch.startswith("sm_") else data.rstrip(b"\0")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
