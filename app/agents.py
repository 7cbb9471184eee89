"""The coding agents `ember launch` starts, and what each needs to talk to Ember: its
environment, its arguments and the config files it reads. Pure: nothing here runs, reads or
writes anything; app.cli.launch does.

What each agent reads was checked against its own code and docs (Claude Code 2.1.328, Codex
0.169, opencode's config schema, aider's model-metadata file), with Ollama's `ollama launch`
(cmd/config/*.go) and LM Studio's agent docs as the anchors. docs/agents.md says the same for
people who set an agent up by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

# The key an agent sends when the server wants none: every one of them refuses an empty key
# (Claude Code asks to log in, Codex says the variable is unset), and Ember ignores it.
KEYLESS = "ember"
# The variable the agents that name one (Codex, opencode) read the key from; `ember serve`
# reads its own key from the same one.
KEY_VAR = "EMBER_API_KEY"


@dataclass(frozen=True)
class Agent:
    name: str  # what `ember launch NAME` takes
    title: str
    executable: str
    install: str  # one line: how to install it
    needs_tools: bool  # it works only through tool calls
    prompt_tokens: int  # about how large its first request is (system prompt, tool schemas)


AGENTS: dict[str, Agent] = {a.name: a for a in (
    # its first request: 11,802 tokens measured with 2.1.328 (issue 38)
    Agent("claude", "Claude Code", "claude", "npm install -g @anthropic-ai/claude-code",
          True, 12_000),
    Agent("codex", "Codex", "codex", "npm install -g @openai/codex", True, 8_000),
    Agent("opencode", "opencode", "opencode", "npm install -g opencode-ai", True, 10_000),
    # aider asks for edits in its own text formats (diff, whole file), not through tool calls
    Agent("aider", "aider", "aider", "pip install aider-chat (or: uv tool install aider-chat)",
          False, 3_000),
)}


@dataclass(frozen=True)
class AgentSetup:
    env: dict[str, str]  # set in the agent's environment, over the user's own
    args: list[str]  # before the user's own arguments
    files: dict[Path, str] = field(default_factory=dict)  # config files it reads: path -> text
    secret_env: tuple[str, ...] = ()  # the variables holding the key (masked when printed)


def agent_setup(agent: str, base_url: str, model: str, context: int, key: str | None,
                folder: Path) -> AgentSetup:
    """What agent `agent` needs to use `model` on the Ember server at `base_url`
    (`http://HOST:PORT`, no path) whose API key is `key` (None: it needs none). `context` is the
    largest context the server can give the model; `folder` is where config files go (Ember's
    data folder, never the agent's own config)."""
    token = key or KEYLESS
    return _SETUPS[agent](base_url.rstrip("/"), model, context, token, folder)


# Claude Code keeps this much of the window free for compacting a conversation, on top of
# its answer room (min(CLAUDE_CODE_MAX_OUTPUT_TOKENS, 20,000)): measured with `claude -p
# /context` on 2.1.328 ("Autocompact buffer": 17.1k at a 4,096-token output cap, 21.2k at
# 8,192, 33k by default).
CLAUDE_COMPACT_RESERVE = 13_000
CLAUDE_SUMMARY_CAP = 20_000


def claude_output_tokens(context: int) -> int:
    """The answer cap Claude Code gets for a `context`-token window: an eighth of it, between
    4,096 and its own default of 32,000. Its compaction reserve grows with the cap, so its
    default on a 32k local window would leave nothing for the conversation."""
    return min(32_000, max(4_096, context // 8))


def answer_room(context: int) -> int:
    """The answer cap of the agents that take one from their config: a quarter of the
    window, at most 8,192 tokens."""
    return max(1, min(context // 4, 8192))


def working_room(agent: Agent, context: int) -> int:
    """About how many tokens of conversation `agent` can hold in a `context`-token window
    before it compacts: the window less its first request and what it keeps free."""
    if agent.name == "claude":
        output = claude_output_tokens(context)
        reserve = CLAUDE_COMPACT_RESERVE + min(output, CLAUDE_SUMMARY_CAP)
    elif agent.name == "codex":
        reserve = context - context * 9 // 10  # model_auto_compact_token_limit, below
    else:
        reserve = answer_room(context)
    return context - agent.prompt_tokens - reserve


def _claude(base_url: str, model: str, context: int, token: str, folder: Path) -> AgentSetup:
    # Claude Code asks for claude-haiku for its background work (titles, summaries) and
    # names sonnet/opus for subagents: all of them are the one model Ember serves. It assumes
    # a 1M-token window for a model it does not know, so it would never compact before
    # Ember's context is full: CLAUDE_CODE_MAX_CONTEXT_TOKENS tells it the real one (checked
    # on 2.1.328: the unknown-model notice goes and /context shows the window).
    env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": token,
           "ANTHROPIC_API_KEY": "",  # else a key of the user's for Anthropic would win
           "ANTHROPIC_MODEL": model,
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "ANTHROPIC_DEFAULT_SONNET_MODEL": model, "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
           "CLAUDE_CODE_SUBAGENT_MODEL": model,
           "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(context),
           "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(claude_output_tokens(context)),
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # no telemetry, no update checks
    return AgentSetup(env, [], secret_env=("ANTHROPIC_AUTH_TOKEN",))


def _toml_string(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def _codex(base_url: str, model: str, context: int, token: str, folder: Path) -> AgentSetup:
    # A provider of its own through `-c` overrides: nothing in the user's ~/.codex changes.
    provider = ("{name=\"Ember\", base_url=" + _toml_string(f"{base_url}/v1")
                + ", wire_api=\"responses\", env_key=\"" + KEY_VAR + "\"}")
    args = ["-c", "model_provider=ember", "-c", f"model_providers.ember={provider}",
            "-c", f"model_context_window={context}",
            # Codex compacts at this many tokens; 90% of the window leaves room for the answer
            "-c", f"model_auto_compact_token_limit={context * 9 // 10}",
            "-m", model]
    return AgentSetup({KEY_VAR: token}, args, secret_env=(KEY_VAR,))


def opencode_config(base_url: str, model: str, context: int) -> dict:
    output = answer_room(context)
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"ember": {
            "npm": "@ai-sdk/openai-compatible", "name": "Ember",
            # the key is read from the environment, never written to the file
            "options": {"baseURL": f"{base_url}/v1", "apiKey": f"{{env:{KEY_VAR}}}"},
            # without a limit opencode takes the context as 0 and never compacts
            "models": {model: {"name": model, "tool_call": True,
                               "limit": {"context": context, "output": output}}},
        }},
        "model": f"ember/{model}",
        "small_model": f"ember/{model}",
    }


def _opencode(base_url: str, model: str, context: int, token: str, folder: Path) -> AgentSetup:
    path = folder / "opencode.json"
    text = json.dumps(opencode_config(base_url, model, context), indent=2) + "\n"
    # OPENCODE_CONFIG is merged over the user's own opencode.json, which stays as it is
    return AgentSetup({"OPENCODE_CONFIG": str(path), KEY_VAR: token}, [], {path: text},
                      secret_env=(KEY_VAR,))


def _aider(base_url: str, model: str, context: int, token: str, folder: Path) -> AgentSetup:
    # aider (through litellm) knows no context for a model it has never heard of: it warns,
    # and cannot tell when a chat is too long. Its model-metadata file says it.
    path = folder / "aider-model-metadata.json"
    metadata = {f"openai/{model}": {
        "max_input_tokens": context, "max_tokens": context,
        "max_output_tokens": answer_room(context),
        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
        "litellm_provider": "openai", "mode": "chat"}}
    env = {"OPENAI_API_BASE": f"{base_url}/v1", "OPENAI_API_KEY": token}
    args = ["--model", f"openai/{model}", "--model-metadata-file", str(path)]
    return AgentSetup(env, args, {path: json.dumps(metadata, indent=2) + "\n"},
                      secret_env=("OPENAI_API_KEY",))


_SETUPS = {"claude": _claude, "codex": _codex, "opencode": _opencode, "aider": _aider}
assert _SETUPS.keys() == AGENTS.keys()
