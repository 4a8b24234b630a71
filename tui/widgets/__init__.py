"""Widgets shared by the views and the app, one a module."""
