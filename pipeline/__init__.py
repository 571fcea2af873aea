"""Duplex's engine: contracts, stages and backends, with no networking."""
