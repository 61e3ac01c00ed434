"""lowerd: fast, explainable ExecuTorch lowering."""

from lowerd.project.version import LOWERD_VERSION as __version__

__all__ = ["__version__"]
