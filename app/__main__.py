"""``python -m duplex.app``: the ``duplex`` command."""

from duplex.app.cli.main import entry

entry()
