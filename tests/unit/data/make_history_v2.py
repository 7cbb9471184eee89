"""How history-v2.db was made: with app/history.py as it was at commit 6f19f5e (schema 2,
before message trees).

    mkdir /tmp/v2 && git show 6f19f5e:app/history.py > /tmp/v2/history_v2.py
    PYTHONPATH=/tmp/v2:. python tests/unit/data/make_history_v2.py tests/unit/data/history-v2.db

Kept for the record: the fixture must stay the old code's output, so do not rebuild it with
the current code.
"""
import sys
from pathlib import Path

from history_v2 import SCHEMA_VERSION, History

from backends.base import ToolCall

assert SCHEMA_VERSION == 2
out = Path(sys.argv[1])
out.unlink(missing_ok=True)
h = History(out)
a = h.create(model="qwen2.5-coder-0.5b-instruct:Q4_K_M", title="Weather in Paris",
             system_prompt="You are terse.")
h.set_thinking(a.id, "low")
h.add_message(a.id, "user", "What is the weather in Paris? 🔥 日本語")
call = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
t = h.add_message(a.id, "assistant", "", status="streaming", model="lab/think",
                  reasoning="The user wants")
h.update_message(t.id, "", "complete", {"prompt_tokens": 40, "completion_tokens": 12,
                                        "finish_reason": "tool_calls"},
                 reasoning="The user wants the weather.", tool_calls=(call,))
h.add_message(a.id, "tool", "18°C", tool_call_id="call_1", tool_name="get_weather")
h.add_message(a.id, "assistant", "It is 18°C in Paris.", model="lab/think",
              stats={"prompt_tokens": 60, "completion_tokens": 9, "finish_reason": "stop"})
h.add_message(a.id, "user", "And tomorrow?")
h.add_message(a.id, "assistant", "I cannot", status="stopped", model="lab/think")
b = h.create(title="Cut off by a crash")
h.add_message(b.id, "user", "write a poem")
ans = h.add_message(b.id, "assistant", "", status="streaming", model="lab/ok")
h.update_message(ans.id, "Roses are red,\nviolets", reasoning="a poem")
c = h.create(title="Empty")
d = h.create(title="Deleted one")
h.add_message(d.id, "user", "x" * 5000)
h.delete(d.id)
# no close: the app was killed while b's answer streamed; make the file self-contained (WAL
# folded in) so one file is the fixture
h._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
h._db.execute("PRAGMA journal_mode=DELETE")
print(h._db.execute("PRAGMA user_version").fetchone()[0])
