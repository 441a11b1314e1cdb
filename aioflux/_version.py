"""The version of aioflux, in one place: the build backend reads it from here
(``[tool.hatch.version]`` in pyproject.toml), ``aioflux.__version__`` and the
default ``User-Agent`` re-use it."""

__all__ = ["DISTRIBUTION", "__version__"]

__version__ = "0.1.0"

# The name on PyPI ("aioflux" there is an unrelated project); the import name
# and the console script stay ``aioflux``.
DISTRIBUTION = "aioflux-storage"
