"""Transformers from the equations up: the code of the txbook textbook, tested and fast"""

__version__ = "0.1.0"
