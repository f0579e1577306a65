"""``icegov principal ...``: manage entries of the principals file."""

from __future__ import annotations

import click

from proxy.identity.hashing import generate_secret
from proxy.identity.principals import entry_yaml, new_entry


@click.group()
def principal() -> None:
    """Principals that may get icegov tokens with client credentials."""


@principal.command("add")
@click.argument("name")
@click.option("--role", "roles", multiple=True, help="A role granted to the principal (repeat).")
@click.option("--secret", help="The client secret; omit to generate a random one.")
def add(name: str, roles: tuple[str, ...], secret: str | None) -> None:
    """Print a principals-file entry for NAME (paste it under 'principals:').

    Only a salted hash of the secret is printed to stdout; a generated secret is shown once, on
    stderr, so `icegov principal add ... >> policies/principals.yaml` keeps it out of the file.
    """
    generated = secret is None
    secret = generate_secret() if secret is None else secret
    if not secret:
        raise click.BadParameter("the secret must not be empty", param_hint="--secret")
    try:
        entry = new_entry(name, roles, secret)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(entry_yaml(entry), nl=False)
    if generated:
        click.echo(f"# client secret for {name} (shown once): {secret}", err=True)
        click.echo(f"# Spark: credential={name}:{secret}", err=True)
