"""The controller's side of the controller↔node boundary.

    node     NodeClient: one node's commands, inside its exec_prefix, node code sent
    fanout   fan_out / each: the same work on many items in a bounded thread pool
    bridge   (temporary) runners for the modules that still put exec_prefix by hand

Import a name from the module that defines it.
"""
