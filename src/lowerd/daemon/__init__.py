"""The lowerd daemon: a language server that re-lowers on save in warm worker processes.

Knows LSP, processes and files; has builds run by lowerd.worker (the one supervisor of build
workers), never runs user code itself.
"""
