"""Cluster-wide work: gathering facts from every node, and (later) the lifecycle."""
