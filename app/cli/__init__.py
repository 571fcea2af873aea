"""The ``duplex`` command and the wiring of backends into a server."""
