"""The lowerd daemon: a language server that re-lowers on save in warm worker processes.

Knows LSP, processes and files; asks lowerd.lowering for builds, never runs user code itself.
"""
