"""Models on the cluster: where one comes from, ``halo model sync`` (sent once, every node
verified), and what the nodes' stores hold (``ls``, ``verify``, ``rm``, a name resolved for
``serve``). The store and the manifest themselves are ``modelstore``.

    source      a path, NODE:PATH, the Hugging Face cache or hub, hashed into a manifest
    sync        halo model sync: the same model on every node, over one pipe
    stores      what each node holds; verify, rm, and a model's name to each node's path
"""
