"""One harness for tests, benchmarks and the load test: ports, a spawned server, statistics, tiny models."""
