"""The self-checking demo: the embedded cluster crawls a local multi-domain site."""
