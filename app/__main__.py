"""``python -m duplex.app``: the ``duplex`` command."""

from duplex.app.cli.main import entry

if __name__ == "__main__":  # not when a worker process (spawned) imports this module again
    entry()
