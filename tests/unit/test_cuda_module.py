"""`ember cuda install`: llama.cpp's CUDA module and NVIDIA's runtime wheels, downloaded from a
local server that speaks the package index's Simple API as PyPI does (and serves the
release's files), verified and installed into the data folder; then found by the loader
(backends.llamacpp.added_modules). The module cannot run here (no GPU): its bytes stand in,
and tests/integration/test_llama_vulkan.py loads a real module installed the same way."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from app.config import Paths
from app.errors import ChecksumError, DownloadError
from app.gpu_module.install import ManifestSource, install, read_source
from app.gpu_module.installed import installed, module_folder, modules_root, remove
from app.gpu_module.manifest import ManifestError, parse_manifest
from app.pull.progress import Progress
from app.runtime.gpu_devices import why_skip
from backends.gpu_modules import MODULES_ENV, this_platform
from backends.llamacpp.added_modules import added_modules
from tests.support.cli import ember
from tests.support.cuda_pack import (
    CUDART,
    CUDART_LIBRARY,
    MODULE,
    MODULE_FILE,
    VERSION,
    WHEEL,
    manifest_json,
    served_release,
)


@pytest.fixture
def release(isolated_home: Paths, monkeypatch: pytest.MonkeyPatch):
    """A release folder (the manifest and the module) and NVIDIA's wheel on a package index,
    all on one local server."""
    for name in ("PIP_INDEX_URL", "PIP_CONFIG_FILE", "EMBER_CUDA_MANIFEST"):
        monkeypatch.delenv(name, raising=False)
    with served_release() as served:
        monkeypatch.setenv("EMBER_PYPI_INDEX", served.index.index_url)
        yield {"index": served.index, "module": MODULE, "wheel": WHEEL,
               "manifest": served.manifest, "url": served.url, "home": isolated_home}


def events() -> tuple[list[Progress], callable]:
    seen: list[Progress] = []
    return seen, seen.append


def test_installs_the_module_and_its_runtime_libraries_verified(release):
    seen, report = events()
    done = install(release["home"], read_source(release["url"]), report)
    folder = module_folder(release["home"], "cuda")
    assert done.folder == folder
    assert (folder / "libggml-cuda.so").read_bytes() == release["module"]
    assert (folder / "libcudart.so.13").read_bytes() == CUDART_LIBRARY
    assert sorted(p.name for p in folder.iterdir()) == [
        "libcudart.so.13", "libggml-cuda.so", "module.json"]  # no headers, no dist-info
    assert not (modules_root(release["home"]) / ".partial" / "cuda").exists()
    assert done.llama_cpp_version == VERSION and done.toolkit == "CUDA 13.0"
    assert done.installed_from == release["url"]
    total = len(release["module"]) + len(release["wheel"])
    downloads = [e for e in seen if e.phase == "download"]
    assert downloads[-1].done_bytes == downloads[-1].total_bytes == total
    assert seen[-1].phase == "done"
    # the loader finds it, for this llama.cpp; a build with no GPU module of its own now asks
    env = {MODULES_ENV: str(modules_root(release["home"]))}
    usable, refused = added_modules(env)
    assert [(m.backend, m.path) for m in usable] == [("cuda", folder / "libggml-cuda.so")]
    assert refused == []
    cpu_only = release["home"].home / "cpu-only-lib"
    cpu_only.mkdir()
    assert why_skip({**env, "GGML_VK_VISIBLE_DEVICES": "0"}, cpu_only, "linux") is None
    assert why_skip({"GGML_VK_VISIBLE_DEVICES": "0"}, cpu_only, "linux") == \
        "this llama.cpp build has no GPU backend"


def test_a_dropped_connection_is_resumed_and_a_second_install_replaces_the_first(release):
    release["index"].file(MODULE_FILE).drop_after = 50_000
    install(release["home"], read_source(release["url"]), lambda p: None)
    gets = [r for r in release["index"].file_gets() if r["path"].endswith(MODULE_FILE)]
    assert [r.get("range") for r in gets] == [None, "bytes=50000-"]
    first = (module_folder(release["home"], "cuda") / "module.json").read_text()
    install(release["home"], read_source(release["url"]), lambda p: None)
    assert (module_folder(release["home"], "cuda") / "module.json").read_text() != ""
    assert json.loads(first)["module"] == json.loads(
        (module_folder(release["home"], "cuda") / "module.json").read_text())["module"]
    assert not (modules_root(release["home"]) / ".old-cuda").exists()


def test_a_corrupt_module_installs_nothing_and_keeps_the_installed_one(release):
    install(release["home"], read_source(release["url"]), lambda p: None)
    before = (module_folder(release["home"], "cuda") / "libggml-cuda.so").read_bytes()
    bad = ManifestSource(parse_manifest(json.dumps(manifest_json(
        release["module"] + b"tampered", release["wheel"])), "test"), "test",
        release["index"].url + "/files/", None)
    with pytest.raises(ChecksumError, match="checksum mismatch for libggml-cuda.so"):
        install(release["home"], bad, lambda p: None)
    assert (module_folder(release["home"], "cuda") / "libggml-cuda.so").read_bytes() == before
    assert installed(release["home"], "cuda") is not None
    assert not (modules_root(release["home"]) / ".new-cuda").exists()


def test_the_index_and_the_manifest_must_agree_on_the_runtime_wheel(release):
    release["index"].file(CUDART).listed_sha256 = "0" * 64
    with pytest.raises(ChecksumError, match="the manifest pins"):
        install(release["home"], read_source(release["url"]), lambda p: None)
    assert installed(release["home"], "cuda") is None


def test_a_module_of_another_llama_cpp_build_is_refused_before_any_download(release):
    other = manifest_json(release["module"], release["wheel"], llama_cpp_version="0.0.1")
    release["manifest"].data = json.dumps(other).encode()
    release["manifest"].listed_sha256 = hashlib.sha256(release["manifest"].data).hexdigest()
    with pytest.raises(DownloadError, match=f"built for llama-cpp-python 0.0.1, and Ember "
                                            f"runs {VERSION}"):
        install(release["home"], read_source(release["url"]), lambda p: None)
    assert [r for r in release["index"].file_gets() if MODULE_FILE in r["path"]] == []


def test_installs_from_a_folder_with_no_index_reachable(release, tmp_path, monkeypatch):
    folder = tmp_path / "pack"
    folder.mkdir()
    (folder / MODULE_FILE).write_bytes(release["module"])
    (folder / CUDART).write_bytes(release["wheel"])
    (folder / "cuda-module.json").write_text(json.dumps(manifest_json(release["module"],
                                                                      release["wheel"])))
    monkeypatch.setenv("EMBER_PYPI_INDEX", "http://127.0.0.1:9/simple/")  # nothing listens
    done = install(release["home"], read_source(str(folder)), lambda p: None)
    assert (done.folder / "libcudart.so.13").is_file()
    assert release["index"].file_gets() == []


def test_the_cli_installs_shows_and_removes_it(release):
    env = {"EMBER_HOME": str(release["home"].home)}
    done = ember("cuda", "install", "--from", release["url"], env=env)
    assert done.returncode == 0, done.stderr
    assert "installed:" in done.stdout and "to download" in done.stderr
    shown = ember("cuda", "status", env=env)
    assert f"built for  llama-cpp-python {VERSION}, CUDA 13.0, GPUs 90-real" in shown.stdout
    assert "stale" not in shown.stdout
    record = module_folder(release["home"], "cuda") / "module.json"
    record.write_text(record.read_text().replace(f'"{VERSION}"', '"0.0.1"'))
    assert "does not load: run `ember cuda install` again" in ember("cuda", "status",
                                                                   env=env).stdout
    assert ember("cuda", "remove", env=env).stdout.strip() == "removed"
    assert installed(release["home"], "cuda") is None
    assert "not installed" in ember("cuda", "status", env=env).stdout
    missing = ember("cuda", "install", env=env)  # a checkout ships no manifest
    assert missing.returncode == 1
    assert "names no CUDA module to download" in missing.stderr


def test_the_loader_refuses_modules_it_cannot_load_with_one_line_each(tmp_path):
    root = tmp_path / "llama-modules"
    for name, record in (("cuda", {"backend": "cuda", "llama_cpp_version": "0.0.1",
                                   "platform": this_platform()}),
                         ("hip", {"backend": "hip", "llama_cpp_version": VERSION,
                                  "platform": "win32-amd64"}),
                         ("sycl", None),
                         ("vulkan", {"backend": "../../../tmp/evil", "llama_cpp_version": VERSION,
                                     "platform": this_platform()})):
        (root / name).mkdir(parents=True)
        (root / name / f"libggml-{name}.so").write_bytes(b"\x7fELF")
        if record:
            (root / name / "module.json").write_text(json.dumps(record))
    usable, refused = added_modules({MODULES_ENV: str(root)})
    assert usable == []
    assert len(refused) == 4
    assert "built for llama-cpp-python 0.0.1" in refused[0]
    assert "is for win32-amd64" in refused[1]
    assert "no readable module.json" in refused[2]
    assert "names backend '../../../tmp/evil'" in refused[3]
    assert remove(Paths(tmp_path), "cuda") is True
    assert not (root / "cuda").exists()


GOOD = manifest_json(b"m", b"w")


@pytest.mark.parametrize("change, message", [
    ({"format": 2}, "manifest format 2"),
    ({"backend": "metal"}, "backend 'metal' is not one of"),
    ({"module": {**GOOD["module"], "file": "../../bin/sh"}}, "is libggml-cuda.so, not"),
    ({"module": {**GOOD["module"], "url": "../../etc/passwd"}}, "a plain relative path"),
    ({"module": {**GOOD["module"], "url": "file:///etc/passwd"}}, "a plain relative path"),
    ({"module": {**GOOD["module"], "sha256": "abc"}}, "64 hex digits"),
    ({"module": {**GOOD["module"], "bytes": 1 << 40}}, "bytes must be between"),
    ({"module": {**GOOD["module"], "bytes": True}}, "must be a int"),
    ({"runtime": [{**GOOD["runtime"][0], "libraries": ["nvidia/../../../x/libc.so.6"]}]},
     "libraries must be wheel members"),
    ({"runtime": [{**GOOD["runtime"][0], "libraries": ["nvidia/cu13/lib/evil.py"]}]},
     "libraries must be wheel members"),
    ({"runtime": [{**GOOD["runtime"][0], "filename": "../x.whl"}]}, "is not a package"),
    ({"runtime": [{**GOOD["runtime"][0], "libraries": ["a/libggml-cuda.so"]}]},
     "the same name"),
    ({"runtime": "nvidia"}, "runtime must be a list"),
])
def test_a_hostile_manifest_is_refused_with_what_is_wrong(change, message):
    with pytest.raises(ManifestError, match=message):
        parse_manifest(json.dumps({**GOOD, **change}), "m.json")


@pytest.mark.parametrize("text", [b"\xff\xfe", b"[]", b"{"])
def test_what_is_not_a_manifest_says_so(text):
    with pytest.raises(ManifestError, match="is not a module manifest"):
        parse_manifest(text, "m.json")


def test_a_path_that_leaves_the_folder_is_refused(tmp_path, isolated_home):
    folder = tmp_path / "pack"
    folder.mkdir()
    (tmp_path / "outside.so").write_bytes(b"m")
    data = manifest_json(b"m", b"w", runtime=[])
    data["module"]["url"] = "sub/../../outside.so"
    (folder / "cuda-module.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="a plain relative path"):
        read_source(str(folder))
    assert not Path(isolated_home.home / "llama-modules" / "cuda").exists()


def test_the_machine_report_says_how_to_get_cuda_on_an_nvidia_gpu(monkeypatch):
    from app import hardware
    from app.hardware import GPU
    from app.runtime import gpu_devices
    from app.runtime.gpu_devices import DeviceReport, GgmlDevice

    rtx = GPU("NVIDIA GeForce RTX 4070", "nvidia", 12 << 30, 11 << 30, "8.9", 504)
    vulkan = GgmlDevice("Vulkan0", "NVIDIA GeForce RTX 4070", "gpu", "Vulkan", 12 << 30, 11 << 30)
    monkeypatch.setattr(gpu_devices, "_report", DeviceReport(devices=(vulkan,)))
    monkeypatch.delenv("EMBER_CUDA_MANIFEST", raising=False)
    assert "this build names no download" in hardware._cuda_module_note((rtx,))[0]
    monkeypatch.setenv("EMBER_CUDA_MANIFEST", "https://example.invalid/cuda-module.json")
    note = hardware._cuda_module_note((rtx,))[0]
    assert "use the NVIDIA GPU through Vulkan: `ember cuda install` downloads it" in note
    cuda = GgmlDevice("CUDA0", "NVIDIA GeForce RTX 4070", "gpu", "CUDA", 12 << 30, 11 << 30)
    monkeypatch.setattr(gpu_devices, "_report", DeviceReport(devices=(cuda, vulkan)))
    assert hardware._cuda_module_note((rtx,)) == []
    monkeypatch.setattr(gpu_devices, "_report", DeviceReport())
    assert "cannot use the NVIDIA GPU (no Vulkan driver" in hardware._cuda_module_note((rtx,))[0]
    radeon = GPU("AMD Radeon RX 7800 XT", "amd", 16 << 30, 15 << 30, None, 624)
    assert hardware._cuda_module_note((radeon,)) == []


def test_two_installs_at_once_wait_for_each_other(release):
    import threading

    release["index"].file(MODULE_FILE).bytes_per_s = 400_000  # about half a second
    seen: list[list[Progress]] = [[], []]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            install(release["home"], read_source(release["url"]), seen[i].append)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    waited = [any("waiting for another install" in e.message for e in s) for s in seen]
    assert sorted(waited) == [False, True]
    assert (module_folder(release["home"], "cuda") / "libggml-cuda.so").read_bytes() == MODULE
    assert sorted(p.name for p in modules_root(release["home"]).iterdir()) == ["cuda"]


def test_a_manifest_url_that_serves_too_much_is_cut_off(release):
    release["manifest"].data = b"{" + b" " * (2 << 20)
    release["manifest"].listed_sha256 = ""
    with pytest.raises(DownloadError, match="too large for a manifest"):
        read_source(release["url"])
    with pytest.raises(DownloadError, match="HTTP 404"):
        read_source(release["index"].url + "/files/nothing.json")


def test_an_installed_cuda_module_loads_before_the_shipped_vulkan_one(tmp_path, monkeypatch):
    """ggml's order: llama.cpp runs a card on the first backend that found it, so CUDA
    must register before Vulkan, or an NVIDIA card would stay on Vulkan with CUDA loaded."""
    from backends.llamacpp import ggml_backends

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libggml-vulkan.so").write_bytes(b"\x7fELF")
    root = tmp_path / "llama-modules"
    (root / "cuda").mkdir(parents=True)
    (root / "cuda" / "libggml-cuda.so").write_bytes(b"\x7fELF")
    (root / "cuda" / "module.json").write_text(json.dumps(
        {"backend": "cuda", "llama_cpp_version": VERSION, "platform": this_platform()}))

    class Recorder:
        loads: list[str] = []

        def load(self, path: Path) -> bool:
            self.loads.append(path.name)
            return True

    monkeypatch.setattr(ggml_backends, "_loaded_files", [])
    monkeypatch.setattr(ggml_backends, "_failed", [])
    ggml = Recorder()
    ggml_backends._load_gpu_modules(ggml, lib, {MODULES_ENV: str(root)})  # type: ignore[arg-type]
    assert ggml.loads == ["libggml-cuda.so", "libggml-vulkan.so"]
    assert ggml_backends._loaded_files == [str(root / "cuda" / "libggml-cuda.so"),
                                           "lib/libggml-vulkan.so"]
