"""The network edge: WebSocket and HTTP I/O, access, limits, metrics, logs."""
