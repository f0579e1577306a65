"""``icegov audit verify --public-key`` and ``icegov audit keygen``: the signed-digest commands."""

from __future__ import annotations

import re
from pathlib import Path

import click

from proxy.audit.digests import digest_path_for
from proxy.audit.proofs import prove
from proxy.audit.signing import BadKey, generate, load_public

_ROTATED_TAIL = re.compile(r"\.[0-9]{12}-[0-9]{8}T[0-9]{6}(\.[0-9]+)?Z$")


class _Unreadable(click.ClickException):
    exit_code = 2


def default_digests(files: tuple[Path, ...]) -> Path:
    """``<live file>.digests`` beside the last file given (a rotated name loses its suffix)."""
    last = files[-1]
    return digest_path_for(last.with_name(_ROTATED_TAIL.sub("", last.name)))


def verify_with_digests(files: tuple[Path, ...], public_key: Path, digests: Path | None,
                        key: str | None) -> None:
    """Print what the digests prove; exit 1 on any finding, 2 when nothing can be checked."""
    digest_file = digests or default_digests(files)
    try:
        public = load_public(public_key)
        proof = prove(files, digest_file, public, key.encode("utf-8") if key else None)
    except BadKey as exc:
        raise _Unreadable(str(exc)) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise _Unreadable(f"cannot read {where}{exc.strerror or type(exc).__name__}") from None
    click.echo(str(proof))
    if not proof.ok:
        raise SystemExit(1)


@click.command(name="keygen")
@click.option("--private", "private_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("audit-signing.pem"), show_default=True,
              help="Where the private key goes (mode 0600; never overwritten): "
                   "ICEGOV__AUDIT__SIGNING_KEY.")
@click.option("--public", "public_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("audit-signing.pub.pem"), show_default=True,
              help="Where the public key goes: for `icegov audit verify --public-key`.")
def keygen_command(private_path: Path, public_path: Path) -> None:
    """Make an Ed25519 key pair for signed audit digests."""
    try:
        key_id = generate(private_path, public_path)
    except FileExistsError as exc:
        raise click.ClickException(f"{exc.filename} exists: not overwritten") from None
    click.echo(f"private key: {private_path} (set ICEGOV__AUDIT__SIGNING_KEY to it)\n"
               f"public key: {public_path} (key id {key_id})")
