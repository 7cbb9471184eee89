"""A GGUF file's tensors as float32 arrays, for the backends that run a GGUF model on weights of
their own (the cuda engine's loader, `ember convert --to mlx`).

`gguf.GGUFReader` finds the tensors; two of its costs are avoided:

- It slices its `np.memmap` once per value, and a memmap slice runs Python code
  (`__array_finalize__`): 17 s for the 0.5B's header, mostly the 151k-token vocabulary. Our
  reader slices a plain ndarray view of the same mapping: 4 s, the same fields and tensors.
- `gguf.quants.dequantize` is numpy over groups of rows: 42 s for the 1.5B. A quantized
  tensor goes through ggml's own row converter instead (`ggml_get_type_traits(type)->to_float`
  in llama.cpp's libggml-base, the code llama.cpp dequantizes with), which gives the same
  floats (tests/integration/test_gguf_tensors.py). Float tensors (F32, F16, BF16) stay numpy.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize

FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)


class FastGGUFReader(GGUFReader):
    """`GGUFReader`, reading through a plain ndarray view of its memory map."""

    def _get(self, offset: int, dtype: Any, count: int = 1,
             override_order: Any = None) -> np.ndarray:
        plain = self.__dict__.get("_plain")
        if plain is None:
            plain = self._plain = self.data.view(np.ndarray)  # keeps the mapping alive
        count = int(count)
        end = offset + np.dtype(dtype).itemsize * count
        arr = plain[offset:end].view(dtype=dtype)[:count]
        order = self.byte_order if override_order is None else override_order
        return arr.view(arr.dtype.newbyteorder(order))


class _TypeTraits(ctypes.Structure):  # ggml.h: struct ggml_type_traits
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


_ToFloat = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def _ggml_base_path() -> Path:
    """llama_cpp's libggml-base, by the name libllama opened it with (its SONAME), so that a
    process that also runs llama.cpp holds one copy; llama_cpp's own rule for the folder
    (LLAMA_CPP_LIB_PATH, else the package's lib/)."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        folder = Path(override)
    else:
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or spec.origin is None:
            raise OSError("llama_cpp is not installed")
        folder = Path(spec.origin).parent / "lib"
    if sys.platform == "win32":
        return folder / "ggml-base.dll"
    names = ("libggml-base.so.0", "libggml-base.so") if sys.platform.startswith("linux") \
        else ("libggml-base.0.dylib", "libggml-base.dylib")
    return next((folder / n for n in names if (folder / n).is_file()), folder / names[-1])


@cache
def _to_float(qtype: int) -> Any:
    """ggml's converter of `qtype`'s blocks to float32, or None where this ggml has none."""
    try:
        lib = ctypes.CDLL(str(_ggml_base_path()))
    except OSError:
        return None
    lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    traits = lib.ggml_get_type_traits(int(qtype)).contents
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    if not traits.to_float or traits.blck_size != block or traits.type_size != size:
        return None  # another layout than the gguf package knows: numpy's way
    return _ToFloat(traits.to_float)


def tensor_to_float32(tensor: ReaderTensor) -> np.ndarray:
    """The tensor's values as a new float32 array (never a view of the file), shaped as
    `gguf.quants.dequantize` shapes them: rows of the reader's data, each row's elements."""
    qtype = GGMLQuantizationType(tensor.tensor_type)
    data = tensor.data
    convert = None if qtype in FLOAT_TYPES else _to_float(int(qtype))
    if convert is None:
        return np.array(dequantize(data, qtype), dtype=np.float32)  # F32: a copy
    block, size = GGML_QUANT_SIZES[qtype]
    blocks = np.ascontiguousarray(data, dtype=np.uint8)
    if blocks.shape[-1] % size:
        raise ValueError(f"{tensor.name}: rows of {blocks.shape[-1]} bytes are not whole "
                         f"{qtype.name} blocks of {size}")
    out = np.empty((*blocks.shape[:-1], blocks.shape[-1] // size * block), dtype=np.float32)
    convert(blocks.ctypes.data, out.ctypes.data, out.size)
    return out
