"""`python -m kselect.selector [overrides]`: the same as `kselect select` (selector/commands/select.py)."""

from .commands.select import cli

if __name__ == "__main__":
    cli()
