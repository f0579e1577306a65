"""``icegov audit query``: filter an audit stream (``proxy.audit.query``), print JSON lines or a
table. Exit 0 (also when nothing matches); 2 for unreadable files or a malformed time."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click

from proxy.audit.cli import Unreadable
from proxy.audit.query import TABLE_COLUMNS, Query, parse_time, raw_lines, stream_paths, table_row


def _time(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError:
        raise click.BadParameter(f"not an ISO 8601 time: {value!r}") from None


@click.command("query")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--principal", "principals", multiple=True, help="Caller name (repeat: any).")
@click.option("--table", "tables", multiple=True, metavar="RESOURCE",
              help="A resource in its text form, e.g. icegov.demo.orders (repeat: any).")
@click.option("--action", "actions", multiple=True, help="e.g. SELECT, INSERT (repeat: any).")
@click.option("--decision", "decisions", multiple=True,
              help="allow, deny, hidden, unauthenticated, refused, public, error (repeat: any).")
@click.option("--request-id", "request_ids", multiple=True, help="A request id (repeat: any).")
@click.option("--since", callback=_time, help="From this time on (ISO 8601; UTC if no zone).")
@click.option("--until", callback=_time, help="Before this time (exclusive).")
@click.option("--format", "shape", type=click.Choice(["jsonl", "table"]), default="jsonl",
              show_default=True)
@click.option("--no-rotated", is_flag=True,
              help="Read only the files named, not their rotated siblings.")
def query_command(files: tuple[Path, ...], principals: tuple[str, ...],
                  tables: tuple[str, ...], actions: tuple[str, ...],
                  decisions: tuple[str, ...], request_ids: tuple[str, ...],
                  since: datetime | None, until: datetime | None, shape: str,
                  no_rotated: bool) -> None:
    """Print the records of FILES that match every filter given, in stream order.

    A live file's rotated siblings (audit.log.<seq>-<time>) are read first, oldest first,
    unless --no-rotated. Lines that are not records are skipped and counted on stderr.
    """
    query = Query(principals, tables, actions, decisions, request_ids, since, until)
    paths = stream_paths(files, rotated=not no_rotated)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise Unreadable(f"no such file: {', '.join(missing)}")
    if shape == "table":
        click.echo("\t".join(TABLE_COLUMNS))
    try:
        for record in query.run(raw_lines(paths)):
            click.echo(table_row(record) if shape == "table"
                       else json.dumps(record, separators=(",", ":")))
    except OSError as exc:
        raise Unreadable(f"cannot read {exc.filename}: {exc.strerror}") from None
    if query.skipped:
        click.echo(f"skipped {query.skipped} line(s) that are not records", err=True)
