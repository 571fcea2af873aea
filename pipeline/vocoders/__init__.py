"""Vocoder backends."""
