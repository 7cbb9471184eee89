"""Presets and per-model load settings in config.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Paths
from app.errors import ConfigError
from app.presets import (
    ModelLoad,
    Preset,
    delete_preset,
    model_load,
    presets,
    save_model_load,
    save_preset,
)

REF = "qwen2.5-coder-0.5b-instruct:Q4_K_M"


@pytest.fixture
def home(tmp_path: Path) -> Paths:
    home = Paths(tmp_path)
    home.config_file.write_text('# mine\n[app]\ntheme = "dark"\n', encoding="utf-8")
    return home


def test_presets_are_saved_renamed_and_deleted_keeping_the_rest_of_the_file(home: Paths):
    reviewer = Preset("Code reviewer", "Review Python. Be terse.", temperature=0.2, top_k=20,
                      max_tokens=256)
    save_preset(reviewer, home)
    save_preset(Preset("Poet", temperature=1.3), home)
    assert presets(home) == {"Code reviewer": reviewer, "Poet": Preset("Poet", temperature=1.3)}
    sampling = presets(home)["Code reviewer"].sampling()
    assert (sampling.temperature, sampling.top_k, sampling.max_tokens) == (0.2, 20, 256)
    save_preset(Preset("Reviewer", reviewer.system_prompt), home, replaces="Code reviewer")
    assert list(presets(home)) == ["Poet", "Reviewer"]
    delete_preset("Poet", home)
    assert list(presets(home)) == ["Reviewer"]
    text = home.config_file.read_text(encoding="utf-8")
    assert text.startswith('# mine\n[app]\ntheme = "dark"\n') and '[presets.Reviewer]' in text
    with pytest.raises(ConfigError, match="no preset 'Poet'"):
        delete_preset("Poet", home)


@pytest.mark.parametrize(("preset", "message"), [
    (Preset(" "), "a preset needs a name of 1 to 60 characters"),
    (Preset("hot", temperature=2.5), "preset 'hot': temperature must be between 0 and 2"),
    (Preset("p", top_p=0.0), r"preset 'p': top_p must be in \(0, 1\]"),
    (Preset("m", max_tokens=0), "preset 'm': max_tokens must be between 1 and 131072"),
])
def test_a_bad_preset_is_refused_and_not_saved(home: Paths, preset: Preset, message: str):
    before = home.config_file.read_text(encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        save_preset(preset, home)
    assert home.config_file.read_text(encoding="utf-8") == before


def test_a_preset_edited_by_hand_with_a_wrong_type_is_a_clear_error(home: Paths):
    home.config_file.write_text('[presets.x]\ntemperature = "warm"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r'\[presets."x"\] temperature = \'warm\': expected '
                                          'float'):
        presets(home)


def test_a_models_load_settings_are_remembered_and_forgotten(home: Paths):
    assert model_load(REF, home) == ModelLoad()
    save_model_load(REF, ModelLoad(context=8192, gpu_layers=4, kv_cache="q8_0"), home)
    assert model_load(REF, home) == ModelLoad(8192, 4, "q8_0")
    assert model_load("other:Q8_0", home) == ModelLoad()
    assert f'[model_load."{REF}"]' in home.config_file.read_text(encoding="utf-8")
    save_model_load(REF, ModelLoad(), home)  # all automatic: nothing to remember
    assert home.config_file.read_text(encoding="utf-8").strip() == "# mine\n[app]\ntheme = \"dark\""
    assert model_load(REF, home) == ModelLoad()
    with pytest.raises(ConfigError, match="kv_cache must be one of auto, f16, q8_0, got 'q4'"):
        save_model_load(REF, ModelLoad(kv_cache="q4"), home)
    with pytest.raises(ConfigError, match="context must be 0 .automatic. or at least 256"):
        save_model_load(REF, ModelLoad(context=100), home)
