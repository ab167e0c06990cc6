"""Envs.

What esjax steps: the env protocol (gymnax 1.0's API), env creation from a gymnax id, a
registered suite's ``SUITE:NAME`` or a user's ``module:factory``, and the suite registry with
one adapter module per suite.
"""
