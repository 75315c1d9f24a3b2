"""A local multi-node lab on network namespaces + sshd."""
