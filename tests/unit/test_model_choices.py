"""The model picker's fit badge says what loading the model will do: with the GPU layers the
user set for it (Settings, remembered per model), not the plan's own choice (issue 39)."""

from __future__ import annotations

from pathlib import Path

from app.config import Paths
from app.gui.model_choices import local_choice
from app.hardware import GPU
from app.presets import ModelLoad, load_options, save_model_load
from app.store import InstalledModel
from tests.support.machines import profile

GiB = 2**30
# a desktop with an 8 GB Radeon: the 0.5B fits whole on it
DESKTOP = profile(32 * GiB, 24e9, 8, 50,
                  (GPU("AMD Radeon RX 6600", "amd", 8 * GiB, int(7.5e9), None, 224),))
QWEN = InstalledModel("qwen2.5-coder-0.5b-instruct", "Q4_K_M", "gguf", Path("q.gguf"), 0, "",
                      "qwen2", 32768, True, "registry", 0.0)


def badge(n_gpu_layers: int | None, where: str = "llamacpp") -> str:
    return local_choice(QWEN, where, hardware=DESKTOP, n_gpu_layers=n_gpu_layers).fit


def test_the_badge_follows_the_gpu_layers_the_user_set():
    assert badge(None) == "full GPU"
    assert badge(13) == "partial offload (12/24 layers on GPU)"  # the output layer + 12
    assert badge(0) == "CPU"
    assert badge(99) == "full GPU"
    assert badge(13, where="cuda") == "full GPU"  # llama.cpp's setting; cuda's all or none


def test_the_models_own_settings_come_before_the_apps(tmp_path):
    paths = Paths(tmp_path)
    assert load_options(QWEN.ref, 0, -1, paths) == (None, None, None)
    assert load_options(QWEN.ref, 2048, 5, paths) == (2048, 5, None)
    save_model_load(QWEN.ref, ModelLoad(context=1024, gpu_layers=13, kv_cache="q8_0"), paths)
    assert load_options(QWEN.ref, 2048, 5, paths) == (1024, 13, "q8_0")
    assert load_options("other:Q4_K_M", 2048, 5, paths) == (2048, 5, None)
