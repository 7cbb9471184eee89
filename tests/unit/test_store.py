"""The store of installed models: imports, listing, removal, and files that are not what
their manifest says."""

from pathlib import Path

import pytest

from app.errors import ModelNotFoundError
from app.store import Store
from backends.errors import EmberError, ModelFileError
from tests.support.tiny_gguf import write_tiny_gguf


def test_import_names_the_model_from_its_metadata_and_keeps_the_original(isolated_home,
                                                                        tmp_path: Path):
    original = write_tiny_gguf(tmp_path / "my-finetune.gguf", name="My Finetune 7B")
    store = Store(isolated_home)
    model = store.import_gguf(original)
    assert (model.id, model.quant, model.origin) == ("my-finetune-7b", "ALL_F32", "import")
    assert original.exists() and model.path != original
    assert model.path.read_bytes() == original.read_bytes()
    assert [m.ref for m in store.list()] == ["my-finetune-7b:ALL_F32"]
    assert store.get("my-finetune-7b").path == model.path


def test_importing_the_same_model_twice_is_refused(isolated_home, tmp_path: Path):
    original = write_tiny_gguf(tmp_path / "m.gguf")
    store = Store(isolated_home)
    store.import_gguf(original)
    with pytest.raises(EmberError, match="already installed"):
        store.import_gguf(original)


@pytest.mark.parametrize("content, message", [
    (b"not a model at all", "not a GGUF file"),
    (b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, "corrupt GGUF header"),
])
def test_importing_a_bad_file_fails_clearly_and_installs_nothing(isolated_home, tmp_path: Path,
                                                                 content: bytes, message: str):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    store = Store(isolated_home)
    with pytest.raises(ModelFileError, match=message):
        store.import_gguf(bad)
    assert store.list() == []


def test_a_file_without_its_manifest_is_not_listed(isolated_home):
    store = Store(isolated_home)
    stray = store.paths.models / "ember" / "x" / "x.gguf"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"GGUF")
    assert store.list() == []


def test_a_file_cut_short_after_install_is_not_listed(isolated_home, tmp_path: Path):
    store = Store(isolated_home)
    model = store.import_gguf(write_tiny_gguf(tmp_path / "m.gguf"))
    with model.path.open("r+b") as f:
        f.truncate(10)
    assert store.list() == []


def test_remove_deletes_file_and_manifest(isolated_home, tmp_path: Path):
    store = Store(isolated_home)
    model = store.import_gguf(write_tiny_gguf(tmp_path / "m.gguf"))
    store.remove(model.ref)
    assert store.list() == [] and not model.path.exists()
    assert not model.path.parent.exists()


def test_unknown_installed_model_suggests_pull_for_registry_models(isolated_home):
    with pytest.raises(ModelNotFoundError, match="run `ember pull gemma-3-270m`"):
        Store(isolated_home).get("gemma-3-270m")


def test_a_manifest_naming_a_file_outside_the_store_never_gets_it_deleted(
        isolated_home, tmp_path: Path):
    """A crafted manifest (a downloaded folder, another program) must not make `ember rm`
    delete the user's files: the model is the file beside its manifest, inside the models
    folder, whatever path the manifest records."""
    import json

    store = Store(isolated_home)
    model = store.import_gguf(write_tiny_gguf(tmp_path / "m.gguf"))
    precious = tmp_path / "precious.txt"
    precious.write_bytes(model.path.read_bytes())  # the size the manifest records
    manifest = model.path.with_name(model.path.name + ".ember.json")
    raw = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(raw | {"path": str(precious)}))
    assert [m.path for m in store.list()] == [model.path]
    store.remove(model.ref)
    assert precious.exists() and not model.path.exists()
    # a symlink in the store that points out of it is no way out either
    store.paths.models.mkdir(parents=True, exist_ok=True)
    link = store.paths.models / "evil"
    link.symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(EmberError, match="outside Ember's models folder"):
        store.inside_models(link / "precious.txt")
    with pytest.raises(EmberError, match="outside Ember's models folder"):
        store.inside_models(store.paths.models / ".." / "history.db")


def test_a_data_folder_moved_elsewhere_keeps_its_models(isolated_home, tmp_path: Path):
    import shutil

    from app.config import Paths

    store = Store(isolated_home)
    model = store.import_gguf(write_tiny_gguf(tmp_path / "m.gguf"))
    moved = Store(Paths(tmp_path / "moved"))
    shutil.copytree(store.paths.models, moved.paths.models)
    found = moved.get(model.ref)
    assert found.path.is_relative_to(moved.paths.models) and found.path.exists()


def test_get_reads_the_manifests_once_and_sees_what_another_store_installs(
        isolated_home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`get` answers from the store's index: N lookups parse the manifests once. A model
    installed or removed by another Store (as `ember pull` in a terminal while the server
    runs) is seen by the next lookup."""
    server, terminal = Store(isolated_home), Store(isolated_home)
    first = terminal.import_gguf(write_tiny_gguf(tmp_path / "a.gguf", name="Alpha"))
    scans: list[int] = []
    real_scan = server._scan

    def counting_scan():
        found = real_scan()
        scans.append(len(found))  # manifests parsed by this scan
        return found

    monkeypatch.setattr(server, "_scan", counting_scan)
    for _ in range(20):
        assert server.get(first.id) == first
    assert scans == [1]  # one scan of the one manifest, then the index
    second = terminal.import_gguf(write_tiny_gguf(tmp_path / "b.gguf", name="Beta"))
    for _ in range(5):
        assert server.get(second.id) == second
        assert server.get(first.id) == first
    assert scans == [1, 2]  # the stamp changed: one more scan, then the index again
    terminal.remove(second.ref)
    with pytest.raises(ModelNotFoundError):
        server.get(second.id)
