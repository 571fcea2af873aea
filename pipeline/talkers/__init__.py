"""Talker backends."""
