"""The layers of docs/architecture.md, checked on the source: engines never import the app,
and the app reaches engines only through the Runtime (app/runtime), which imports them in the
worker.

Read from the files' import statements (every one, including those inside functions), so the
check needs no engine installed and runs in the unit tier.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
while not (ROOT / "pyproject.toml").exists():
    ROOT = ROOT.parent

# What any layer may import from backends/: the request and event types, the errors, the
# chat-template renderer, and model-format facts that need no engine (an MLX directory's
# config.json; the cuda engine's KV layout constants, for the fit model, without torch;
# whether the mlx backend finds OpenBLAS here, without MLX); a message's images and audio
# (backends.media: Media, the marker, decoding with limits, issue 42).
VOCABULARY = {"backends", "backends.base", "backends.errors", "backends.chat_template",
              "backends.media",
              "backends.mlx_dir", "backends.cuda.kv_layout", "backends.mlx_blas",
              "backends.gpu_modules"}
FRONT_ENDS = ("app/cli", "app/gui", "app/server")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in `path`; `from a import b` gives a.b too,
    since b may be a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def violations(files: list[Path], bad: Callable[[str], bool], root: Path = ROOT) -> list[str]:
    return [f"{p.relative_to(root)}:{line}: imports {name}"
            for p in files for line, name in imports(p) if is_module(name) and bad(name)]


def concrete(name: str) -> bool:
    return name.startswith("backends") and name not in VOCABULARY


def test_backends_and_kernels_import_nothing_from_app():
    files = sources("backends", "kernels")
    assert len(files) > 40  # the check reads the real tree
    assert violations(files, lambda m: m == "app" or m.startswith("app.")) == []


def test_front_ends_reach_backends_only_through_the_runtime():
    files = sources(*FRONT_ENDS)
    assert len(files) > 20
    assert violations(files, concrete) == []


def test_only_the_runtime_imports_concrete_backends():
    core = [p for p in sources("app") if "runtime" not in p.relative_to(ROOT).parts]
    assert violations(core, concrete) == []


def test_the_check_catches_an_engine_imported_inside_a_function(tmp_path):
    bad = tmp_path / "window.py"
    bad.write_text("from backends.base import Message\n\n\ndef models():\n"
                   "    from backends.remote import RemoteBackend\n")
    assert violations([bad], concrete, root=tmp_path) == ["window.py:5: imports backends.remote"]



def qt_or_window(files: list[Path], root: Path = ROOT) -> list[str]:
    """Imports of Qt (an installed package, so not checked with is_module) or of app.gui."""
    return [f"{p.relative_to(root)}:{line}: imports {name}"
            for p in files for line, name in imports(p)
            if name.split(".")[0] in ("PySide6", "shiboken6") or name == "app.gui"
            or name.startswith("app.gui.")]


def test_the_chat_session_imports_no_qt_and_no_window():
    """app/chat is the headless core the window and `ember chat` share (Anki's aqt over its
    core): a Qt import there would tie the terminal to the window."""
    files = sources("app/chat")
    assert len(files) >= 5
    assert qt_or_window(files) == []


def test_the_chat_check_catches_qt_and_the_window(tmp_path):
    bad = tmp_path / "session.py"
    bad.write_text("from app.history import History\n\n\ndef show():\n"
                   "    from PySide6.QtCore import Signal\n    import app.gui.chat_view\n")
    assert qt_or_window([bad], root=tmp_path) == [
        "session.py:5: imports PySide6.QtCore", "session.py:5: imports PySide6.QtCore.Signal",
        "session.py:6: imports app.gui.chat_view"]


# The Runtime's entries that make (or measure) a chat turn's answer. The window and `ember
# chat` reach them only through app/chat's ChatSession (which submits each answer, as the
# server does: Runtime.submit); `ember run`, one prompt and no conversation, submits its
# request itself. The window's model pages may still list, load and unload models.
TURN_CALLS = {"generate", "count_prompt_tokens", "fit_context", "embed"}
TURN_CALLS_ALLOWED: set[tuple[str, str]] = set()


def turn_calls(files: list[Path], root: Path = ROOT) -> list[str]:
    """Calls of a chat-turn entry (`x.generate(...)`, any receiver) outside the allowed."""
    found = []
    for p in files:
        rel = p.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), str(p))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in TURN_CALLS \
                    and (rel, node.func.attr) not in TURN_CALLS_ALLOWED:
                found.append(f"{rel}:{node.lineno}: calls {node.func.attr}")
    return found


def test_the_window_and_the_cli_make_chat_turns_only_through_the_chat_session():
    files = sources("app/gui", "app/cli")
    assert len(files) > 40
    assert turn_calls(files) == []
    # and `ember run` makes its one request through the same entry as the others
    assert any("rt.submit(" in p.read_text(encoding="utf-8") for p in sources("app/cli")
               if p.name == "generate.py")


def test_the_turn_check_catches_a_generate_call_in_a_window_task(tmp_path):
    bad = tmp_path / "tasks.py"
    bad.write_text("def run(runtime, request):\n    tokens = runtime.count_prompt_tokens('m',"
                   " request)\n    for event in runtime.generate('m', request):\n"
                   "        print(event, tokens)\n")
    assert turn_calls([bad], root=tmp_path) == ["tasks.py:2: calls count_prompt_tokens",
                                                "tasks.py:3: calls generate"]
