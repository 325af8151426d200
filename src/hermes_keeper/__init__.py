"""hermes-keeper: keeps Hermes Agent's session store healthy and bounded."""

__version__ = "0.3.1"
