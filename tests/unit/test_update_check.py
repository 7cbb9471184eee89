"""The update check against a local feed: what it finds, what it ignores, and exactly what
it sends."""

from __future__ import annotations

import json
import logging

import pytest

from app import __version__
from app.update_check import FeedError, Release, is_newer, newer_release, parse_feed
from tests.support.feed_server import feed_server


def ember_feed(version: str) -> bytes:
    return json.dumps({"version": version, "url": f"https://example.org/ember/{version}",
                       "notes": "faster loads"}).encode()


def test_a_newer_version_in_embers_feed_form_is_found():
    with feed_server() as feed:
        feed.body = ember_feed("0.2.0")
        assert newer_release(feed.url, version="0.1.0") == Release(
            "0.2.0", "https://example.org/ember/0.2.0", "faster loads")


def test_a_github_latest_release_is_read_with_its_v_prefix_dropped():
    github = {"tag_name": "v1.0.0", "html_url": "https://github.com/o/ember/releases/tag/v1.0.0",
              "body": "notes", "name": "Ember 1.0", "draft": False, "assets": []}
    with feed_server() as feed:
        feed.body = json.dumps(github).encode()
        release = newer_release(feed.url, version="0.9.3")
    assert release == Release("1.0.0", github["html_url"], "notes")


@pytest.mark.parametrize("version", ["0.1.0", "0.0.9", "0.1.0rc1"])
def test_the_same_or_an_older_version_is_not_offered(version, caplog):
    with feed_server() as feed, caplog.at_level(logging.INFO, logger="app.update_check"):
        feed.body = ember_feed(version)
        assert newer_release(feed.url, version="0.1.0") is None
    assert [r.levelno for r in caplog.records] == [logging.INFO]  # "is current", no warning


@pytest.mark.parametrize(("body", "status", "why"), [
    (b"<html>rate limited</html>", 200, "not JSON"),
    (b"[1, 2]", 200, "expected a JSON object"),
    (b'{"message": "Not Found"}', 200, "no 'version'"),
    (b'{"version": "next week", "url": "https://x.org"}', 200, "not a version"),
    (b'{"version": "9.0", "url": "javascript:alert(1)"}', 200, "not an http(s) URL"),
    (b'{"version": "9.0"}', 404, "HTTP 404"),
    (b"x" * (2 << 20), 200, "over"),
])
def test_a_garbage_answer_gives_one_log_line_and_nothing_else(body, status, why, caplog):
    with feed_server() as feed, caplog.at_level(logging.DEBUG, logger="app.update_check"):
        feed.body, feed.status = body, status
        assert newer_release(feed.url, version="0.1.0") is None
    assert len(caplog.records) == 1 and caplog.records[0].levelno == logging.WARNING
    assert why in caplog.records[0].getMessage()


def test_a_slow_feed_times_out_with_one_log_line(caplog):
    with feed_server() as feed, caplog.at_level(logging.DEBUG, logger="app.update_check"):
        feed.body, feed.delay_s = ember_feed("9.0"), 2.0
        assert newer_release(feed.url, timeout=0.3, version="0.1.0") is None
    assert [r.getMessage().split(": ")[-1] for r in caplog.records] == ["no answer within 0.3 s"]


def test_a_feed_that_is_down_gives_one_log_line(caplog):
    with feed_server() as feed:
        url = feed.url  # the server is gone once the block ends
    with caplog.at_level(logging.DEBUG, logger="app.update_check"):
        assert newer_release(url, timeout=2, version="0.1.0") is None
    assert len(caplog.records) == 1 and "ConnectError" in caplog.records[0].getMessage()


def test_the_request_carries_only_the_version():
    with feed_server() as feed:
        feed.body = ember_feed("0.2.0")
        newer_release(feed.url)
    [request] = feed.requests
    assert request["path"] == "/releases/latest"  # no query added
    headers = {name.lower(): value for name, value in request["headers"]}
    port = feed.url.split(":")[2].split("/")[0]
    assert headers == {"host": f"127.0.0.1:{port}", "accept": "application/json",
                       "accept-encoding": "gzip", "connection": "keep-alive",
                       "user-agent": f"Ember/{__version__}"}


@pytest.mark.parametrize(("a", "b"), [("0.10.0", "0.9.1"), ("1.0.0", "1.0.0rc1"),
                                      ("1.0", "0.99"), ("2.0.0", "1.10.10"),
                                      ("1.0.1", "1.0"), ("1.0.0.post1", "1.0.0")])
def test_versions_compare_as_versions_not_as_text(a, b):
    assert is_newer(a, b) and not is_newer(b, a) and not is_newer(a, a)


def test_parse_feed_rejects_a_version_that_is_not_a_string():
    with pytest.raises(FeedError, match="must be strings"):
        parse_feed(b'{"version": 2, "url": "https://x.org"}')


def test_a_feed_address_that_is_not_http_is_a_settings_error(tmp_path):
    from app.config import Paths
    from app.errors import ConfigError
    from app.preferences import load_settings

    home = Paths(tmp_path)
    home.config_file.write_text('[app]\nupdate_check = true\nupdate_feed = "file:///etc/passwd"\n')
    with pytest.raises(ConfigError, match="update_feed must be an http"):
        load_settings(home)
