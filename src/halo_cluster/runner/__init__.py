"""Side effects behind one method: ``Runner.run(argv, stdin, timeout, on_line) -> Result``.

One concept per module; import a name from the module that defines it:

    result     Result, the Runner protocol, LineSink and the shell's exit codes
    quote      (pure) ``export`` lines and the script a node runs, for ``bash -s``
    local      LocalRunner: a process here (and ``start`` for background processes)
    ssh        SSHRunner: argv on a node through the system ``ssh``, word by word
    sharing    one shared SSH connection per node (ControlMaster upkeep, close_connections)
    prefix     PrefixRunner: a node's ``exec_prefix`` before every argv
    node_code  NodeRunner: halo's node code cached on a node before a command uses it
    fake       FakeRunner: answers from a table, for tests

What a node-side caller uses is one level up: ``halo_cluster.client.node.NodeClient``.
"""
