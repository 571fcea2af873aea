"""The ``duplex`` command and the wiring of backends into a server."""

import os

# Before numpy loads: OpenBLAS would start a thread per core that spins between calls
# (0.2 of a core under load here) at the priority of the event loop. Its only callers
# are the models' feature extraction, already one call per model thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
