"""Export and lower lowerd targets with ExecuTorch's own pipeline.

Importing this package is cheap: torch and executorch are imported only by the modules that lower.
"""
