"""Errors the user fixes: the ``specdraft`` command prints their one line, without a traceback."""

from __future__ import annotations


class UserError(RuntimeError):
    """A problem with what was given or installed; the message says what to do, in one line."""


class MissingPackage(UserError):
    """An optional package specdraft needs for this command is not installed. specdraft never
    installs anything itself: the message names the command that does."""
