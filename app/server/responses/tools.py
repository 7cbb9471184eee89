"""The Responses API's `tools` as the model sees them, and the way back: function tools as
they are; a `namespace` tool (Codex groups its sub-agent tools in one) as the functions it
groups, each under its own name, or `NAMESPACE__NAME` where two would share a name, and a
call of one comes back with its `namespace` and inner name, as OpenAI answers it; hosted
tools that OpenAI runs on its servers (web_search, file_search, code_interpreter, ...) and
freeform `custom` tools are left out of what the model sees and named in the response's
ToolsLeftOut header: Codex offers web_search with every request, and an agent should not
fail for a tool it merely offers. A request that forces one of them is refused."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.server.responses.schemas import FunctionTool, HostedTool, NamespaceTool, ResponseTool
from backends.base import Tool

SEPARATOR = "__"  # between a namespace and a function's name, where names would clash


def _tool(t: FunctionTool, name: str) -> Tool:
    return Tool(name=name, description=t.description or "",
                parameters=({"type": "object", "properties": {}}
                            if t.parameters is None else t.parameters))


@dataclass(frozen=True)
class OfferedTools:
    tools: tuple[Tool, ...] = ()  # what the model is offered
    paths: tuple[str, ...] = ()  # each one's path on the wire: tools[4].tools[1]
    # a model-visible name -> (namespace, the function's name inside it)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    left_out: tuple[str, ...] = ()  # hosted and custom tools, as `type` or `type:name`

    def visible(self, namespace: str | None, name: str) -> str:
        """The name the model knows a call by (a function_call item sent back)."""
        if namespace is None:
            return name
        for shown, (ns, inner) in self.namespaced.items():
            if (ns, inner) == (namespace, name):
                return shown
        return f"{namespace}{SEPARATOR}{name}"  # a tool no longer offered: still readable

    def wire_name(self, shown: str) -> tuple[str | None, str]:
        """(namespace, name) of a call the model made by the name it was shown."""
        return self.namespaced.get(shown, (None, shown))

    def wire_param(self, param: str | None) -> str | None:
        """A path of GenerationRequest.validate (`tools[3].name`, on the flattened list) on
        the request's own wire (`tools[4].tools[1].name`)."""
        if not param or not param.startswith("tools["):
            return param
        index, _, rest = param[len("tools["):].partition("]")
        if not index.isdigit() or int(index) >= len(self.paths):
            return param
        return self.paths[int(index)] + rest


def offered_tools(tools: list[ResponseTool] | None) -> OfferedTools:
    functions: list[tuple[str | None, FunctionTool, str]] = []
    left_out: list[str] = []
    for i, t in enumerate(tools or ()):
        if isinstance(t, FunctionTool):
            functions.append((None, t, f"tools[{i}]"))
        elif isinstance(t, NamespaceTool):
            for j, inner in enumerate(t.tools):
                if isinstance(inner, FunctionTool):
                    functions.append((t.name, inner, f"tools[{i}].tools[{j}]"))
                else:
                    left_out.append(f"{t.name}/{_hosted_label(inner)}")
        else:
            left_out.append(_hosted_label(t))
    counts: dict[str, int] = {}
    for _, t, _ in functions:
        counts[t.name] = counts.get(t.name, 0) + 1
    shown: list[Tool] = []
    namespaced: dict[str, tuple[str, str]] = {}
    for namespace, t, _ in functions:
        name = t.name
        if namespace is not None:
            if counts[name] > 1:
                name = f"{namespace}{SEPARATOR}{name}"
            namespaced[name] = (namespace, t.name)
        shown.append(_tool(t, name))
    return OfferedTools(tuple(shown), tuple(p for _, _, p in functions), namespaced,
                        tuple(left_out))


def _hosted_label(tool: HostedTool) -> str:
    return f"{tool.type}:{tool.name}" if tool.name else tool.type
