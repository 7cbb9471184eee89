"""`ember service`'s files, model-free: the systemd unit, the launchd plist and the Windows
task, from one description; the key and the endpoint files; install twice, a hand-edited
unit, a port in use."""

from __future__ import annotations

import importlib.util
import os
import plistlib
import shutil
import socket
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from app.config import Paths
from app.service import manager
from app.service.endpoint import (
    ensure_service_key,
    key_file,
    read_endpoint,
    remove_endpoint,
    service_key,
    write_endpoint,
)
from app.service.spec import ServiceSpec, load_service_config, service_spec
from app.service.units import launchd_plist, systemd_unit, windows_task_xml
from backends.errors import EmberError

TASK_NS = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}


@pytest.fixture
def spec(tmp_path: Path) -> ServiceSpec:
    home = tmp_path / "data dir"  # spaces: quoting is part of what is tested
    python = str(tmp_path / "my python" / "python3")
    return ServiceSpec(label="io.github.ember_app.Ember", description="Ember test",
                       command=(python, "-m", "app", "serve", "--service"),
                       env=(("EMBER_HOME", str(home)), ("PYTHONUNBUFFERED", "1")),
                       working_dir=home, log_file=home / "logs" / "service.log")


def test_systemd_unit_passes_systemd_analyze_verify(spec: ServiceSpec, tmp_path: Path):
    assert shutil.which("systemd-analyze"), "needs systemd-analyze (packaging/system_packages.sh)"
    spec.working_dir.mkdir(parents=True)
    python = Path(spec.command[0])  # verify checks that ExecStart's program exists
    python.parent.mkdir(parents=True)
    python.symlink_to(shutil.which("python3") or "/usr/bin/python3")
    unit = tmp_path / "ember.service"
    unit.write_text(systemd_unit(spec), encoding="utf-8")
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    done = subprocess.run(["systemd-analyze", "--user", "verify", str(unit)],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir)})
    # verify exits 0 on warnings too (an unknown Restart= value is "ignoring"): none wanted
    assert done.returncode == 0 and str(unit) not in done.stderr, done.stderr
    text = unit.read_text()
    assert "Restart=on-failure\n" in text and "StandardOutput=journal\n" in text
    assert f'ExecStart="{python}" -m app serve --service\n' in text
    assert f'Environment="EMBER_HOME={spec.working_dir}"\n' in text


def test_launchd_plist_parses_and_keeps_the_server_alive(spec: ServiceSpec):
    plist = plistlib.loads(launchd_plist(spec))
    assert plist["Label"] == spec.label
    assert plist["ProgramArguments"] == list(spec.command)
    assert plist["EnvironmentVariables"]["EMBER_HOME"] == str(spec.working_dir)
    assert plist["KeepAlive"] == {"SuccessfulExit": False} and plist["RunAtLoad"] is True
    assert plist["StandardErrorPath"] == str(spec.log_file)


def test_windows_task_parses_and_runs_at_the_users_logon(spec: ServiceSpec):
    xml = windows_task_xml(spec, "PC\\ana & bo")
    root = ET.fromstring(xml.split("\n", 1)[1])  # ElementTree refuses a UTF-16 declaration in a str
    assert root.find("t:Triggers/t:LogonTrigger/t:UserId", TASK_NS).text == "PC\\ana & bo"
    exec_ = root.find("t:Actions/t:Exec", TASK_NS)
    assert exec_.find("t:Command", TASK_NS).text == "cmd.exe"
    args = exec_.find("t:Arguments", TASK_NS).text
    assert f'set "EMBER_HOME={spec.working_dir}"' in args
    assert f'"{spec.command[0]}" -m app serve --service' in args
    assert root.find("t:Settings/t:RestartOnFailure/t:Count", TASK_NS).text == "999"


def test_the_key_is_made_once_owner_only(isolated_home: Paths):
    assert service_key(isolated_home) is None
    key = ensure_service_key(isolated_home)
    assert len(key) >= 40 and ensure_service_key(isolated_home) == key
    assert key_file(isolated_home).read_text() == key + "\n"
    assert stat.S_IMODE(key_file(isolated_home).stat().st_mode) == 0o600


def test_endpoint_is_read_back_only_while_its_process_lives(isolated_home: Paths):
    assert read_endpoint(isolated_home) is None
    written = write_endpoint(isolated_home, "http://127.0.0.1:5")
    assert read_endpoint(isolated_home) == written and written.pid == os.getpid()
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_endpoint(isolated_home, "http://127.0.0.1:6", pid=dead.pid, started_at=1.0)
    assert read_endpoint(isolated_home) is None
    remove_endpoint(isolated_home)  # not this process's: left alone
    assert (isolated_home.home / "service" / "endpoint.json").exists()
    remove_endpoint(isolated_home, pid=dead.pid)
    assert not (isolated_home.home / "service" / "endpoint.json").exists()


