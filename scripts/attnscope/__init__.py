"""attnscope: analyses of what attention heads in transformer language models do."""

__version__ = "0.1.0"
