"""``perdure keys``: make the encryption keys of the payload codec (docs/encryption.md)."""

from __future__ import annotations

import click

from perdure.store.encryption import KEYS_ENV, generate_key_line


@click.group()
def keys() -> None:
    """Make payload encryption keys (PERDURE_ENCRYPTION_KEYS)."""


@keys.command()
@click.option(
    "--id",
    "key_id",
    default="k1",
    show_default=True,
    help="The key's id, written in each envelope it encrypts (letters, digits, '_', '.', '-').",
)
def generate(key_id: str) -> None:
    """Print a new random AES-256 key as ``id:base64``, one line.

    Append it, newest last, to PERDURE_ENCRYPTION_KEYS (comma-separated) or to
    the PERDURE_ENCRYPTION_KEY_FILE of every App, worker, CLI and dashboard:
    the newest key encrypts, every key decrypts. Keep it out of the database.
    """
    click.echo(generate_key_line(key_id))
    click.echo(f"# add it, newest last, to {KEYS_ENV} (comma-separated) or its key file", err=True)
