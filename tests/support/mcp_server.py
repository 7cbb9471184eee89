"""A real MCP server for the tests, on the official SDK (`MCPServer`, mcp 2's FastMCP), with
two tools: `get_weather` (a city's weather, made up so the model can only know it from the tool)
and `add`. Run as a program, the way mcp.json starts servers:

    python -m tests.support.mcp_server [--slow S] [--die-on-call] [--fail-at-start]
                                       [--garbage] [--http PORT] [--calls FILE]

--slow: each call waits S seconds first (a hung server, for timeouts); --die-on-call: the
process exits when a tool is called (a crash); --fail-at-start: it writes an error to stderr
and exits; --garbage: it writes lines that are not MCP and never answers; --http: it serves
streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio; --calls: each call that runs
appends a line "TOOL ARGUMENTS-AS-JSON" to FILE (what a test checks was, or was not, run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WEATHER = "{city}: 27°C and thick fog"
FAILED_START = "weather-station: no API token in WEATHER_TOKEN"


def command(*flags: str) -> dict:
    """The mcp.json entry that starts this server (run from the checkout, so it imports)."""
    return {"command": sys.executable, "args": ["-m", "tests.support.mcp_server", *flags],
            "cwd": str(REPO)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--die-on-call", action="store_true")
    parser.add_argument("--fail-at-start", action="store_true")
    parser.add_argument("--garbage", action="store_true")
    parser.add_argument("--http", type=int, default=0)
    parser.add_argument("--calls", default="")
    parser.add_argument("--probes", action="store_true",
                        help="also `environment` (the names of its env) and `flood` (n bytes)")
    opts = parser.parse_args(argv)
    if opts.fail_at_start:
        print(FAILED_START, file=sys.stderr, flush=True)
        return 2
    if opts.garbage:
        for _ in range(3):
            print("hello from a program that is not an MCP server", flush=True)
        time.sleep(600)
        return 0

    from mcp.server.mcpserver import MCPServer

    server = MCPServer("ember-test-weather")

    def before_call(tool: str, **arguments: object) -> None:
        if opts.calls:
            with open(opts.calls, "a", encoding="utf-8") as f:
                f.write(f"{tool} {json.dumps(arguments, sort_keys=True)}\n")
        if opts.die_on_call:
            print("the weather station crashed", file=sys.stderr, flush=True)
            os._exit(3)
        time.sleep(opts.slow)

    @server.tool()
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        before_call("get_weather", city=city)
        return WEATHER.format(city=city)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        before_call("add", a=a, b=b)
        return a + b

    if opts.probes:
        @server.tool()
        def environment() -> str:
            """The environment this server was started with, as JSON."""
            return json.dumps(dict(os.environ))

        @server.tool()
        def flood(size: int) -> str:
            """A result of `size` bytes."""
            return ("0123456789abcdef" * (size // 16 + 1))[:size]

    if opts.http:
        server.run("streamable-http", host="127.0.0.1", port=opts.http)
    else:
        server.run()
    return 0


@contextmanager
def http_server(port: int) -> Iterator[str]:
    """This server on streamable HTTP in a process of its own; yields its /mcp address."""
    import subprocess
    import tempfile

    import httpx

    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below; a pipe would fill up)
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.mcp_server", "--http",
                             str(port)], cwd=REPO, stderr=log)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError as e:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError("the test MCP server did not start: "
                                       + log.read().decode(errors="replace")) from e
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
