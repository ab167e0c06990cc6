"""Specs, without JAX.

What a run is made from: TOML presets and ``--set`` overrides become frozen, validated
dataclasses, read and checked before JAX is loaded. Nothing here imports JAX or writes a file;
the only files read are a task's TOML and the packaged presets.
"""
