"""A front end joins a running Ember service (issue 43): the chat session on ServiceRuntime
against a live `ember serve` with an API key (the real Qwen2.5-Coder-0.5B-Instruct), the
service found through the endpoint and key files of the data folder. The chat, an OpenAI
client, `ember run` and `ember chat` share the service's one worker, and the chat survives
the service restarting on its port. Greedy and short."""

from __future__ import annotations

import shutil
from pathlib import Path

import openai

from app.chat.events import AnswerDone, ChatError, ChatEvent
from app.chat.request import TurnOptions
from app.chat.session import ChatSession
from app.config import Paths
from app.history import History
from app.runtime.choose import choose_runtime, describe
from app.runtime.runtime import Runtime
from app.runtime.service_runtime import ServiceRuntime
from app.service.endpoint import write_endpoint, write_key
from app.store import InstalledModel, Store
from backends.base import SamplingParams
from tests.support.cli import ember
from tests.support.live_server import free_port, live_server
from tests.support.models import TEST_HOME

KEY = "service-key-43"


def home_with_models(tmp_path: Path) -> Paths:
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(TEST_HOME / "models")
    if (TEST_HOME / "hardware.json").exists():  # skip the bandwidth measurement
        shutil.copy(TEST_HOME / "hardware.json", home / "hardware.json")
    return Paths(home)


def answer(session: ChatSession, text: str) -> list[ChatEvent]:
    events: list[ChatEvent] = []
    session.send(text, events.append)
    return events


def test_a_chat_on_the_service_shares_its_worker_and_survives_a_restart(
        qwen: InstalledModel, tmp_path: Path):
    paths = home_with_models(tmp_path)
    store = Store(paths)
    port = free_port()
    write_key(paths, KEY)
    assert isinstance(choose_runtime(paths, store), Runtime)  # no endpoint yet: in-process
    with live_server(store, port=port, api_key=KEY) as (url, served):
        write_endpoint(paths, url, 1)
        rt = choose_runtime(paths, store)
        assert isinstance(rt, ServiceRuntime)
        assert describe(rt) == f"Using the Ember service at {url}"
        history = History(paths.history_db)
        conv = history.create(model=qwen.ref)
        session = ChatSession(history, rt, conv.id, qwen.ref,  # type: ignore[arg-type]
                              TurnOptions(SamplingParams(temperature=0, max_tokens=12)))
        done = [e for e in answer(session, "What is 2+2? Answer with the number.")
                if isinstance(e, AnswerDone)]
        assert done and "4" in done[0].text and done[0].stats["prompt_tokens"] > 0
        assert [lm.model.ref for lm in rt.loaded()] == [qwen.ref]

        client = openai.OpenAI(base_url=url + "/v1", api_key=KEY)
        reply = client.chat.completions.create(
            model=qwen.ref, messages=[{"role": "user", "content": "Say hi."}],
            max_tokens=4, temperature=0)
        assert reply.choices[0].message.content
        r = ember("run", qwen.ref, "What is 2+2? Answer with the number.", "--temperature",
                  "0", "--max-tokens", "8", env={"EMBER_HOME": str(paths.home)})
        assert r.returncode == 0, r.stderr
        assert f"[Using the Ember service at {url}]" in r.stderr and "4" in r.stdout
        r = ember("chat", qwen.ref, "--temperature", "0", "--max-tokens", "8",
                  stdin="What is 5+5? Answer with the number.\n/bye\n",
                  env={"EMBER_HOME": str(paths.home)})
        assert r.returncode == 0, r.stderr
        assert f"Using the Ember service at {url}" in r.stderr and "10" in r.stdout
        loaded = served.loaded()
        assert len(loaded) == 1 and loaded[0].model.ref == qwen.ref  # one worker, one load
        assert [lm.pid for lm in rt.loaded()] == [loaded[0].pid]  # the window shows its memory
        assert rt.unload(qwen.ref) and served.loaded() == []
        served.shutdown()

    failed = [e for e in answer(session, "And 3+3?") if isinstance(e, ChatError)]
    assert failed and f"the Ember service at {url}" in failed[0].message

    with live_server(store, port=port, api_key=KEY) as (again, served):
        assert again == url
        done = [e for e in answer(session, "What is 3+3? Answer with the number.")
                if isinstance(e, AnswerDone)]
        assert done and "6" in done[0].text
        assert [lm.model.ref for lm in served.loaded()] == [qwen.ref]
        served.shutdown()
    rt.shutdown()
    history.close()
