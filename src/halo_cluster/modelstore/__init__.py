"""Models on the nodes' own disks: the manifest (files, sizes, sha256, hashed once), the
store on a node (complete only when every file verified), and the hop of a transfer that
writes what a node needs while it forwards the stream to the next node. Standard library
only, Python 3.9: the node side runs it, and so does the controller."""
