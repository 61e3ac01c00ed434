"""Build workers: the warm fork server, the frames and messages it speaks, and the one supervisor
that the in-process CLI, the daemon and the Ray task all run builds through."""
