"""`ember serve`: the OpenAI- and Ollama-compatible HTTP API."""

from __future__ import annotations

import logging

import click

from app import logs
from app.cli import cli
from app.runtime.backend_table import NAMES as BACKENDS
from app.server.settings import ServerSettings
from backends.errors import EmberError

log = logging.getLogger(__name__)
DEFAULTS = ServerSettings()


@cli.command()
@click.option("--host", default=DEFAULTS.host, show_default=True)
@click.option("--port", default=DEFAULTS.port, show_default=True, type=int)
@click.option("--api-key", default=None, envvar="EMBER_API_KEY",
              help="require 'Authorization: Bearer KEY' (needed off loopback)")
@click.option("--insecure-no-auth", is_flag=True, help="allow a non-loopback bind without a key")
@click.option("--cors-origin", multiple=True,
              help="let web pages from this origin call the API (repeatable; also "
                   "EMBER_ORIGINS, comma-separated; `*` matches any run: "
                   "'chrome-extension://*'). Loopback pages may always call")
@click.option("--idle-ttl", default=DEFAULTS.idle_ttl_s, show_default=True, type=float,
              help="seconds a model stays loaded after its last request")
@click.option("--queue-limit", default=DEFAULTS.queue_limit, show_default=True, type=int,
              help="requests that may wait; beyond, 429")
@click.option("--parallel", default=DEFAULTS.parallel, show_default=True, type=int,
              help="sequences decoded together per model (fewer if memory is short)")
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="run every local model on this backend (default: chosen per model for "
                   "this machine, see `ember hw`)")
@click.option("--mcp", "mcp", is_flag=True, envvar="EMBER_SERVE_MCP",
              help="offer the MCP servers of mcp.json to API requests that ask for them "
                   "(\"mcp\": true or [\"NAME\"]); only tools allowed always in the "
                   "window or by --mcp-allow run (also EMBER_SERVE_MCP=1)")
@click.option("--mcp-allow", multiple=True, metavar="SERVER/TOOL",
              help="with --mcp: let API requests run this MCP tool (repeatable; SERVER/* "
                   "for all of a server's tools)")
@click.option("--speculation/--no-speculation", default=DEFAULTS.speculation, show_default=True,
              envvar="EMBER_SPECULATION",
              help="prompt lookup for requests that do not say (\"speculative\": false "
                   "turns it off per request): the model's own output, faster where the "
                   "answer copies its context, off by itself where it does not pay")
@click.option("--allow-media-urls", "media_urls", is_flag=True,
              default=DEFAULTS.media_urls,
              help="fetch the images requests name by http(s) URL (10 s, 20 MB each; "
                   "off: only inline base64 images are taken). Loopback and private "
                   "addresses stay refused")
@click.option("--allow-private-media-urls", "media_urls_private", is_flag=True,
              default=DEFAULTS.media_urls_private,
              help="--allow-media-urls, and also from loopback, private and link-local "
                   "addresses (this machine and its network)")
@click.option("--service", "as_service", is_flag=True,
              help="run as Ember's background service (`ember service`): host, port, idle "
                   "TTL, parallel, queue limit and backend from config.toml's [service], the "
                   "key from DATA/service/api-key, the address announced in "
                   "DATA/service/endpoint.json while it listens")
def serve(host: str, port: int, api_key: str | None, insecure_no_auth: bool,
          cors_origin: tuple[str, ...], idle_ttl: float, queue_limit: int,
          parallel: int, backend: str | None, mcp: bool, mcp_allow: tuple[str, ...],
          speculation: bool, media_urls: bool, media_urls_private: bool,
          as_service: bool = False) -> None:
    """Serve the OpenAI- and Ollama-compatible HTTP API."""
    try:
        import uvicorn

        from app.server.app import check_bind, create_app
        from app.server.web_walls import origins_from_env
    except ImportError as e:
        from app.install_hint import needs_extra

        raise EmberError(needs_extra("the server", "serve", e.name)) from e
    from app.runtime import Runtime

    if as_service:
        from app.config import paths
        from app.service.endpoint import ensure_service_key
        from app.service.spec import load_service_config

        service = load_service_config(paths())
        host, port, idle_ttl, parallel = (service.host, service.port, service.idle_ttl_s,
                                          service.parallel)
        queue_limit, backend = service.queue_limit, service.backend or backend
        api_key = ensure_service_key(paths())
    settings = ServerSettings(host=host, port=port, api_key=api_key,
                              insecure_no_auth=insecure_no_auth,
                              cors_origins=origins_from_env(cors_origin),
                              idle_ttl_s=idle_ttl, queue_limit=queue_limit, parallel=parallel,
                              mcp=mcp, mcp_allow=mcp_allow, speculation=speculation,
                              media_urls=media_urls or media_urls_private,
                              media_urls_private=media_urls_private)
    check_bind(settings)
    logs.setup(echo=logging.WARNING)  # a server's console shows its warnings and errors
    app = create_app(Runtime(backend=backend, idle_ttl_s=idle_ttl, parallel=parallel),
                     settings)
    click.echo(f"Ember API on http://{host}:{port} (OpenAI: /v1, Ollama: /api)"
               + (", API key required" if api_key else "")
               + (", MCP tools of mcp.json on request" if mcp else "")
               + (", fetches image URLs" + (" (private addresses too)" if media_urls_private
                                            else "") if settings.media_urls else ""),
               err=True)
    log.info("serving on http://%s:%d (API key %s, parallel %d, queue limit %d, idle TTL %g s)",
             host, port, "required" if api_key else "not required", parallel, queue_limit,
             idle_ttl)
    # log_config=None: uvicorn's records go through Ember's handlers (its own dictConfig
    # would close them); app.server.access_log writes one line per request instead of its
    # access log
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", log_config=None)
    if as_service:
        from app.service.announce import AnnouncedServer

        AnnouncedServer(config).run()
    else:
        uvicorn.Server(config).run()
