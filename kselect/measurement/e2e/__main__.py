"""`python -m kselect.measurement.e2e`: the command line of kselect/commands/e2e.py."""

from kselect.commands.e2e import cli

cli()
