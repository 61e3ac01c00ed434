"""lowerd: fast, explainable ExecuTorch lowering."""

__version__ = "0.1.0"
