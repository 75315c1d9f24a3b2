"""Ray for the engines that run on it: ``halo up`` / ``down``, and which nodes Ray has.

start       (pure) each node's ``ray start`` and what registration must show
lifecycle   halo up / down, Ray's node table
auth        Ray's token: made on the first up, kept 0600, never in argv
"""
