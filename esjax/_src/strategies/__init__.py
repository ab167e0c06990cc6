"""Strategies.

Evosax's algorithms as esjax sees them, built from a preset and checked setting by setting;
the protocol of a population that is never materialised, and antithetic OpenES as one; the
one sign flip from returns to evosax's fitness.
"""
