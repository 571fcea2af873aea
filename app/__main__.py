"""``python -m duplex.app``: the ``duplex`` command."""

import sys

from duplex.app.cli.main import main

sys.exit(main())
