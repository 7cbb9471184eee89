"""Whether a coding agent can work on a local model, checked before `ember launch` starts
anything: installed, a chat model, able to call tools where the agent works through them, and
the context the server can give it here."""

from __future__ import annotations

from dataclasses import dataclass

from app.agents import Agent, working_room
from app.errors import ModelNotFoundError
from app.fit import plan_for
from app.hardware import detect
from app.runtime import Runtime
from app.runtime.backend_choice import preferred_format
from app.runtime.model_traits import model_traits
from app.runtime.runtime import LARGEST_CONTEXT
from app.store import Store
from backends.errors import EmberError

SERVE_PARALLEL = 8  # `ember serve`'s default --parallel: the load plan the server makes
ROOMY_CONTEXT = 16_384  # below this, an agent's prompt leaves little room for the work
SHORT_ROOM = 8_192  # tokens of conversation before the agent compacts: below this, often


@dataclass(frozen=True)
class ModelCheck:
    context: int  # the largest context the server can give the model on this machine
    warnings: tuple[str, ...]  # one line each


def check_model(store: Store, name: str, agent: Agent) -> ModelCheck:
    """What the agent will get from local model `name`; an EmberError, in one line, for a
    model it cannot use (not installed, not a chat model, no tool calls where the agent
    works through them); warnings for one it can use poorly."""
    if Runtime.is_remote(name):
        raise EmberError(f"{name} is a remote model: `ember launch` runs local models (point "
                         "the agent at that model's own server instead)")
    runtime = Runtime(store=store, hardware=detect(measure=False), parallel=SERVE_PARALLEL)
    try:
        model = store.get(name, prefer=preferred_format(runtime.hardware))
    except ModelNotFoundError:
        raise EmberError(f"{name} is not installed: run `ember pull {name}` first") from None
    traits = model_traits(model)
    caps = traits.capabilities
    # Ember offers tools to every chat model (app.runtime.model_traits): in the template's own
    # call syntax, or described in the system prompt where the template has none (the
    # "generic" format). A model without a chat template, or one that only embeds, has none.
    if "embedding" in caps:
        raise EmberError(f"{model.ref} is an embedding model: {agent.title} needs a chat model")
    if "tools" not in caps:
        raise EmberError(f"{model.ref} cannot call tools (it has no chat template: a base "
                         f"model), and {agent.title} works through tool calls"
                         if agent.needs_tools else
                         f"{model.ref} has no chat template (a base model): {agent.title} "
                         "needs a chat model")
    warnings = []
    if agent.needs_tools and not traits.native_tools:
        warnings.append(f"warning: {model.ref}'s chat template has no tool calls of its own; "
                        "Ember describes the tools in its prompt, which models not trained "
                        "for tool calls follow poorly")
    backend = runtime.choose(model).name
    context = plan_for(model, backend, runtime.hardware, LARGEST_CONTEXT, SERVE_PARALLEL).context
    room = working_room(agent, context)
    if context < ROOMY_CONTEXT:
        fits = "does not fit" if context < agent.prompt_tokens else "leaves little room"
        warnings.append(f"warning: {model.ref} gets at most {context:,} tokens of context on this "
                   f"machine; {agent.title}'s first request alone is about "
                   f"{agent.prompt_tokens:,} tokens, so it {fits} (agents want 16k or more)")
    elif room < SHORT_ROOM:
        warnings.append(f"warning: {model.ref} gets at most {context:,} tokens of context on this "
                        f"machine; after {agent.title}'s own prompt and the room it keeps for "
                        f"compacting, about {max(room, 0):,} tokens are left for the work, so "
                        "it compacts the conversation often (a model with a longer context "
                        "does better)")
    return ModelCheck(context, tuple(warnings))
