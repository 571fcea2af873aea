"""Listening models that decide about audio windows: voice activity (and, later, end of turn)."""
