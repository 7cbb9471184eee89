"""The load settings of the model in use, in Settings: the GPU layers setting lists each
choice with the GPU memory it takes and the speed the fit model predicts, marks the plan's
pick, and refuses what will not fit (the real Qwen2.5-Coder-0.5B file; the machine is a
described one with a GPU, since this one has none)."""

from __future__ import annotations

import re

from app.gui.model_load_box import AS_ABOVE, ModelLoadBox
from app.hardware import GPU
from app.store import InstalledModel, Store
from tests.support.machines import GiB, profile

# a card with 2 GiB, 1.13 GB of it free: a GPU budget of 0.95 x 1,125,716,211 - 419,430,400
# = 650,000,000 B, which holds part of the 0.5B: its 0.49 GB of weights, the logits buffer the
# output layer brings (0.31 GB) and the KV cache need 0.74 GB for all of it
SMALL_CARD = profile(16 * GiB, 12e9, 4, 40,
                     (GPU("AMD Radeon 530", "amd", 2 * GiB, 1_125_716_211, None, 48),))


def listed(box: ModelLoadBox) -> list[tuple[str, int, bool]]:
    items = box.gpu_layers.model()
    return [(box.gpu_layers.itemText(i), box.gpu_layers.itemData(i),
             items.flags(items.index(i, 0)).value & 32 != 0)  # Qt.ItemIsEnabled
            for i in range(box.gpu_layers.count())]


def speed(label: str) -> float:
    found = re.search(r"~([\d.]+) tokens/s", label)
    assert found, label
    return float(found.group(1))


def test_each_gpu_layers_choice_shows_its_memory_and_speed_and_the_plans_pick(
        qtbot, store: Store, qwen: InstalledModel):
    box = ModelLoadBox(qwen.ref, store.paths, SMALL_CARD, can_offload=True,
                       app_context=2048)
    qtbot.addWidget(box)
    choices = listed(box)
    assert choices[0] == (AS_ABOVE, -1, True) and box.value().gpu_layers == -1
    assert [value for _, value, _ in choices[1:]] == list(range(25, 0, -1))[:-1] + [0]
    assert choices[1][0].startswith("all 24 layers: will not fit (needs ")
    planned = [i for i, (label, _, _) in enumerate(choices) if "(the plan's choice)" in label]
    assert len(planned) == 1
    pick = planned[0]
    # the plan's pick is the most layers that fit: every choice above it cannot be picked,
    # every one from it down can, each slower than the one above
    assert 2 < pick < len(choices) - 1
    assert [enabled for _, _, enabled in choices[1:]] == \
        [False] * (pick - 1) + [True] * (len(choices) - pick)
    speeds = [speed(label) for label, _, _ in choices[pick:]]
    assert speeds == sorted(speeds, reverse=True) and speeds[0] > speeds[-1]
    assert re.search(r": 0\.\d\d GB on the GPU, ~", choices[pick][0])
    assert choices[-1][0].startswith("none: the CPU alone: ~")

    box.gpu_layers.setCurrentIndex(box.gpu_layers.findData(13))
    assert box.gpu_layers.currentText().startswith("12 of 24 layers: ")
    assert box.value().gpu_layers == 13
    # a longer context: each choice takes more memory; the one picked stays picked
    before = box.gpu_layers.currentText()
    box.context.setValue(32768)
    assert box.value().gpu_layers == 13 and box.gpu_layers.currentText() != before


def test_without_a_gpu_the_setting_keeps_what_was_saved_and_cannot_change(
        qtbot, store: Store, qwen: InstalledModel):
    box = ModelLoadBox(qwen.ref, store.paths, SMALL_CARD, can_offload=False)
    qtbot.addWidget(box)
    assert not box.gpu_layers.isEnabled()
    assert listed(box) == [(AS_ABOVE, -1, True)]

