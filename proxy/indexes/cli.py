"""``icegov index status``: how much of a table its bloom-filter indexes cover.

It loads the table through a REST catalog (icegov itself, as a principal that may read the
table, or the backing catalog) with pyiceberg and reads the table's stored filters with the
FileIO that catalog hands out: what it prints is what any icegov replica would find.
"""

from __future__ import annotations

import click


@click.group()
def index() -> None:
    """Bloom-filter indexes of tables (icegov.index.bloom-filter-columns)."""


@index.command("status")
@click.argument("table")
@click.option("--uri", envvar="ICEGOV_URI", show_envvar=True, required=True,
              help="REST catalog URI: icegov's (e.g. http://localhost:8181) or the backing's.")
@click.option("--credential", envvar="ICEGOV_CREDENTIAL", show_envvar=True, default=None,
              help="OAuth2 client_id:secret.")
@click.option("--token", envvar="ICEGOV_TOKEN", show_envvar=True, default=None,
              help="Bearer token (instead of --credential).")
@click.option("--warehouse", default=None, help="Warehouse to ask the catalog for.")
def status_command(table: str, uri: str, credential: str | None, token: str | None,
                   warehouse: str | None) -> None:
    """Print, per indexed column of TABLE (namespace.table), how many live data files have
    a stored filter."""
    from pyiceberg.catalog.rest import RestCatalog  # here: other icegov commands start faster
    from pyiceberg.exceptions import NoSuchTableError, RESTError

    from proxy.commits.index_property import BLOOM_FILTER_COLUMNS
    from proxy.indexes.status import index_status

    properties = {"uri": uri}
    properties.update({k: v for k, v in (("credential", credential), ("token", token),
                                         ("warehouse", warehouse)) if v})
    try:
        loaded = RestCatalog("icegov", **properties).load_table(table)
    except (NoSuchTableError, RESTError, OSError) as exc:
        raise click.ClickException(f"cannot load {table}: {exc}") from None
    rows = index_status(loaded.metadata, loaded.io)
    if not rows:
        click.echo(f"{table}: no indexed columns ({BLOOM_FILTER_COLUMNS} is not set)")
        return
    width = max(len("column"), *(len(r.column) for r in rows))
    click.echo(f"{'column':<{width}}  {'family':<14}  indexed / live files")
    for r in rows:
        mark = "" if r.indexed == r.live else "  (building)"
        click.echo(f"{r.column:<{width}}  {r.family:<14}  {r.indexed} / {r.live}{mark}")
