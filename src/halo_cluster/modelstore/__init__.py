"""Models on the nodes' own disks: the manifest (files, sizes, sha256, hashed once), the
store on a node (complete only when every file verified), the hop of a transfer that
writes what a node needs while it forwards the stream to the next node, and the typed values
a sync sends and reads back (``transfer``: a node's state, a hop's spec, route and events).
Standard library only, Python 3.9: the node side runs it, and so does the controller."""
