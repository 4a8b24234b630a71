"""Textual TUI over the kview core (installed as kview.tui)."""
