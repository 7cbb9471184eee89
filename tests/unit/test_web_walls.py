"""The server's walls against web pages (app.server.web_walls): DNS rebinding (a foreign
Host), a foreign Origin, and simple-request POSTs (text/plain, no Content-Type) are refused on
every route, with and without an API key; loopback names, `[::1]`, the listed origins and
their CORS preflights pass. The real app on a scripted runtime (tests/support/fake_runtime)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.server.web_walls import WebWalls, host_name, origins_from_env
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served

KEY = "sekrit"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
GETS = ["/api/tags", "/v1/models", "/health", "/metrics", "/"]
POSTS = [("/v1/chat/completions", CHAT), ("/api/chat", CHAT), ("/v1/messages", CHAT),
         ("/api/show", {"model": MODEL}), ("/api/pull", {"model": "x"})]


def auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


@pytest.mark.parametrize("key", [None, KEY])
def test_a_foreign_host_gets_403_on_every_route_with_or_without_a_key(key):
    with served(ScriptedRuntime(), api_key=key) as client:
        for path in GETS:
            r = client.get(path, headers={"Host": "attacker.example:11435", **auth(key)})
            assert r.status_code == 403, path
            assert "attacker.example" in r.text
        for path, body in POSTS:
            r = client.post(path, json=body, headers={"Host": "attacker.example",
                                                      **auth(key)})
            assert r.status_code == 403, path
        r = client.request("DELETE", "/api/delete", json={"model": MODEL},
                           headers={"Host": "attacker.example", **auth(key)})
        assert r.status_code == 403
        assert r.json() == {"error": r.json()["error"]}  # in Ollama's shape on /api
        r = client.post("/v1/messages", json=CHAT, headers={"Host": "attacker.example"})
        assert r.json()["error"]["type"] == "permission_error"  # Anthropic's shape


@pytest.mark.parametrize("host", ["localhost:11435", "127.0.0.1", "127.0.0.1:8080",
                                  "[::1]:11435", "[::1]", "ui.localhost:3000", "LOCALHOST"])
def test_loopback_hosts_pass(host):
    with served(ScriptedRuntime()) as client:
        assert client.get("/api/tags", headers={"Host": host}).status_code == 200
        r = client.post("/v1/chat/completions", json=CHAT, headers={"Host": host})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("key", [None, KEY])
def test_a_foreign_origin_gets_403_and_a_loopback_or_listed_one_passes(key):
    with served(ScriptedRuntime(), api_key=key,
                cors_origins=("https://ui.example.com", "chrome-extension://*")) as client:
        for origin in ["http://attacker.example", "https://ui.example.com.evil.io",
                       "null", "moz-extension://abc"]:
            r = client.get("/api/tags", headers={"Origin": origin, **auth(key)})
            assert r.status_code == 403, origin
            r = client.post("/api/chat", json=CHAT, headers={"Origin": origin, **auth(key)})
            assert r.status_code == 403, origin
            assert "--cors-origin" in r.json()["error"]
        for origin in ["http://localhost:3000", "http://127.0.0.1:5173", "https://[::1]:8443",
                       "https://ui.example.com", "chrome-extension://abcdef"]:
            r = client.post("/v1/chat/completions", json=CHAT,
                            headers={"Origin": origin, **auth(key)})
            assert r.status_code == 200, (origin, r.text)
            assert r.headers["access-control-allow-origin"] == origin


def test_a_preflight_from_a_listed_origin_passes_and_from_another_is_refused():
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type, authorization"}
    with served(ScriptedRuntime(), api_key=KEY, cors_origins=("https://ui.example.com",)) \
            as client:
        r = client.options("/v1/chat/completions",
                           headers={"Origin": "https://ui.example.com", **preflight})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://ui.example.com"
        assert "POST" in r.headers["access-control-allow-methods"]
        r = client.options("/v1/chat/completions",
                           headers={"Origin": "http://attacker.example", **preflight})
        assert r.status_code == 403
        assert "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("key", [None, KEY])
def test_a_post_without_a_json_content_type_gets_415(key):
    body = json.dumps(CHAT)
    with served(ScriptedRuntime(), api_key=key) as client:
        for path in ["/v1/chat/completions", "/api/chat", "/api/pull", "/v1/messages"]:
            r = client.post(path, content=body,
                            headers={"Content-Type": "text/plain", **auth(key)})
            assert r.status_code == 415, path
            assert "application/json" in r.text
            r = client.post(path, content=body, headers=auth(key))  # no Content-Type
            assert r.status_code == 415, path
            r = client.post(path, content=body, headers={
                "Content-Type": "application/x-www-form-urlencoded", **auth(key)})
            assert r.status_code == 415, path
        # JSON with a charset, or a +json type, passes
        r = client.post("/v1/chat/completions", content=body, headers={
            "Content-Type": "application/json; charset=utf-8", **auth(key)})
        assert r.status_code == 200, r.text


def test_a_server_bound_beyond_loopback_leaves_the_host_to_its_key():
    walls = WebWalls.for_server("0.0.0.0", ())
    assert walls.check("GET", {"host": "my-pc.lan:11435"}, "192.168.1.7") is None
    walls = WebWalls.for_server("127.0.0.1", ())
    assert walls.check("GET", {}, "127.0.0.1") is None  # HTTP/1.0 from this machine
    refusal = walls.check("GET", {}, "192.168.1.7")
    assert refusal is not None and refusal.status == 403
    walls = WebWalls.for_server("127.0.0.2", ())
    assert walls.check("GET", {"host": "127.0.0.2:1"}, None) is None
    assert host_name("[::1]:11435") == "::1" and host_name("a.b:1") == "a.b"


def test_origins_come_from_the_flag_and_ember_origins(monkeypatch):
    monkeypatch.setenv("EMBER_ORIGINS", "https://a.example, chrome-extension://*,")
    assert origins_from_env(("https://b.example/",)) == (
        "https://b.example", "https://a.example", "chrome-extension://*")


def test_ember_serve_says_what_it_allows_in_its_help():
    from app.cli import cli

    out = CliRunner().invoke(cli, ["serve", "--help"]).output
    assert "EMBER_ORIGINS" in out
