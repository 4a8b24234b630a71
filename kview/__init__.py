"""kview core: trace readers, the normalized trace model, analyses, renderers and the CLI."""

__version__ = "0.1.0"
