"""The Redis Monitor: answers info / stop / stats / domain requests, expires crawls and runs
the circuit breaker (see docs/architecture.md, "Redis Monitor")."""
