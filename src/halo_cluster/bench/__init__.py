"""Benchmarks: tool wrappers with pure parsers (more to come: collective, TP replay, results)."""
