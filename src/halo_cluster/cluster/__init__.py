"""The cluster as a whole: one handle on every node, their plans and the doctor's gate
without Ray, Ray's lifecycle, the typed state file, and the one bring-up every engine is
served through.

    handle      Cluster: the config, one NodeClient per node, where progress goes
    gather      every node's facts, in parallel
    doctor      the doctor's checks over every node
    plans       every node's transport plan and the doctor's gate (no Ray needed)
    ray_start   (pure) each node's ``ray start`` and what registration must show
    lifecycle   Ray: halo up / down, Ray's node table
    state       the state file (halo.state/1), read once per command
    bringup     halo serve for every engine: start, health, warm-up, both witnesses, stop
    proof       the counters witness, the same for every engine
    status      halo status: Ray, each node's plan, the server's health
    auth        Ray's token
"""
