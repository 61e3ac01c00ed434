"""A backend's partitioner, imported from the name the project model gives it."""

from __future__ import annotations

import importlib

from executorch.exir.backend.partitioner import Partitioner

from lowerd.project.backends import Backend


def make_partitioner(backend: Backend) -> Partitioner:
    module, _, name = backend.partitioner.partition(":")
    partitioner: Partitioner = getattr(importlib.import_module(module), name)()
    return partitioner
