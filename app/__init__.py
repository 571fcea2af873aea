"""Duplex's server: protocol, sessions, WebSocket/HTTP edge and CLI."""
