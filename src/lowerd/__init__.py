"""lowerd: fast, explainable ExecuTorch lowering."""

from lowerd.project.method import Method
from lowerd.project.version import LOWERD_VERSION as __version__

__all__ = ["Method", "__version__"]
