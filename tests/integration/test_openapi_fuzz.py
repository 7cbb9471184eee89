"""The OpenAPI document states what the server really does. Schemathesis, run as its users run
it (the `schemathesis run` command, coverage, fuzzing and stateful phases), sends thousands of
generated requests to every route of a live server on the real Qwen2.5-Coder 0.5B, in and out
of the schema, and checks each answer: no 5xx, only documented statuses, content types,
headers (a 405's Allow) and bodies, and no schema-valid request refused for its form
(tests/support/fuzz_checks.py: a 400 to a schema-valid body passes only for a rule the route's
request model accepts and JSON Schema cannot state, such as a tool message without its call's
id). Two of schemathesis's checks are left out, on purpose:
- `negative_data_rejection`: the request models read JSON as pydantic's lax mode does (0 for
  false, 1.0 for 1), as FastAPI and OpenAI-compatible servers do; clients count on it.
- `max_response_time` (10 s unless told): how long a model takes is the benchmarks' business,
  not the schema's; its limit is set to the request timeout.
A share of the requests to routes that run a model name the real one (at most 8 tokens), so
the fuzzing reaches templates, tokenizer and engine, not only the 404 of an unknown name.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx

from app.config import Paths
from app.store import Store
from tests.support.live_server import live_server

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("EMBER_FUZZ_SEED", "20261125"))
MAX_EXAMPLES = int(os.environ.get("EMBER_FUZZ_EXAMPLES", "10"))


def linked_copy(models: Path, to: Path) -> None:
    """The test home's models as hard links in a home of the fuzzer's own: it may DELETE
    /api/delete a name it read from /api/tags, which must not cost other tests a download."""
    for file in models.rglob("*"):
        target = to / file.relative_to(models)
        if file.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(file, target)


def test_fuzzing_every_route_finds_no_server_error_and_no_schema_mismatch(tmp_path, store, qwen):
    home = tmp_path / "home"
    linked_copy(store.paths.models, home / "models")
    with live_server(Store(Paths(home))) as (url, _):
        run = subprocess.run(
            [str(Path(sys.executable).parent / "schemathesis"), "run", f"{url}/openapi.json",
             "--checks", "all",
             "--exclude-checks", "positive_data_acceptance,negative_data_rejection",
             "--max-response-time", "600",
             "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "1",
             "--request-timeout", "600", "--report", "junit",
             "--report-junit-path", str(tmp_path / "junit.xml")],
            cwd=tmp_path, capture_output=True, text=True, timeout=1200,
            env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.fuzz_checks",
                 "PYTHONPATH": str(ROOT), "EMBER_FUZZ_MODEL": qwen.id, "NO_COLOR": "1"})
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, f"seed {SEED}:\n{report}"
    suites = ET.parse(tmp_path / "junit.xml").getroot()
    cases = suites.findall(".//testcase")
    assert len(cases) >= 26, report  # every operation of the document was tested
    assert not suites.findall(".//failure") and not suites.findall(".//error"), report
    # generated requests ran the real model, on more than one API
    answered = set(re.findall(r'ember_requests_total\{endpoint="([^"]+)",outcome="(?:stop|length|'
                              r'tool_calls)"\}', metrics))
    assert len(answered) >= 3, metrics
    assert int(re.search(r"ember_completion_tokens_total (\d+)", metrics)[1]) > 0, metrics
