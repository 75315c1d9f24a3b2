"""The controller's side of the controller↔node boundary.

    node     NodeClient: one node's commands, inside its exec_prefix, node code sent
    fanout   fan_out / each: the same work on many items in a bounded thread pool

Import a name from the module that defines it.
"""
