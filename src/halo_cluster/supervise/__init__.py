"""The controller's side of supervision (the supervisor itself is ``node/supervisor.py``,
its policy ``supervision.py``).

    control     install on the head, stop, forget, status and the history's tail
    service     (pure) the scripts that run the supervisor as a systemd unit or a process
"""
