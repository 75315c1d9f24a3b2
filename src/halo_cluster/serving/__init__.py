"""``halo serve`` and ``halo status``: the one bring-up every engine is served through.

bringup     start, health, warm-up, the witnesses, the supervisor, stop
memory      the preflight's memory check on every member
reference   the token witness's one-node references
status      halo status: Ray, each node's plan, the server's health
result      what one halo serve gave (the --json object)
"""
