"""The ``icegov`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import uvicorn

from proxy.settings import Settings


def _settings(**options: Any) -> Settings:
    """Settings from the environment, overridden by the flags actually given."""
    given = {k: v for k, v in options.items() if v is not None}
    return Settings(**given)


def _run(app: Any, settings: Settings) -> None:
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info",
                access_log=False, proxy_headers=False, server_header=False)


@click.group()
@click.version_option(package_name="icegov")
def main() -> None:
    """icegov: a governance proxy for Apache Iceberg REST catalogs."""


@main.command()
@click.option("--host", help="Interface to bind (default 127.0.0.1).")
@click.option("--port", type=int, help="Port to listen on (default 8181).")
@click.option("--catalog-uri", help="Backing Iceberg REST catalog; omit to serve the embedded one.")
@click.option("--catalog-token", help="Static bearer token for the backing catalog.")
@click.option("--catalog-credential", help="OAuth2 'client_id:secret' for the backing catalog.")
@click.option("--catalog-oauth-uri", help="Backing token endpoint (default {uri}/v1/oauth/tokens).")
@click.option("--warehouse", type=click.Path(path_type=Path),
              help="Embedded catalog warehouse directory (default ./warehouse).")
@click.option("--catalog-db-uri", help="Embedded catalog SQLAlchemy URI (default SQLite).")
@click.option("--max-body-bytes", type=int, help="Largest request body accepted.")
def serve(**options: Any) -> None:
    """Serve the proxy in front of a backing catalog (the embedded one by default)."""
    from proxy.app import create_app

    settings = _settings(**options)
    _run(create_app(settings), settings)


@main.command()
@click.option("--host", help="Interface to bind (default 127.0.0.1).")
@click.option("--port", type=int, help="Port to listen on (default 8181).")
@click.option("--warehouse", type=click.Path(path_type=Path),
              help="Warehouse directory (default ./warehouse).")
@click.option("--catalog-db-uri", help="SQLAlchemy URI (default SQLite in the warehouse).")
def catalog(**options: Any) -> None:
    """Serve the embedded Iceberg REST catalog alone, with no proxy in front."""
    from proxy.catalog import EmbeddedCatalog

    settings = _settings(**options)
    _run(EmbeddedCatalog.from_settings(settings).app, settings)


def _register_groups() -> None:
    from proxy.identity.cli import principal
    from proxy.policy.cli import policy

    main.add_command(principal)
    main.add_command(policy)


_register_groups()

if __name__ == "__main__":
    main()
