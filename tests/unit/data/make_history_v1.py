"""How history-v1.db was made: with app/history.py as it was at commit 10eb161 (schema 1).

    mkdir /tmp/v1 && git show 10eb161:app/history.py > /tmp/v1/history_v1.py
    PYTHONPATH=/tmp/v1:. python tests/unit/data/make_history_v1.py tests/unit/data/history-v1.db

Kept for the record: the fixture must stay the old code's output, so do not rebuild it with
the current code.
"""
import sys
from pathlib import Path

from history_v1 import SCHEMA_VERSION, History

assert SCHEMA_VERSION == 1
out = Path(sys.argv[1])
out.unlink(missing_ok=True)
h = History(out)
a = h.create(model="qwen2.5-coder-0.5b-instruct:Q4_K_M", title="Reverse a string",
             system_prompt="You are terse.")
h.add_message(a.id, "user", "Write a Python function that reverses a string.")
h.add_message(a.id, "assistant", "```python\ndef rev(s: str) -> str:\n    return s[::-1]\n```\n",
              stats={"prompt_tokens": 31, "completion_tokens": 22, "ttft_s": 0.21,
                     "decode_tokens_per_s": 41.5, "finish_reason": "stop", "truncated": False,
                     "total_s": 0.74, "cached_tokens": 0, "draft_tokens": 0,
                     "accepted_tokens": 0}, model="qwen2.5-coder-0.5b-instruct:Q4_K_M")
h.add_message(a.id, "user", "Unicode: 日本語 — émojis 🔥🧠, tabs\tand\r\nCRLF, quotes "
              "\"'`, <think>not thinking</think>")
h.add_message(a.id, "assistant", "Stopped half", status="stopped", model="m")
h.add_message(a.id, "assistant", "", status="error", model="m")
b = h.create(title="Cut off by a crash")
h.add_message(b.id, "user", "write a poem")
ans = h.add_message(b.id, "assistant", "", status="streaming", model="lab/ok")
h.update_message(ans.id, "Roses are red,\nviolets")
c = h.create(title="Deleted one")
h.add_message(c.id, "user", "x" * 5000)
h.delete(c.id)
h.rename(a.id, "Reverse a string (renamed)")
# no close and no checkpoint of the streaming answer's state: the app was killed; make the
# file self-contained (WAL folded in) so one file is the fixture
h._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
h._db.execute("PRAGMA journal_mode=DELETE")
print(h._db.execute("PRAGMA user_version").fetchone()[0])
