"""The one JSON of a GPU-checks run (benchmarks/gpu_checks.sh): reads each step's output in
STEPS_DIR (`NAME.out`: the step's stdout, whose last JSON object is its result; `NAME.rc`:
its exit status and seconds) and writes the summary issue 44 asks for, with these top-level
keys beside the steps' own results: `gpu`, `copy_bandwidth_gbs`, `bf16_b1_bandwidth_fraction`,
`int4_over_bf16_b1`, `int8_over_bf16_b1`, `verify_k8_over_decode_step`,
`lookup_speedup_edit_prompts`, and `table` (format x batch). A figure a step did not produce
is null, with the reason under `missing`. A missing or failed step never stops the summary.

    python3 benchmarks/gpu_summary.py STEPS_DIR --out SUMMARY.json

It also prints the file name the run goes under in docs/notes/gpu-runs/ (<gpu>-<date>.json).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FORMATS = ("bf16", "int8", "int4", "fp8")
FORMAT_STEPS = {"bf16": ("graphs", "bf16"), "int8": ("int8",), "int4": ("int4",),
                "fp8": ("fp8",)}  # the first step that has the format's result counts
BATCHES = (1, 8, 32, 64)


@dataclass(frozen=True)
class Step:
    name: str
    rc: int | None  # None: no exit status recorded (never ran, or the run was cut)
    seconds: float | None
    result: dict[str, Any] | None  # the last JSON object it printed
    text: str  # its whole stdout
    skipped: bool = False  # the run's time budget was spent before it

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.result is not None


def last_json(text: str) -> dict[str, Any] | None:
    """The last top-level JSON object in `text` (a step may print progress, or two results
    where the second completes the first, as peer_decode.py does)."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found = obj
        i = text.find("{", end)
    return found


def read_step(folder: Path, name: str) -> Step:
    out, rc = folder / f"{name}.out", folder / f"{name}.rc"
    text = out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""
    code: int | None = None
    seconds: float | None = None
    skipped = False
    if rc.exists():
        parts = rc.read_text(encoding="utf-8").split()
        skipped = parts[:1] == ["skipped"]
        try:
            code = int(parts[0])
            seconds = float(parts[1]) if len(parts) > 1 else None
        except (IndexError, ValueError):
            code = None
    return Step(name, code, seconds, last_json(text), text, skipped)


def why_missing(step: Step | None) -> str:
    if step is None:
        return "step not run"
    if step.skipped:
        return f"step {step.name} skipped: the run's time budget was spent"
    if step.rc is None:
        return f"step {step.name} left no exit status (cut off by the run's time budget?)"
    if step.rc in (124, 137):
        return f"step {step.name} ran past its time limit (rc {step.rc})"
    if step.rc != 0:
        return f"step {step.name} failed (rc {step.rc})"
    return f"step {step.name} printed no JSON result"


class Summary:
    """Figures gathered with the reason for each one that is null."""

    def __init__(self, steps: dict[str, Step]) -> None:
        self.steps = steps
        self.missing: dict[str, str] = {}

    def result(self, name: str) -> dict[str, Any] | None:
        step = self.steps.get(name)
        return step.result if step is not None and step.ok else None

    def first(self, names: tuple[str, ...]) -> tuple[str | None, dict[str, Any] | None]:
        for name in names:
            r = self.result(name)
            if r is not None:
                return name, r
        return None, None

    def null(self, key: str, reason: str) -> None:
        self.missing[key] = reason

    def reason(self, names: tuple[str, ...]) -> str:
        return "; ".join(why_missing(self.steps.get(n)) for n in names)


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def engine_row(r: dict[str, Any], batch: int) -> dict[str, Any] | None:
    ours = r.get("ember_cuda", {})
    rate = ours.get(f"decode_tok_s_batch_{batch}")
    if rate is None:
        return None
    row: dict[str, Any] = {"decode_tok_s": rate}
    for key, out in ((f"decode_tok_s_batch_{batch}_no_graphs", "decode_tok_s_no_graphs"),
                     (f"graphs_speedup_batch_{batch}", "graphs_speedup"),
                     (f"graphs_same_tokens_batch_{batch}", "graphs_same_tokens"),
                     (f"step_ms_batch_{batch}", "step_ms"),
                     (f"graph_replay_ms_batch_{batch}", "graph_replay_ms")):
        if key in ours:
            row[out] = ours[key]
    return row


