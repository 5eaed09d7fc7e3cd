"""`python -m kselect.measurement` is `kselect bench` (kselect/commands/bench.py)."""

from kselect.commands.bench import cli

cli()
