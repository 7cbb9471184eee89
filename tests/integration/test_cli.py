"""The `ember` command as a user runs it: a subprocess, real models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support import REPO
from tests.support.cli import ember
from tests.support.tiny_gguf import write_tiny_gguf


def test_version_and_help():
    assert ember("--version").stdout.strip() == "ember, version 0.1.0"
    out = ember("--help").stdout
    for command in ("run", "chat", "pull", "list", "rm", "import"):
        assert command in out


def test_run_json_prints_one_object_with_the_stats(qwen):
    r = ember("run", qwen.id, "Write a Python function that reverses a string. Use slicing.",
              "--temperature", "0", "--max-tokens", "64", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"text", "reasoning", "tool_calls", "model", "backend",
                        "prompt_tokens", "completion_tokens", "reasoning_tokens", "ttft_s",
                        "decode_tokens_per_s", "finish_reason", "truncated",
                        "cached_tokens", "media_tokens", "draft_tokens", "accepted_tokens"}
    assert (out["reasoning"], out["tool_calls"], out["reasoning_tokens"]) == ("", [], 0)
    assert out["media_tokens"] == 0
    assert out["model"] == qwen.id and out["backend"] == "llamacpp"
    assert "[::-1]" in out["text"]
    assert out["completion_tokens"] <= 64 and out["finish_reason"] in ("stop", "length")
    assert out["decode_tokens_per_s"] > 1 and out["truncated"] is False


def test_run_with_prompt_lookup_reports_draft_and_accepted_tokens(qwen):
    code = "\n".join(f"def f{i}(x):\n    return x - {i}" for i in range(6))
    args = ("run", qwen.id, f"Repeat this code exactly:\n{code}", "--temperature", "0",
            "--max-tokens", "40")
    plain = json.loads(ember(*args, "--no-speculation", "--json").stdout)
    r = ember(*args, "--lookup", "--max-draft", "5", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text"] == plain["text"] and plain["draft_tokens"] == 0
    assert 0 < out["accepted_tokens"] <= out["draft_tokens"]
    r = ember(*args, "--lookup", "--draft-model", qwen.id)
    assert r.returncode != 0 and "pick one" in r.stderr
    r = ember(*args, "--lookup", "--no-speculation")
    assert r.returncode != 0 and "pick one" in r.stderr
    r = ember(*args, "--no-speculation")
    assert "speculative" not in r.stderr
    r = ember(*args)  # prompt lookup is the default
    assert "speculative tokens accepted" in r.stderr


def test_run_streams_text_and_reports_stats_on_stderr(qwen):
    r = ember("run", qwen.id, "Say hello", "--temperature", "0", "--max-tokens", "16")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "tokens/s" in r.stderr


def test_run_raw_prompt_on_a_base_model(gemma):
    r = ember("run", gemma.id, "Monday, Tuesday, Wednesday,", "--temperature", "0",
              "--max-tokens", "4", "--json")
    assert json.loads(r.stdout)["text"].startswith(" Thursday")


def test_list_json_shows_installed_models(qwen):
    r = ember("list", "--json")
    refs = [m["id"] + ":" + m["quant"] for m in json.loads(r.stdout)]
    assert qwen.ref in refs


def test_unknown_model_is_one_line_with_close_matches(qwen):
    r = ember("run", "qwen2.5-coder", "hi")
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0
    assert "did you mean qwen2.5-coder-" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_settings_are_clear_errors(qwen):
    for args, message in [(["--temperature", "5"], "temperature must be between 0 and 2"),
                          (["--max-tokens", "-1"], "max_tokens must be at least 1")]:
        r = ember("run", qwen.id, "hi", *args)
        assert r.returncode == 1 and message in r.stderr
    r = ember("run", qwen.id, "")
    assert r.returncode == 1 and "empty" in r.stderr


def test_import_list_rm_roundtrip(tmp_path: Path):
    env = {"EMBER_HOME": str(tmp_path / "home")}
    path = write_tiny_gguf(tmp_path / "tiny.gguf", name="Tiny Import")
    r = ember("import", str(path), env=env)
    assert r.returncode == 0 and "imported tiny-import:ALL_F32" in r.stdout
    assert "tiny-import" in ember("list", env=env).stdout
    assert ember("rm", "tiny-import", env=env).returncode == 0
    assert json.loads(ember("list", "--json", env=env).stdout) == []


def test_import_of_a_broken_file_is_one_clear_line(tmp_path: Path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(os.urandom(5000))
    r = ember("import", str(bad), env={"EMBER_HOME": str(tmp_path / "home")})
    assert r.returncode == 1
    assert r.stderr.startswith("error: ") and "broken.gguf: not a GGUF file" in r.stderr
    assert r.stderr.strip().count("\n") == 0


def test_chat_keeps_history_and_understands_commands(qwen):
    script = ("My name is Ada. Reply with OK.\n"
              "What is my name? Answer with the name only.\n"
              "/reset\n"
              "/system Always answer in uppercase letters.\n"
              "Say the word hello.\n")
    r = ember("chat", qwen.id, "--temperature", "0", "--max-tokens", "20", stdin=script)
    assert r.returncode == 0, r.stderr
    answers = [a.strip() for a in r.stdout.split(">>> ") if a.strip()]
    assert "Ada" in answers[1]
    assert "(conversation cleared)" in answers[2]
    assert "HELLO" in answers[-1]


def test_ctrl_c_stops_the_answer_but_not_the_chat(qwen):
    # A chat in a terminal starts with Ctrl+C's signal at its default. The test run may not
    # have it so: a job started in the background by a non-interactive shell (`cmd &`, as CI
    # scripts do) ignores SIGINT, and a child inherits that across exec, where Python then
    # leaves it ignored. So the chat is started with the default disposition, as a terminal
    # would start it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "chat", qwen.id,
                                 "--temperature", "0", "--max-tokens", "2000"],
                                cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    out: list[str] = []
    err: list[str] = []
    threading.Thread(target=lambda: out.extend(iter(lambda: proc.stdout.read(1), "")),
                     daemon=True).start()
    threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), "")),
                     daemon=True).start()
    try:
        proc.stdin.write("Write a very long story about a lighthouse.\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 300  # loading and 200 characters, on a busy machine too
        while len("".join(out)) < 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len("".join(out)) >= 200, ("the answer never got going", "".join(err))
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl+C: the whole group
        # the answer stops within a step or two (30 s on a busy machine); a lost cancel would
        # run on to the 2,000 tokens asked for, minutes
        deadline = time.monotonic() + 30
        while "[stopped]" not in "".join(err) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "[stopped]" in "".join(err), ("".join(err)[-500:], len("".join(out)))
        proc.stdin.write("Reply with the single word: ready\n")
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
        assert "ready" in "".join(out).split("[stopped]")[-1].lower()
    finally:
        if proc.poll() is None:  # a failed run must not leave a model decoding for minutes
            os.killpg(proc.pid, signal.SIGKILL)


def test_hw_json_describes_this_machine_and_recommends_models(qwen):
    r = ember("hw", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    hw = out["hardware"]
    assert hw["physical_cores"] >= 1 and hw["ram_total"] > hw["ram_available"] > 0
    assert hw["cpu_bandwidth_gbps"] > 1 and hw["bandwidth_source"] == "measured"
    if "amx_tile" in hw["isa"]:  # this build of llama.cpp leaves AMX out, and says why
        assert any("AMX present but unused" in n for n in hw["notes"])
    assert out["backend"]["name"] == "llamacpp" and out["backend"]["reason"]
    recs = out["recommendations"]
    assert recs and all(r["placement"] != "wont_fit" for r in recs)
    first = recs[0]
    assert {"id", "quant", "label", "memory", "decode_tokens_per_s", "explanation"} <= set(first)
    assert "GB weights" in first["explanation"]


def test_catalog_json_with_fit(qwen):
    r = ember("catalog", "--json", "--fit")
    assert r.returncode == 0, r.stderr
    models = json.loads(r.stdout)
    assert len(models) >= 25
    for m in models:
        assert {"id", "family", "params", "arch", "variants", "fit"} <= set(m)
        for v in m["variants"]:
            assert {"format", "quant", "size_bytes", "sha256", "sources"} <= set(v)
            for s in v["sources"]:
                assert s["kind"] in ("hf", "mirror", "pypi-model")
                if s["kind"] == "hf":
                    assert s["repo"] and "file" in s
    qwen_row = next(m for m in models if m["id"] == qwen.id)
    assert qwen_row["fit"]["variant"] == {"format": "gguf", "quant": "Q4_K_M"}
    assert qwen_row["fit"]["memory"]["weights"] == 491_400_064
    assert qwen_row["fit"]["decode_tokens_per_s"] > 0


def test_catalog_without_fit_has_no_fit_key():
    models = json.loads(ember("catalog", "--json").stdout)
    assert all("fit" not in m for m in models)
    # a split GGUF lists its parts, in order, the first being its file
    split = next(v for m in models if m["id"] == "gpt-oss-120b" for v in m["variants"])
    assert [p["name"] for p in split["parts"]] == [
        f"gpt-oss-120b-mxfp4-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert split["file"] == split["parts"][0]["name"]
    assert split["size_bytes"] == sum(p["size_bytes"] for p in split["parts"])


def test_pull_says_which_quantization_it_picked(qwen):
    r = ember("pull", qwen.id)
    assert r.returncode == 0, r.stderr
    assert f"{qwen.id}: picked Q4_K_M for this machine" in r.stderr
    assert "already installed" in r.stderr


def test_quantize_packs_weights_on_the_cuda_backend_and_is_refused_elsewhere(qwen):
    r = ember("run", qwen.id, "Say hi", "--quantize", "int8", "--max-tokens", "2")
    assert r.returncode != 0 and "cuda backend's" in r.stderr and "MODEL:QUANT" in r.stderr
    r = ember("run", qwen.id, "def add(a, b):\n    return", "--raw", "--backend", "cuda",
              "--quantize", "int8", "--temperature", "0", "--max-tokens", "4", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"] == "cuda" and "a + b" in out["text"]