def pytest_counts(text: str) -> dict[str, int]:
    """`94 passed, 2 failed in 69.1s` -> {"passed": 94, "failed": 2}."""
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    if not lines:
        return {}
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped)",
                                             lines[-1])}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def summarize(folder: Path, now: datetime | None = None) -> dict[str, Any]:
    names = sorted(p.stem for p in folder.glob("*.out")) + \
        sorted(p.stem for p in folder.glob("*.rc"))
    steps = {n: read_step(folder, n) for n in dict.fromkeys(names)}
    s = Summary(steps)
    out: dict[str, Any] = {}
    when = now or datetime.now(UTC)

    copy = s.result("copy")
    gpu = (copy or {}).get("device")
    if gpu is None:
        for name in ("graphs", "bf16", "spec", "peer"):
            if (r := s.result(name)) and r.get("device"):
                gpu = r["device"]
                break
    out["gpu"] = gpu
    if gpu is None:
        s.null("gpu", "no step reported its device")
    out["date"] = when.strftime("%Y-%m-%d")
    out["file_name"] = f"{slug(gpu or 'unknown')}-{out['date']}.json"
    copy_gbs = (copy or {}).get("copy_gbs")
    out["copy_bandwidth_gbs"] = copy_gbs
    if copy_gbs is None:
        s.null("copy_bandwidth_gbs", s.reason(("copy",)))

    table: dict[str, dict[str, Any]] = {}
    b1: dict[str, float | None] = {}
    weight_bytes: dict[str, int | None] = {}
    for fmt in FORMATS:
        step, r = s.first(FORMAT_STEPS[fmt])
        if r is None:
            table[fmt] = {"missing": s.reason(FORMAT_STEPS[fmt])}
            b1[fmt] = None
            continue
        ours = r.get("ember_cuda", {})
        rows: dict[str, Any] = {"step": step, "device": r.get("device"),
                                "weight_bytes_per_token": r.get("weight_bytes_per_token"),
                                "prefill_tok_s": ours.get("prefill_tok_s")}
        for batch in BATCHES:
            row = engine_row(r, batch)
            if row is not None:
                rows[str(batch)] = row
        rate, nbytes = ours.get("decode_tok_s_batch_1"), r.get("weight_bytes_per_token")
        b1[fmt], weight_bytes[fmt] = rate, nbytes
        if rate is not None and nbytes:
            gbs = rate * nbytes / 1e9
            rows["b1_gbs"] = round(gbs, 1)
            rows["b1_fraction_of_copy"] = ratio(gbs, copy_gbs)
        table[fmt] = rows
    out["table"] = table

    bf16 = table["bf16"]
    out["bf16_b1_bandwidth_fraction"] = bf16.get("b1_fraction_of_copy")
    if out["bf16_b1_bandwidth_fraction"] is None:
        s.null("bf16_b1_bandwidth_fraction", bf16.get("missing") or s.reason(("copy",)))
    for fmt in ("int4", "int8"):
        key = f"{fmt}_over_bf16_b1"
        out[key] = ratio(b1[fmt], b1["bf16"])
        if out[key] is None:
            s.null(key, table[fmt].get("missing") or bf16.get("missing") or "no batch-1 rate")
    out["fp8_over_bf16_b1"] = ratio(b1["fp8"], b1["bf16"])
    for fmt in ("int8", "int4", "fp8"):
        for batch in (32, 64):
            mine, base = table[fmt].get(str(batch)), bf16.get(str(batch))
            if mine and base:
                table[fmt][str(batch)]["over_bf16"] = ratio(mine["decode_tok_s"],
                                                            base["decode_tok_s"])

    spec = s.result("spec")
    k8 = ((spec or {}).get("verification_by_k") or {}).get("8")
    out["verify_k8_over_decode_step"] = k8.get("x_decode_step") if k8 else None
    if out["verify_k8_over_decode_step"] is None:
        s.null("verify_k8_over_decode_step",
               s.reason(("spec",)) if spec is None else "the spec step measured no k = 8")
    if spec is not None:
        out["verification"] = {k: spec.get(k) for k in
                               ("decode_step_ms", "decode_step_ms_no_graphs", "draft_step_ms",
                                "verification_by_k", "verify_steps_by_path",
                                "verify_graph_bytes", "predicted_speedup_by_acceptance")}

    lookup = s.result("lookup")
    edit = ((lookup or {}).get("prompts") or {}).get("edit") or {}
    out["lookup_speedup_edit_prompts"] = (edit.get("lookup_auto") or {}).get("speedup")
    if out["lookup_speedup_edit_prompts"] is None and spec is not None and \
            spec.get("lookup_speedup_edit_prompts") is not None:
        # no real model on the machine: the spec step's edit prompts on its random target,
        # with its acceptance and what the measured costs predict at a real model's
        out["lookup_speedup_edit_prompts"] = spec["lookup_speedup_edit_prompts"]
        out["lookup_edit_identical"] = spec.get("lookup_identical_edit_prompts")
        out["lookup_edit_source"] = (
            f"random weights (acceptance {spec.get('lookup_acceptance_edit_prompts')}): "
            "a random model's greedy answer repeats what it happens to; see "
            "verification.predicted_speedup_by_acceptance for a real model's acceptance")
    elif out["lookup_speedup_edit_prompts"] is not None:
        out["lookup_edit_source"] = "the lookup step's real model"
    if out["lookup_speedup_edit_prompts"] is None:
        s.null("lookup_speedup_edit_prompts",
               "no real model on the machine: random weights propose nothing that is "
               "accepted, so prompt lookup's gain on edit prompts needs real weights"
               if "lookup" not in steps else
               (s.reason(("lookup",)) if lookup is None else "no edit prompt in its result"))
    elif lookup is not None:
        out["lookup_edit_identical"] = (edit.get("lookup_auto") or {}).get("identical")

    if (r := s.result("gemv")) is not None:
        out["gemv"] = r
    # peer_decode.py prints the eager result before compiling: a compile cut off by its time
    # limit still leaves that one, marked as cut
    for name in ("peer", "peer-eager"):
        st = steps.get(name)
        if st is not None and st.result is not None:
            out["peer"] = {k: v for k, v in st.result.items()
                           if k.startswith(("hf_", "ember", "transformers", "torch"))}
            if st.rc != 0:
                out["peer"]["cut"] = why_missing(st)
            break
    else:
        s.null("peer", s.reason(("peer",)))
    if (r := s.result("compile")) is not None:
        out["ember_compiled_b1_tok_s"] = r.get("ember_cuda", {}).get("decode_tok_s_batch_1")
        out["ember_compiled_over_graphs_b1"] = ratio(out["ember_compiled_b1_tok_s"], b1["bf16"])
    if (r := s.result("serve")) is not None:
        out["serve_real_vocab"] = r
    if "tune" in steps:
        out["tune"] = s.result("tune") or {"missing": why_missing(steps["tune"])}
    if "tests" in steps:
        t = steps["tests"]
        out["tests"] = {"rc": t.rc, "seconds": t.seconds, **pytest_counts(t.text)}
    out["steps"] = {n: {"rc": st.rc, "seconds": st.seconds, "json": st.result is not None}
                    for n, st in steps.items()}
    out["missing"] = s.missing
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("steps_dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not args.steps_dir.is_dir():
        print(f"gpu_summary: {args.steps_dir} is not a folder of step outputs", file=sys.stderr)
        return 2
    summary = summarize(args.steps_dir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: summary[k] for k in
                      ("gpu", "copy_bandwidth_gbs", "bf16_b1_bandwidth_fraction",
                       "int4_over_bf16_b1", "int8_over_bf16_b1", "verify_k8_over_decode_step",
                       "lookup_speedup_edit_prompts", "file_name")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
