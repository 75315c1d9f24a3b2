"""Node facts: readers that take a root directory, pure parsers, frozen dataclasses."""
