"""benchmarks/gpu_summary.py on step outputs the GPU checks' scripts really printed (a CPU
rehearsal of benchmarks/gpu_checks.sh, in tests/data/gpu_steps/): the summary's top-level
figures, the format x batch table, and a null with its reason for every step that failed,
timed out, was skipped or never ran."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks.gpu_summary import last_json, main, pytest_counts, summarize

STEPS = Path(__file__).resolve().parents[1] / "data" / "gpu_steps"
WHEN = datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
KEYS = ("gpu", "copy_bandwidth_gbs", "bf16_b1_bandwidth_fraction", "int4_over_bf16_b1",
        "int8_over_bf16_b1", "verify_k8_over_decode_step", "lookup_speedup_edit_prompts")


@pytest.fixture
def steps(tmp_path: Path) -> Path:
    out = tmp_path / "steps"
    shutil.copytree(STEPS, out)
    return out


def test_summary_of_a_rehearsal_has_every_key_and_the_bf16_table(steps):
    s = summarize(steps, WHEN)
    assert all(k in s for k in KEYS)
    copy = json.loads((STEPS / "copy.out").read_text())
    graphs = json.loads((STEPS / "graphs.out").read_text())
    assert s["gpu"] == copy["device"] and s["copy_bandwidth_gbs"] == copy["copy_gbs"]
    assert s["file_name"] == f"{copy['device']}-2026-12-02.json"
    bf16 = s["table"]["bf16"]
    ours = graphs["ember_cuda"]
    assert bf16["step"] == "graphs" and bf16["1"]["decode_tok_s"] == ours["decode_tok_s_batch_1"]
    assert bf16["8"]["decode_tok_s"] == ours["decode_tok_s_batch_8"]
    gbs = ours["decode_tok_s_batch_1"] * graphs["weight_bytes_per_token"] / 1e9
    assert s["bf16_b1_bandwidth_fraction"] == round(gbs / copy["copy_gbs"], 3)


def test_failed_timed_out_and_missing_steps_are_nulls_with_reasons(steps):
    s = summarize(steps, WHEN)
    assert s["int4_over_bf16_b1"] is None
    assert "int4 ran past its time limit (rc 124)" in s["missing"]["int4_over_bf16_b1"]
    assert s["int8_over_bf16_b1"] is None and s["missing"]["int8_over_bf16_b1"] == \
        "step not run"
    assert "fp8 failed (rc 2)" in s["table"]["fp8"]["missing"]
    assert s["fp8_over_bf16_b1"] is None
    assert s["tune"] == {"missing": "step tune failed (rc 1)"}
    assert s["verify_k8_over_decode_step"] is None
    assert "real weights" in s["missing"]["lookup_speedup_edit_prompts"]
    assert s["steps"]["int4"] == {"rc": 124, "seconds": 50.0, "json": False}


def test_a_skipped_step_says_the_budget_was_spent(steps):
    (steps / "spec.rc").write_text("skipped 0\n")
    s = summarize(steps, WHEN)
    assert s["missing"]["verify_k8_over_decode_step"] == \
        "step spec skipped: the run's time budget was spent"


def test_peer_keeps_its_eager_result_when_the_compile_is_cut(steps):
    text = (STEPS / "peer.out").read_text()
    eager = last_json(text)
    assert eager is not None
    (steps / "peer.out").write_text(json.dumps({k: v for k, v in eager.items()
                                                if not k.startswith("hf_compile")}))
    (steps / "peer.rc").write_text("124 220\n")
    s = summarize(steps, WHEN)
    assert s["peer"]["hf_eager_sdpa_tok_s"] == eager["hf_eager_sdpa_tok_s"]
    assert "ran past its time limit" in s["peer"]["cut"]


def test_verification_and_int8_figures_when_their_steps_ran(steps):
    graphs = json.loads((STEPS / "graphs.out").read_text())
    int8 = dict(graphs, weights="int8", ember_cuda={
        k: v / 2 for k, v in graphs["ember_cuda"].items() if k.startswith("decode_tok_s")
        and not k.endswith("no_graphs")})
    (steps / "int8.out").write_text(json.dumps(int8))
    (steps / "int8.rc").write_text("0 30\n")
    spec = {"decode_step_ms": 6.0, "verification_by_k": {
        str(k): {"verify_ms": 6.0 + k, "x_decode_step": round((6.0 + k) / 6, 2)}
        for k in range(1, 9)}}
    (steps / "spec.out").write_text("progress line\n" + json.dumps(spec))
    (steps / "spec.rc").write_text("0 40\n")
    s = summarize(steps, WHEN)
    assert s["int8_over_bf16_b1"] == 0.5 and s["table"]["int8"]["8"]["decode_tok_s"] == \
        graphs["ember_cuda"]["decode_tok_s_batch_8"] / 2
    assert s["verify_k8_over_decode_step"] == 2.33


def test_last_json_takes_the_last_object_and_ignores_noise():
    assert last_json('log {not json}\n{"a": 1}\nmore\n{"a": 2, "b": {"c": 3}}\n') == \
        {"a": 2, "b": {"c": 3}}
    assert last_json("no json at all") is None


def test_pytest_counts():
    assert pytest_counts("....\n2 failed, 92 passed in 69.1s\n") == {"failed": 2, "passed": 92}
    assert pytest_counts("collected nothing") == {}


def test_main_writes_the_summary_and_refuses_a_missing_folder(steps, tmp_path, capsys):
    out = tmp_path / "run" / "summary.json"
    assert main([str(steps), "--out", str(out)]) == 0
    assert all(k in json.loads(out.read_text()) for k in KEYS)
    assert main([str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "not a folder of step outputs" in capsys.readouterr().err


def test_without_a_real_model_lookup_comes_from_the_spec_steps_random_target(steps):
    """The spec step's output of a CPU rehearsal (benchmarks/cuda_speculative.py --random):
    the verification cost by k, and prompt lookup on edit prompts on its random target,
    said to be so, beside what the measured costs predict at a real model's acceptance."""
    for name in ("spec.out", "spec.rc"):
        shutil.copy(STEPS.parent / "gpu_steps_spec" / name, steps / name)
    spec = last_json((steps / "spec.out").read_text())
    assert spec is not None
    s = summarize(steps, WHEN)
    assert s["verify_k8_over_decode_step"] == spec["verification_by_k"]["8"]["x_decode_step"]
    assert s["lookup_speedup_edit_prompts"] == spec["lookup_speedup_edit_prompts"]
    assert s["lookup_edit_identical"] is spec["lookup_identical_edit_prompts"]
    assert s["lookup_edit_source"].startswith("random weights (acceptance ")
    assert "lookup_speedup_edit_prompts" not in s["missing"]
    assert s["verification"]["predicted_speedup_by_acceptance"] == \
        spec["predicted_speedup_by_acceptance"]
