"""lowerd's own version, from the installed distribution's metadata (pyproject.toml's)."""

from importlib.metadata import version

LOWERD_VERSION = version("lowerd")
