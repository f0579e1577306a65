"""``icegov audit``: check that an audit stream is whole and untouched."""

from __future__ import annotations

from pathlib import Path

import click

from proxy.audit.verify import Broken, NeedsKey, verify


class Unreadable(click.ClickException):
    """The files cannot be checked at all (exit status 2, unlike a broken chain's 1)."""

    exit_code = 2


@click.group()
def audit() -> None:
    """Audit stream tools."""


@audit.command(name="verify")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", envvar="ICEGOV__AUDIT__HMAC_KEY", show_envvar=True,
              help="HMAC key the records were sealed with (prefer the environment variable).")
def verify_command(files: tuple[Path, ...], key: str | None) -> None:
    """Check FILES, in order, as one chain: every hash, seq and link.

    Give rotated files oldest first, then the live file (`audit.log.* audit.log` sorts so).
    Exit 0 with a summary when the chain is intact; 1 naming the first bad record (file:line)
    and what is wrong with it; 2 when the files cannot be checked (unreadable, key missing).
    """
    try:
        result = verify(files, key.encode("utf-8") if key else None)
    except NeedsKey as exc:
        raise click.UsageError(f"{exc} (--key or ICEGOV__AUDIT__HMAC_KEY)") from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise Unreadable(f"cannot read {where}{exc.strerror or type(exc).__name__}") \
            from None
    if isinstance(result, Broken):
        click.echo(f"audit chain broken: {result}")
        raise SystemExit(1)
    click.echo(str(result))
