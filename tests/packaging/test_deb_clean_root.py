"""The .deb on a clean minimal Debian (debootstrap): `apt-get install` brings everything the
window needs (its Depends are enough: no fonts or xcb libraries happen to be there already),
the window answers a typed prompt on a real X server, and an upgrade and a purge keep the
user's models, history and settings."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

from app import __version__
from app.store import InstalledModel
from tests.packaging.conftest import LinuxBuild
from tests.packaging.test_window_xvfb import SHORT_ANSWERS
from tests.support.clean_root import clean_root
from tests.support.desktop import (
    MAIN_WINDOW,
    find_window,
    home_with_model,
    screenshot,
    type_text,
    wait_for_answer,
    xvfb,
)

PROMPT = "Write a Python function that returns the square of a number."
DATA = Path("home/user/.local/share/ember")  # platformdirs' user data dir, inside the root


def bumped_deb(deb: Path, folder: Path) -> Path:
    """The same package with a higher version: what an upgrade installs."""
    tree = folder / "tree"
    subprocess.run(["dpkg-deb", "-R", deb, tree], check=True)
    control = tree / "DEBIAN" / "control"
    control.write_text(re.sub(r"^Version: .*$", f"Version: {__version__}+1",
                              control.read_text(), flags=re.M))
    out = folder / f"ember_{__version__}+1_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Znone", "--build", tree, out],
                   check=True, capture_output=True)
    shutil.rmtree(tree)
    return out


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_deb_installs_and_runs_on_a_clean_system(linux_build: LinuxBuild, qwen: InstalledModel,
                                                 tmp_path: Path, artifacts: Path) -> None:
    with clean_root() as root:
        shutil.copy2(linux_build.deb, root.path / "tmp" / linux_build.deb.name)
        root.run("apt-get", "update", "-qq")
        installed = root.run("apt-get", "install", "-y", "-qq", "--no-install-recommends",
                             f"/tmp/{linux_build.deb.name}", check=False)
        assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
        version = root.run("ember", "--version", user=True)
        assert version.stdout.strip() == f"ember, version {__version__}"
        assert (root.path / "usr/share/applications").glob("*.desktop")
        # the background service is offered, not enabled (ember service, issue 43)
        unit = root.path / "usr/lib/systemd/user/ember.service"
        assert "ExecStart=/usr/bin/ember serve --service\n" in unit.read_text()
        assert not list((root.path / "etc/systemd/user").glob("*/ember.service"))

        data = root.path / DATA
        home_with_model(data, qwen, seen_as=Path("/") / DATA)
        (data / "config.toml").write_text(SHORT_ANSWERS)
        subprocess.run(["chown", "-R", "1000:1000", str(root.user_home)], check=True)
        with xvfb() as display:
            app = root.popen("ember", env={"DISPLAY": display})
            try:
                window, _ = find_window(display, "ember", timeout=90, title=MAIN_WINDOW,
                                        owner=app)
                type_text(display, window, PROMPT)
                answer = wait_for_answer(data / "history.db", PROMPT, timeout=300)
                assert "def " in answer, answer
                screenshot(display, artifacts / "window-clean-debian.png")
            finally:
                app.terminate()
                out, _ = app.communicate(timeout=30)
        # trap 7: without fontconfig's config every glyph is an empty box
        assert "Fontconfig error" not in out, out
        assert "Could not load the Qt platform plugin" not in out, out

        # an upgrade and a purge keep models, conversations and settings
        kept = {p: digest(p) for p in (data / "history.db", data / "config.toml",
                                       *data.glob("models/ember/*/*.gguf"))}
        upgrade = bumped_deb(linux_build.deb, tmp_path)
        shutil.copy2(upgrade, root.path / "tmp" / upgrade.name)
        root.run("apt-get", "install", "-y", "-qq", f"/tmp/{upgrade.name}")
        assert f"{__version__}+1" in root.run("dpkg-query", "-W", "ember").stdout
        assert root.run("ember", "--version", user=True).returncode == 0
        root.run("apt-get", "purge", "-y", "-qq", "ember")
        assert not (root.path / "opt/ember").exists()
        assert not (root.path / "usr/bin/ember").exists()
        assert {p: digest(p) for p in kept} == kept
