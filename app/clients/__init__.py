"""Clients of the Realtime protocol: a raw client, the simulated client, replays and scenarios,
test sounds, and the terminal mic demo (with its echo canceller). They speak the wire only."""
