"""Who Ember is to the desktop: one place for its name, application id and addresses.

The application id is reverse-DNS (AppStream and freedesktop rules: letters, digits and
underscores, at least three parts). It names the .desktop file, the AppStream metainfo file
and the icon in the hicolor theme, and the window sets it with
`QGuiApplication.setDesktopFileName`: on Wayland the window's app id must equal the .desktop
file's name for the desktop to show the right icon and group the windows. X11's WM_CLASS is
the binary's name, `ember` (the .desktop file's StartupWMClass).
"""

from __future__ import annotations

from pathlib import Path

from app.resources import asset

APP_NAME = "Ember"
APP_ID = "io.github.ember_app.Ember"
WM_CLASS = "ember"
ORGANIZATION = "Ember"
HOMEPAGE = "https://github.com/ember-app/ember"
# The update check's default feed (off until the user switches it on): GitHub's latest
# release, so a release published there is found without any other hosting.
RELEASE_FEED = "https://api.github.com/repos/ember-app/ember/releases/latest"
ICON_SVG: Path = asset("icon/ember.svg")
