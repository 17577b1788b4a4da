"""The package's version: read by the command line and named to Redis (CLIENT SETINFO)."""

__version__ = "0.1.0"
