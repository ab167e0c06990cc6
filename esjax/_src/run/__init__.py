"""Run.

A run on the host: its directory (atomic, checksummed, no link followed, never a pickle),
the trust seal, the memory preflight, kept programs and the compilation cache, the lifecycle
and the one host loop, saved policies and their verdict, trackers.
"""
