"""The `ember` command: a click group whose commands live in this package's modules."""

from __future__ import annotations

import logging
import sys

import click

from app import __version__, logs
from app.config import DEFAULT_MODEL
from backends.errors import EmberError

log = logging.getLogger(__name__)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ember")
@click.option("--serve", "serve_flag", is_flag=True, help="same as `ember serve`")
@click.option("-v", "--verbose", is_flag=True,
              help="log debug lines, and echo the log to stderr (the log: DATA/logs/ember.log)")
@click.pass_context
def cli(ctx: click.Context, serve_flag: bool, verbose: bool) -> None:
    """Ember: run large language models on your own machine.

    With no command, Ember opens its window (or, without a display or without the 'gui'
    extra, a chat in the terminal on the default model).
    """
    logs.setup(verbose=verbose)
    _name_gpu_modules()
    # the command's name only: its arguments may hold a prompt or an API key
    log.info("ember %s %s", __version__, ctx.invoked_subcommand or ("serve" if serve_flag
                                                                    else "(no command)"))
    if ctx.invoked_subcommand is None:
        if serve_flag:
            from app.cli.serve import serve

            ctx.invoke(serve)
        elif gui_available():
            ctx.invoke(gui)
        else:
            from app.cli.generate import chat

            click.echo("(no display or no PySide6: chatting in the terminal)", err=True)
            ctx.invoke(chat, model=DEFAULT_MODEL)


def _name_gpu_modules() -> None:
    """The GPU modules downloaded into the data folder (`ember cuda install`), for the
    engine's workers and the GPU probe this process starts."""
    from app.config import paths
    from app.gpu_module.installed import export_modules_root

    export_modules_root(paths())


def gui_available() -> bool:
    import importlib.util
    import os

    if importlib.util.find_spec("PySide6") is None:
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                    or os.environ.get("QT_QPA_PLATFORM"))
    return True


@cli.command()
@click.option("--tray", "in_tray", is_flag=True,
              help="start in the tray, the window hidden (where the desktop has a tray)")
def gui(in_tray: bool = False) -> None:
    """Open Ember's window."""
    try:
        import PySide6.QtWidgets  # noqa: F401  (Qt's own libraries load here)

        from app.gui import main as gui_main
    except ImportError as e:  # a broken bundle, started by a double-click: leave a report
        from app.config import paths
        from app.crash import write_crash_log
        from app.install_hint import needs_extra

        try:
            report = f" (report: {write_crash_log(e, paths())})"
        except OSError:
            report = ""
        raise EmberError(needs_extra("the window", "gui", e.name) + report) from e
    sys.exit(gui_main([sys.argv[0]], in_tray=in_tray))


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except EmberError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)



# The commands register themselves on `cli` when their modules are imported.
from app.cli import (  # noqa: E402, F401
    convert,
    generate,
    gpu,
    history,
    hub,
    launch,
    models,
    remote,
    serve,
    service,
)
