"""Context for agents: the largest context each installed registry model gets on this machine
and its KV cache's memory, and a 16k-token agent prompt through `ember serve` and through
llama-server (same model, context, threads, parallel sequences, flash attention and KV cache
type) in the same run. Prints JSON.

    .venv/bin/python benchmarks/long_context.py [--models qwen2.5-coder-0.5b-instruct,...]
        [--tokens 16384] [--repeat 1] [--llama-server PATH]

Per model: the fit model's plan for the largest context (app.runtime.Runtime.fit_context
reloads a model with it when a prompt needs more than it has), the predicted KV cache at it
in f16 and q8_0; then both servers start at that context with the plan's KV type, and each
round sends a prompt of about `--tokens` tokens (a Python module and an instruction, its
first line different each round so nothing is cached: cold), then the same module with
another question (cached). Medians of --repeat rounds. Targets: cold time to first token at
most 1.10x llama-server's, cached under 1 s.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: `benchmarks` is not an installed package

from app.fit import plan_for  # noqa: E402
from app.fit.estimate import arch_from_gguf, kv_cache_bytes  # noqa: E402
from app.gguf_file import read_gguf  # noqa: E402
from app.hardware import detect  # noqa: E402
from app.runtime.runtime import LARGEST_CONTEXT  # noqa: E402
from app.store import Store  # noqa: E402
from benchmarks.serve_load import (  # noqa: E402
    PARALLEL,
    free_port,
    long_code,
    running_server,
    server_commands,
    stream_chat,
)

REGISTRY_MODELS = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")
COLD_TARGET = 1.10  # cold time to first token, at most this times llama-server's
CACHED_TARGET_S = 1.0


def default_llama_server() -> str | None:
    """The llama-server benchmarks/build_llama_server.sh built, if any."""
    found = sorted(glob.glob(str(Path.home() / ".cache/ember/wheels/llama-server-*/llama-server")))
    return os.environ.get("EMBER_LLAMA_SERVER") or (found[-1] if found else None)


def largest_plan(model, hw, parallel: int) -> dict:
    """The fit model's largest context for `model` here, and its KV cache in each type."""
    plan = plan_for(model, "llamacpp", hw, LARGEST_CONTEXT, parallel)
    arch = arch_from_gguf(read_gguf(model.path))
    kv = {t: kv_cache_bytes(arch, plan.context, plan.parallel, t) for t in ("f16", "q8_0")}
    return {"context": plan.context, "parallel": plan.parallel, "kv_cache": plan.kv_cache,
            "kv_gb": {t: round(b / 1e9, 3) for t, b in kv.items()},
            "memory_gb": round(plan.memory_bytes / 1e9, 3), "reason": plan.reason}


def agent_turns(url: str, model: str, tokens: int, round_: int) -> dict:
    """Cold: a module of about `tokens` tokens under instructions that start differently
    each round; cached: the same prompt, another question."""
    head = (f"Session {round_}. You are a coding agent working in a repository. Read the "
            "module, then answer briefly.\n")
    module = f"{head}Here is my module:\n{long_code(tokens)}\n"
    cold = stream_chat(url, model, [{"role": "user", "content": module + "What does it do?"}],
                       max_tokens=8)
    cached = stream_chat(url, model, [{"role": "user", "content": module + "Which handler "
                                       "returns 203?"}], max_tokens=8)
    return {"ttft_cold_s": round(cold["ttft_s"], 3), "ttft_cached_s": round(cached["ttft_s"], 3)}


def loaded_context(url: str) -> int | None:
    """The context Ember's server loaded its model with (Ollama's /api/ps)."""
    models = httpx.get(url + "/api/ps", timeout=10).json().get("models", [])
    return models[0].get("context_length") if models else None


def set_flag(command: list[str], flag: str, value: str) -> list[str]:
    i = command.index(flag)
    return command[:i + 1] + [value] + command[i + 2:]


def commands(args: argparse.Namespace, model, port: int, plan: dict) -> dict[str, list[str]]:
    """serve_load's server commands at the plan's context, parallel sequences and KV type;
    llama-server with flash attention on, as Ember's llama.cpp backend runs a q8_0 cache."""
    out = server_commands(args, model, port, plan["context"])
    parallel = str(plan["parallel"])
    out["ember"] = set_flag(out["ember"], "--parallel", parallel)
    if "llama_server" in out:
        base = set_flag(set_flag(out["llama_server"], "--parallel", parallel), "--ctx-size",
                        str(plan["context"] * plan["parallel"]))
        out["llama_server"] = base + ["-fa", "on", "--cache-type-k", plan["kv_cache"],
                                      "--cache-type-v", plan["kv_cache"]]
    return out


def measure_model(args: argparse.Namespace, model, plan: dict) -> dict:
    env = {**os.environ, "EMBER_THREADS": str(args.threads),
           "EMBER_CONTEXT": str(plan["context"]), "EMBER_KV_CACHE": plan["kv_cache"]}
    rounds: dict[str, list[dict]] = {}
    contexts: dict[str, int | None] = {}
    for r in range(args.repeat):
        port = free_port()
        for name, command in commands(args, model, port, plan).items():
            with running_server(command, env, port, model.id) as url:
                if name == "ember":
                    contexts["ember"] = loaded_context(url)
                result = agent_turns(url, model.id, args.tokens, r)
            print(json.dumps({model.id: {name: result}}), file=sys.stderr)
            rounds.setdefault(name, []).append(result)
    out: dict = {name: {key: statistics.median(x[key] for x in rs) for key in rs[0]}
                 | {"runs": rs} for name, rs in rounds.items()}
    out["ember"]["loaded_context"] = contexts.get("ember")
    ember = out["ember"]
    targets = {"cached_under_1s": ember["ttft_cached_s"] < CACHED_TARGET_S}
    if "llama_server" in out:
        ratio = round(ember["ttft_cold_s"] / out["llama_server"]["ttft_cold_s"], 2)
        out["cold_vs_llama_server"] = ratio
        targets["cold_le_1.10x_llama_server"] = ratio <= COLD_TARGET
    out["targets"] = targets
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(REGISTRY_MODELS),
                        help="registry models to run, comma-separated (those installed run)")
    parser.add_argument("--tokens", type=int, default=16384, help="the agent prompt's size")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--parallel", type=int, default=PARALLEL)
    parser.add_argument("--llama-server", default=default_llama_server())
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    if args.llama_server and not Path(args.llama_server).is_file():
        parser.error(f"--llama-server {args.llama_server}: no such file")
    args.context, args.ember_only = 4096, True  # what serve_load.server_commands reads
    store, hw = Store(), detect()
    installed = {m.id: m for m in store.list() if m.format == "gguf"}
    results: dict = {"threads": args.threads, "tokens": args.tokens, "repeat": args.repeat,
                     "llama_server": args.llama_server, "ram_available_gb":
                     round(hw.ram_available / 1e9, 1), "models": {}}
    for model_id in [m.strip() for m in args.models.split(",") if m.strip()]:
        model = installed.get(model_id)
        if model is None:
            results["models"][model_id] = {"skipped": "not installed (ember pull it)"}
            continue
        plan = largest_plan(model, hw, args.parallel)
        results["models"][model_id] = {"largest": plan} | measure_model(args, model, plan)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
