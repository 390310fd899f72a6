"""edgeopt: take a trained model to a phone or an embedded board, offline."""

__version__ = "0.1.0"
