"""Searching the Hub and grouping a repo's files into quantizations, against the local
server speaking the Hub's protocol and JSON (tests/support/hub_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import DownloadError
from app.pull import hf_repo
from app.pull.hf_repo import HubFile, group_files, list_quants, quant_name
from app.pull.hf_search import search
from tests.support.hub_server import start_hub


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    server_hub, server = start_hub()
    monkeypatch.setenv("HF_ENDPOINT", server_hub.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield server_hub
    server.shutdown()


def test_search_returns_the_repos_with_downloads_likes_date_licence_and_gating(hub):
    hub.repo("bartowski/Qwen2.5-7B-Instruct-GGUF", downloads=90_000, likes=120,
             tags=("gguf", "text-generation"), library_name="gguf", license="apache-2.0",
             last_modified="2025-03-02T10:00:00.000Z")
    hub.repo("meta-llama/Llama-3.2-1B-Instruct-GGUF", downloads=5_000, likes=40,
             tags=("gguf",), gated="manual", license="llama3.2")
    hub.repo("someone/unrelated-bert", downloads=1_000_000, tags=("transformers",))
    repos = search("instruct", fmt="gguf")
    assert [r.id for r in repos] == ["bartowski/Qwen2.5-7B-Instruct-GGUF",
                                     "meta-llama/Llama-3.2-1B-Instruct-GGUF"]
    qwen, llama = repos
    assert (qwen.downloads, qwen.likes, qwen.license, qwen.gated) == (90_000, 120,
                                                                      "apache-2.0", False)
    assert qwen.last_modified is not None and qwen.last_modified.year == 2025
    assert qwen.formats == ("gguf",)
    assert llama.gated and llama.license == "llama3.2"
    # what went over the wire: the search, the tag filter, the sort, the fields asked for
    query = next(r["path"] for r in hub.requests if r["path"].startswith("/api/models?"))
    assert "search=instruct" in query and "filter=gguf" in query and "sort=downloads" in query
    assert "expand=gated" in query and "expand=lastModified" in query


def test_search_filters_by_format_and_sorts_by_recent(hub):
    hub.repo("a/old-GGUF", downloads=10, tags=("gguf",), last_modified="2024-01-01T00:00:00Z")
    hub.repo("b/new-GGUF", downloads=1, tags=("gguf",), last_modified="2025-06-01T00:00:00Z")
    hub.repo("c/model-4bit", downloads=5, tags=("mlx",), library_name="mlx",
             last_modified="2025-01-01T00:00:00Z")
    assert [r.id for r in search("", fmt="gguf", sort="recent")] == ["b/new-GGUF", "a/old-GGUF"]
    assert [r.id for r in search("", fmt="mlx")] == ["c/model-4bit"]
    assert [r.id for r in search("", sort="downloads")] == ["a/old-GGUF", "c/model-4bit",
                                                            "b/new-GGUF"]
    assert [r.id for r in search("", sort="downloads", limit=1)] == ["a/old-GGUF"]


def test_search_refuses_an_unknown_sort_or_format(hub):
    with pytest.raises(DownloadError, match="cannot sort by 'stars'"):
        search("x", sort="stars")
    with pytest.raises(DownloadError, match="unknown format 'onnx'"):
        search("x", fmt="onnx")


@pytest.mark.parametrize(("filename", "quant"), [
    ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Q4_K_M"), ("gemma-3-4b-it-IQ4_XS.gguf", "IQ4_XS"),
    ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"), ("model.Q8_0.gguf", "Q8_0"),
    ("Llama-3-8B-bf16.gguf", "BF16"), ("phi-4-f16.gguf", "F16"), ("tiny-q8_0.gguf", "Q8_0"),
    ("gpt-oss-20b-MXFP4.gguf", "MXFP4"), ("x-IQ2_XXS-00001-of-00003.gguf", "IQ2_XXS"),
    ("model.gguf", None)])
def test_the_quantization_is_read_from_the_file_name(filename, quant):
    assert quant_name(filename) == quant


def _f(name: str, size: int = 100) -> HubFile:
    return HubFile(name, size, "0" * 64)


def test_split_ggufs_are_one_set_and_projectors_are_not_quantizations():
    quants, projectors = group_files("o/r", [
        _f("README.md"), _f("m-Q4_K_M.gguf", 400), _f("m-Q8_0.gguf", 800),
        _f("Q8_0/m-Q8_0-00002-of-00002.gguf", 700), _f("BF16/m-BF16-00001-of-00002.gguf", 900),
        _f("BF16/m-BF16-00002-of-00002.gguf", 800), _f("mmproj-m-f16.gguf", 50),
        _f("mmproj-m-bf16.gguf", 50), _f("Q2_K/m-Q2_K-00001-of-00002.gguf", 10)])
    by_name = {q.name: q for q in quants}
    # the incomplete Q2_K set (part 2 missing) and the Q8_0 set without part 1 are not offered;
    # the single-file Q8_0 keeps its name
    assert sorted(by_name) == ["BF16", "Q4_K_M", "Q8_0"]
    bf16 = by_name["BF16"]
    assert bf16.split and bf16.size == 1700
    assert [f.name for f in bf16.files] == ["BF16/m-BF16-00001-of-00002.gguf",
                                            "BF16/m-BF16-00002-of-00002.gguf"]
    assert by_name["Q8_0"].files[0].name == "m-Q8_0.gguf"
    assert [p.name for p in projectors] == ["mmproj-m-f16.gguf", "mmproj-m-bf16.gguf"]


def test_an_mlx_folder_is_one_directory_model_of_its_files():
    quants, projectors = group_files("mlx-community/Qwen2.5-0.5B-Instruct-4bit", [
        _f("config.json"), _f("model.safetensors", 300), _f("tokenizer.json"),
        _f("README.md"), _f("images/chart.png")], tags=("mlx",))
    assert projectors == ()
    (q,) = quants
    assert (q.name, q.format) == ("4bit", "mlx")
    assert sorted(f.name for f in q.files) == ["config.json", "model.safetensors",
                                               "tokenizer.json"]
    (plain,) = group_files("Qwen/Qwen2.5-0.5B", [_f("config.json"), _f("model.safetensors")])[0]
    assert (plain.name, plain.format) == ("safetensors", "safetensors")


def test_two_files_of_one_quantization_are_named_by_file():
    quants, _ = group_files("o/r", [_f("a-Q4_K_M.gguf", 1), _f("b-Q4_K_M.gguf", 2)])
    assert [q.name for q in quants] == ["a-Q4_K_M", "b-Q4_K_M"]


def test_the_listing_comes_from_model_info_with_sizes_hashes_licence(hub, tmp_path):
    hub.repo("o/m-GGUF", license="mit", tags=("gguf",))
    hub.add("o/m-GGUF", "m-Q4_K_M.gguf", b"G" * 1000)
    hub.add("o/m-GGUF", "mmproj-m-f16.gguf", b"P" * 10)
    hub.add("o/m-GGUF", "README.md", b"readme")
    listing = list_quants("o/m-GGUF")
    assert (listing.license, listing.gated, listing.sha) == ("mit", False, "a" * 40)
    (q,) = listing.quants
    assert q.name == "Q4_K_M" and q.size == 1000
    assert q.files[0].sha256 == hub.files[("o/m-GGUF", "m-Q4_K_M.gguf")].etag
    assert listing.projector() is not None and listing.projector().name == "mmproj-m-f16.gguf"
    assert any("blobs=true" in r["path"] for r in hub.requests)


def test_a_missing_quantization_lists_those_there_are(hub):
    hub.add("o/m-GGUF", "m-Q4_K_M.gguf", b"G" * 10)
    hub.add("o/m-GGUF", "m-Q8_0.gguf", b"G" * 20)
    with pytest.raises(DownloadError, match=r"no quantization 'Q5_K_M'; it has: Q4_K_M, Q8_0"):
        list_quants("o/m-GGUF").quant("Q5_K_M")
    assert list_quants("o/m-GGUF").quant("q8_0").name == "Q8_0"  # any case


def test_a_missing_repo_is_a_404_error(hub):
    with pytest.raises(DownloadError, match=r"not found on the hub \(HTTP 404\)"):
        list_quants("nobody/nothing")


def test_a_file_name_leaving_the_repo_is_refused(hub):
    hub.add("o/evil-GGUF", "../../x-Q4_K_M.gguf", b"G" * 10)
    with pytest.raises(DownloadError, match="unsafe name"):
        list_quants("o/evil-GGUF")


def test_an_absurd_size_in_a_listing_is_refused():
    with pytest.raises(DownloadError, match="impossible size"):
        hf_repo._checked("o/r", "x.gguf", 10**20)


def test_files_named_like_embers_own_are_never_taken():
    quants, _ = group_files("mlx-community/x-4bit", [
        _f("config.json"), _f("model.safetensors"), _f("fake.ember.json"),
        _f("mlx.ember.json"), _f("model.safetensors.part")], tags=("mlx",))
    assert [f.name for f in quants[0].files] == ["config.json", "model.safetensors"]
