"""Bounded input: every file, JSON document and HTTP answer halo reads from outside is read
with a ceiling, and bad input is one line (``infile``, ``jsonin``, ``httpget``)."""
