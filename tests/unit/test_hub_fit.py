"""The fit of a Hub repo's files before any download: headers read by Range requests, the
same fit model as registry models, and a stranger's bad header as a clear error."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from app.fit.base import RAM_SHARE
from app.fit.estimate import file_estimate
from app.fit.recommend import choose
from app.gguf_file import parse_gguf, read_gguf
from app.pull import remote_gguf
from app.pull.hf_fit import fit_repo, recommended
from app.pull.hf_repo import list_quants
from app.pull.remote_gguf import read_remote_gguf
from backends.errors import ModelFileError
from tests.support.hub_repos import (
    CONTEXT,
    LAYERS,
    add_gguf_repo,
    add_mlx_repo,
    model_gguf,
    projector_gguf,
)
from tests.support.hub_server import start_hub
from tests.support.machines import desktop

QUANTS = ["IQ2_XXS", "Q2_K", "Q3_K_S", "Q3_K_M", "Q4_0", "Q4_K_S", "Q4_K_M", "IQ4_XS",
          "IQ4_NL", "Q5_0", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "UD-Q4_K_XL", "UD-Q2_K_XL",
          "Q3_K_L", "BF16", "F16", "F32"]


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch):
    server_hub, server = start_hub()
    monkeypatch.setenv("HF_ENDPOINT", server_hub.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield server_hub
    server.shutdown()


def test_a_remote_header_reads_as_the_local_file_with_only_the_header_fetched(hub, tmp_path):
    data = model_gguf(tmp_path / "m.gguf", vocab=30_000, weights=1_000_000)  # header ~0.5 MB
    hub.add("o/m-GGUF", "m-Q8_0.gguf", data)
    head = read_remote_gguf("o/m-GGUF", "m-Q8_0.gguf", len(data))
    local = read_gguf(tmp_path / "m.gguf")
    assert (head.info.params, head.info.data_bytes, head.info.metadata) == (
        local.params, local.data_bytes, local.metadata)
    assert head.info.file_size == len(data)
    # growing chunks: 256 KiB, then doubled, until the tensor table is read
    assert head.requests >= 2
    assert hub.served_bytes() == head.bytes_read < len(data) // 4
    ranges = [r["range"] for r in hub.requests if "/resolve/" in r["path"]]
    assert ranges[0] == f"bytes=0-{remote_gguf.FIRST_CHUNK - 1}"


def test_a_20_file_repo_is_fitted_from_headers_only(hub, tmp_path):
    files = add_gguf_repo(hub, tmp_path, "o/Big-GGUF", QUANTS, weights=600_000)
    listing = list_quants("o/Big-GGUF")
    assert len(listing.quants) == 20
    hw = desktop()
    fits = fit_repo(listing, hw)
    assert all(f.fit is not None and f.error is None for f in fits)
    total = sum(len(d) for d in files.values())
    assert hub.served_bytes() < total / 5  # headers, not weights
    for f in fits:  # each read: at most the first chunk of a 1-8 MB file
        assert f.header_bytes <= remote_gguf.FIRST_CHUNK < f.quant.size
    # the same numbers as the fit of the downloaded file (the registry's formula)
    some = next(f for f in fits if f.quant.name == "Q6_K")
    local = file_estimate(read_gguf(tmp_path / "Big-Q6_K.gguf"), hw, CONTEXT // 2)
    assert some.fit is not None
    assert some.fit.memory == local.memory
    assert (some.fit.placement, some.fit.decode_tokens_per_s) == (local.placement,
                                                                   local.decode_tokens_per_s)
    assert some.fit.context == 4096 and some.fit.layers == LAYERS


def test_the_recommendation_is_the_best_quantization_that_fits_this_machine(hub, tmp_path):
    add_gguf_repo(hub, tmp_path, "o/m-GGUF", ["Q4_0", "Q8_0", "F16"], weights=8_000_000)
    listing = list_quants("o/m-GGUF")
    roomy = fit_repo(listing, desktop())
    best = recommended(roomy, desktop())
    assert best is not None and best.quant.name == "F16"  # everything fits: the best quality
    totals = {f.quant.name: f.fit.memory.total for f in roomy if f.fit}
    # RAM between the Q8_0's needs and the F16's: the F16 does not fit
    tight = desktop(ram_available=int((totals["Q8_0"] + totals["F16"]) / 2 / RAM_SHARE))
    fits = fit_repo(listing, tight)
    best = recommended(fits, tight)
    assert best is not None and best.fit is not None
    assert best.quant.name != "F16" and best.fit.placement != "wont_fit"
    assert {f.quant.name: f.fit.placement for f in fits if f.fit}["F16"] == "wont_fit"
    # the registry's rule over the downloaded files' own fits picks the same
    local = [replace(file_estimate(read_gguf(tmp_path / f"m-{q}.gguf"), tight, 4096), quant=q)
             for q in ("Q4_0", "Q8_0", "F16")]
    bits = {q: (tmp_path / f"m-{q}.gguf").stat().st_size * 8
            / read_gguf(tmp_path / f"m-{q}.gguf").params for q in ("Q4_0", "Q8_0", "F16")}
    expected = choose(local, tight, lambda f: bits[f.quant])
    assert expected is not None and best.quant.name == expected.quant


def test_a_repos_vision_projector_counts_in_each_quantizations_fit(hub, tmp_path):
    add_gguf_repo(hub, tmp_path, "o/v-GGUF", ["Q8_0"])
    (plain,) = fit_repo(list_quants("o/v-GGUF"), desktop())
    hub.add("o/v-GGUF", "mmproj-v-f16.gguf", projector_gguf(tmp_path / "mmproj.gguf"))
    (seeing,) = fit_repo(list_quants("o/v-GGUF"), desktop())
    size = (tmp_path / "mmproj.gguf").stat().st_size
    assert seeing.fit.memory.projector == size
    assert seeing.fit.memory.total - plain.fit.memory.total == size


def test_a_split_gguf_is_fitted_from_every_part(hub, tmp_path):
    parts = [model_gguf(tmp_path / f"p{i}.gguf", weights=200_000, split=(i, 3))
             for i in (1, 2, 3)]
    for i, data in enumerate(parts, 1):
        hub.add("o/s-GGUF", f"Q8_0/s-Q8_0-{i:05d}-of-00003.gguf", data)
    (fit,) = fit_repo(list_quants("o/s-GGUF"), desktop())
    assert fit.error is None and fit.info is not None
    assert fit.quant.split and fit.info.file_size == sum(len(p) for p in parts)
    local = []
    for i in (1, 2, 3):
        with (tmp_path / f"p{i}.gguf").open("rb") as f:
            local.append(parse_gguf(f, len(parts[i - 1]), tmp_path / f"p{i}.gguf",
                                    split_part=i > 1))
    assert fit.info.params == sum(p.params for p in local)
    assert fit.info.tensor_count == 4 and fit.info.embedding == local[0].embedding
    assert hub.served_bytes() < sum(len(p) for p in parts) / 2


def test_an_mlx_repo_is_fitted_from_its_config(hub, tmp_path):
    add_mlx_repo(hub, tmp_path, "mlx-community/Tiny-4bit")
    (fit,) = fit_repo(list_quants("mlx-community/Tiny-4bit"), desktop())
    assert fit.error is None and fit.fit is not None
    assert (fit.quant.format, fit.fit.layers, fit.fit.quant) == ("mlx", 2, "4bit")
    assert list(hub.served) == [("mlx-community/Tiny-4bit", "config.json")]  # no weights


def _header(n_kv: int, body: bytes) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 1, n_kv) + body


def _string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


@pytest.mark.parametrize(("data", "error"), [
    (b"<html>not found</html>" + b"\0" * 100, "not a GGUF file"),
    (_header(1, _string(b"general.tags") + struct.pack("<IIQ", 9, 4, 10**9)),
     "an array of 1000000000 items cannot fit"),
    (_header(1, _string(b"general.tags") + struct.pack("<IIQ", 9, 4, 5000)),
     "a metadata array of 5,000 items"),
    (_header(1, _string(b"x") + struct.pack("<IQ", 8, 2**40)), "truncated GGUF"),
    (b"GGUF" + struct.pack("<IQQ", 3, 10**12, 1), "corrupt GGUF header"),
])
def test_a_bad_header_from_a_strangers_server_is_a_clear_error(hub, data, error):
    hub.add("o/bad-GGUF", "bad-Q4_K_M.gguf", data + b"\0" * 5000)
    (fit,) = fit_repo(list_quants("o/bad-GGUF"), desktop())
    assert fit.fit is None and error in (fit.error or "")
    assert "hf.co/o/bad-GGUF/bad-Q4_K_M.gguf" in (fit.error or "")


def test_a_header_that_never_ends_stops_at_the_cap(hub, monkeypatch):
    monkeypatch.setattr(remote_gguf, "MAX_HEADER_BYTES", 1 << 20)
    # a vocabulary of 10 million one-byte strings in a 50 MB file: the header alone is 90 MB
    body = _string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 10_000_000)
    body += _string(b"a") * 200_000
    data = _header(1, body)
    hub.add("o/huge-GGUF", "huge-Q4_K_M.gguf", data)
    with pytest.raises(ModelFileError, match="runs past 1 MiB"):
        read_remote_gguf("o/huge-GGUF", "huge-Q4_K_M.gguf", 50_000_000)
    assert hub.served_bytes() <= 1 << 20


def test_a_server_ignoring_range_is_read_only_as_far_as_asked(hub, tmp_path, monkeypatch):
    data = model_gguf(tmp_path / "m.gguf", vocab=100, weights=2_000_000)
    hub.add("o/m-GGUF", "m-Q8_0.gguf", data)
    monkeypatch.setattr("tests.support.hub_server.range_end", lambda handler, size: size)
    monkeypatch.setattr("tests.support.hub_server.range_start", lambda handler: 0)
    head = read_remote_gguf("o/m-GGUF", "m-Q8_0.gguf", len(data))
    assert head.info.params == read_gguf(tmp_path / "m.gguf").params
    assert head.bytes_read == remote_gguf.FIRST_CHUNK


def test_a_path_outside_the_repo_never_reaches_the_fit(tmp_path: Path, hub):
    hub.add("o/x-GGUF", "a/../../etc-Q4_K_M.gguf", b"GGUF")
    with pytest.raises(Exception, match="unsafe name"):
        list_quants("o/x-GGUF")
