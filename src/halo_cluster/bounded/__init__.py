"""Bounded input: every file, JSON document and HTTP answer halo reads from outside is read
with a ceiling, and bad input is one line (``infile``, ``jsonin``, ``httpget``); a URL
someone gave has its credentials taken out before halo writes or prints it (``redact``)."""
