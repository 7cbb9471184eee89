"""mcp.json as Cursor writes it, and every kind of mistake in it: each is an error that names
the problem, and a file with a mistake is never written over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config import Paths
from app.mcp.config import (
    DEFAULT_TIMEOUT_S,
    McpConfigError,
    load_mcp_config,
    parse_mcp_config,
    save_mcp_text,
)

CURSOR = {"mcpServers": {
    "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
              "env": {"DEBUG": "1"}},
    "search": {"url": "https://mcp.example.com/mcp",
               "headers": {"Authorization": "Bearer abc"}, "type": "http"},
    "slow": {"command": "python", "args": ["server.py"], "cwd": "/srv", "timeout": 5},
    "old": {"command": "old-server", "disabled": True}}}


def test_a_cursor_style_file_gives_stdio_and_http_servers():
    servers = parse_mcp_config(json.dumps(CURSOR))
    files, search, slow = servers["files"], servers["search"], servers["slow"]
    assert (files.transport, files.command, files.env) == ("stdio", "npx", {"DEBUG": "1"})
    assert files.args == ("-y", "@modelcontextprotocol/server-filesystem", "/tmp")
    assert files.where == "npx -y @modelcontextprotocol/server-filesystem /tmp"
    assert files.timeout_s == DEFAULT_TIMEOUT_S
    assert (search.transport, search.url) == ("http", "https://mcp.example.com/mcp")
    assert search.headers == {"Authorization": "Bearer abc"}
    assert (slow.cwd, slow.timeout_s) == ("/srv", 5.0)
    assert servers["old"].disabled and not files.disabled


def test_an_empty_or_missing_file_has_no_servers(tmp_path: Path):
    assert parse_mcp_config("") == {} and parse_mcp_config("  \n") == {}
    assert load_mcp_config(tmp_path / "mcp.json") == {}
    assert parse_mcp_config('{"mcpServers": {}}') == {}


@pytest.mark.parametrize(("text", "says"), [
    ('{"mcpServers": {"a": {"command": "x",}}}', "not valid JSON: Expecting property name "
                                                  "enclosed in double quotes at line 1"),
    ('["a"]', 'must be an object with "mcpServers"'),
    ('{"servers": {}}', 'must be an object with "mcpServers"'),
    ('{"mcpServers": ["a"]}', '"mcpServers" must be an object of servers by name'),
    ('{"mcpServers": {"a": "npx x"}}', 'mcpServers["a"] must be an object with a "command"'),
    ('{"mcpServers": {"a": {}}}', 'mcpServers["a"] needs a "command"'),
    ('{"mcpServers": {"a": {"comand": "x"}}}', "unknown key 'comand'"),
    ('{"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}',
     'has both "command" and "url"'),
    ('{"mcpServers": {"a": {"command": "x", "args": "-y"}}}',
     'mcpServers["a"].args must be a list of strings'),
    ('{"mcpServers": {"a": {"command": "x", "env": {"N": 1}}}}',
     'mcpServers["a"].env must be an object of strings'),
    ('{"mcpServers": {"a": {"command": ""}}}', "command must be a program name or path"),
    ('{"mcpServers": {"a": {"url": "ftp://h/mcp"}}}', "must be an http:// or https:// address"),
    ('{"mcpServers": {"a": {"url": "http://h/sse", "type": "sse"}}}',
     "the old SSE transport is not supported"),
    ('{"mcpServers": {"a": {"command": "x", "type": "http"}}}',
     "\"type\": 'http' does not match its command"),
    ('{"mcpServers": {"a": {"url": "http://h/mcp", "args": ["x"]}}}',
     '"args" goes with a "command", not a url'),
    ('{"mcpServers": {"a": {"command": "x", "headers": {}}}}',
     '"headers" go with a "url", not a command'),
    ('{"mcpServers": {"a": {"command": "x", "timeout": 0}}}',
     "timeout must be a positive number of seconds, got 0"),
    ('{"mcpServers": {"a": {"command": "x", "disabled": "yes"}}}',
     "disabled must be true or false"),
    ('{"mcpServers": {"a b": {"command": "x"}}}', "a server name takes 1 to 40 letters"),
])
def test_each_kind_of_bad_file_is_an_error_that_names_the_problem(text: str, says: str):
    with pytest.raises(McpConfigError) as e:
        parse_mcp_config(text)
    assert says in str(e.value) and str(e.value).startswith("mcp.json")


def test_saving_checks_first_and_never_writes_a_file_with_a_mistake(tmp_path: Path):
    home = Paths(tmp_path)
    good = json.dumps({"mcpServers": {"a": {"command": "x"}}})
    assert list(save_mcp_text(home.mcp_file, good)) == ["a"]
    assert home.mcp_file.read_text() == good + "\n"
    assert home.mcp_file.stat().st_mode & 0o777 == 0o600  # env and headers hold keys
    with pytest.raises(McpConfigError, match="unknown key 'comand'"):
        save_mcp_text(home.mcp_file, '{"mcpServers": {"b": {"comand": "y"}}}')
    assert home.mcp_file.read_text() == good + "\n"
    assert [p.name for p in tmp_path.iterdir()] == ["mcp.json"]  # no temporary file left


def test_a_broken_file_on_disk_is_reported_with_its_path(tmp_path: Path):
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"a": {"url": 3}}}')
    with pytest.raises(McpConfigError, match=r"mcp.json: mcpServers\[\"a\"\]\.url must be"):
        load_mcp_config(path)
    assert path.read_text() == '{"mcpServers": {"a": {"url": 3}}}'
