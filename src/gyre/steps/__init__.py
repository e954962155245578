"""Turning user functions into compiled steps: the managed API and the jaxloop ``Step``."""
