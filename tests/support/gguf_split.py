"""A real GGUF split as llama.cpp's gguf-split does: NAME-00001-of-0000N.gguf ..., every part
with `split.no`, `split.count` and `split.tensors.count`, the metadata in the first part, the
tensors spread over the parts. The gguf package's writer makes the parts (its
`split_max_tensors`, the same the converter's --split-max-tensors uses); the tensors and
metadata are copied from the source file as gguf-py's gguf_new_metadata copies them."""

from __future__ import annotations

import math
from pathlib import Path

import gguf


def split_gguf(source: Path, folder: Path, stem: str, parts: int) -> list[Path]:
    """`source` as `parts` files `folder`/`stem`-0000i-of-0000N.gguf, in order."""
    reader = gguf.GGUFReader(source)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    per_part = math.ceil(len(reader.tensors) / parts)
    folder.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(folder / f"{stem}.gguf", arch, split_max_tensors=per_part)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by the writer itself
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape,
                          raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    names = [folder / f"{stem}-{i:05d}-of-{parts:05d}.gguf" for i in range(1, parts + 1)]
    missing = [p.name for p in names if not p.is_file()]
    if missing:
        raise AssertionError(f"the gguf writer did not make {missing} from {source}")
    return names
