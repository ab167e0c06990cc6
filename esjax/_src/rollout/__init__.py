"""Rollout.

One episode step shared by everything that steps an env, and the population rollout: every
member of a population over its episodes in one jitted call, in cache-sized chunks, sharded
over devices, returning summaries only.
"""
