"""The engine (``loop``, ``elapse``), the named loops and ``inner_loop``."""