def test_service_settings_come_from_config_toml(isolated_home: Paths):
    assert load_service_config(isolated_home).port == 11435
    isolated_home.home.mkdir()
    isolated_home.config_file.write_text('[service]\nport = 12001\nidle_ttl_s = 60\n')
    config = load_service_config(isolated_home)
    assert (config.port, config.idle_ttl_s, config.url) == (12001, 60.0, "http://127.0.0.1:12001")
    isolated_home.config_file.write_text('[service]\nport = "x"\n')
    with pytest.raises(EmberError, match=r"\[service\] port = 'x': expected int"):
        load_service_config(isolated_home)
    isolated_home.config_file.write_text('[service]\nbackend = "tpu"\n')
    with pytest.raises(EmberError, match=r"backend = 'tpu': expected one of .*llamacpp"):
        load_service_config(isolated_home)


@pytest.fixture
def supervised(isolated_home: Paths, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> tuple[Paths, Path]:
    # never the real user's systemd: the supervisor's mode writes the unit and registers nothing
    monkeypatch.setenv(manager.MODE_ENV, "supervised")
    monkeypatch.setattr(manager, "platform", lambda: "linux")
    return isolated_home, tmp_path / "user-home"


def test_installing_twice_says_it_is_installed_and_how_to_reinstall(supervised):
    paths, home = supervised
    said = manager.install(paths, home=home)
    unit = home / ".config/systemd/user/ember.service"
    assert str(unit) in said and unit.read_text() == systemd_unit(service_spec(paths))
    assert service_key(paths) is not None
    with pytest.raises(manager.ServiceError, match=r"installed already .* install --force"):
        manager.install(paths, home=home)
    assert "installed" in manager.install(paths, force=True, home=home)


def test_a_hand_edited_unit_is_neither_replaced_nor_removed_without_force(supervised):
    paths, home = supervised
    manager.install(paths, home=home)
    unit = home / ".config/systemd/user/ember.service"
    unit.write_text(unit.read_text() + "Nice=5\n")
    with pytest.raises(manager.ServiceError, match=r"edited since Ember wrote it.*install --force"):
        manager.install(paths, home=home)
    with pytest.raises(manager.ServiceError, match=r"edited.*uninstall --force"):
        manager.uninstall(paths, home=home)
    assert unit.read_text().endswith("Nice=5\n")
    assert "removed" in manager.uninstall(paths, force=True, home=home)
    assert not unit.exists()
    with pytest.raises(manager.ServiceError, match="not installed"):
        manager.uninstall(paths, home=home)


def test_start_names_who_holds_the_port(supervised):
    paths, _ = supervised
    paths.home.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        paths.config_file.write_text(f"[service]\nport = {port}\n")
        with pytest.raises(manager.ServiceError,
                           match=rf"port {port} is in use by python\S* \(pid {os.getpid()}\)"):
            manager.start(paths)


def test_a_port_its_last_connections_left_in_time_wait_is_free_to_start_on():
    """After `ember service stop` the server's side of each connection a client had open
    (the window's) waits out TIME_WAIT; the new server binds as asyncio does and listens."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server closes first: its side goes to TIME_WAIT
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # the state the check must see through
    assert manager.port_holder("127.0.0.1", port) is None


def test_the_deb_offers_the_unit_not_enabled_and_it_verifies(tmp_path: Path):
    spec_ = importlib.util.spec_from_file_location(
        "linux_packages", Path(__file__).resolve().parents[2] / "packaging/linux_packages.py")
    assert spec_ and spec_.loader
    linux_packages = importlib.util.module_from_spec(spec_)
    sys.modules["linux_packages"] = linux_packages  # its dataclasses look their module up
    spec_.loader.exec_module(linux_packages)
    install_service_unit = linux_packages.install_service_unit

    root = tmp_path / "root"
    unit = install_service_unit(root)
    assert unit == root / "usr/lib/systemd/user/ember.service"
    # not enabled: nothing under a .wants folder, only the unit
    assert [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()] == [
        "usr/lib/systemd/user/ember.service"]
    text = unit.read_text()
    assert "ExecStart=/usr/bin/ember serve --service\n" in text
    assert "WorkingDirectory=~\n" in text
    # verify needs ExecStart's program to exist: the same unit, pointed at a real one
    ember = tmp_path / "ember"
    ember.symlink_to(shutil.which("true") or "/bin/true")
    moved = tmp_path / "ember.service"
    moved.write_text(text.replace("/usr/bin/ember", str(ember)))
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    done = subprocess.run(["systemd-analyze", "--user", "verify", str(moved)],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir)})
    assert done.returncode == 0 and str(moved) not in done.stderr, done.stderr
