"""The cluster as a whole, before any engine: one handle on every node, their facts, the
doctor's gate, every node's transport plan, the typed state file, and the counters read
around a probe request (the proof the bring-up and the supervisor share).

    handle      Cluster: the config, one NodeClient per node, where progress goes
    gather      every node's facts, in parallel
    doctor      the doctor's checks over every node
    plans       every node's transport plan and the doctor's gate (no Ray needed)
    state       the state file (halo.state/2), read once per command
    deployments the named deployments it holds: each a model, its layout and replicas
    proof       the counters witness, the same for every engine
"""
