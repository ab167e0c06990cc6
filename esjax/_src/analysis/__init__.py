"""Analysis.

What is done with finished runs: evaluation (splits, grids, baselines), meta-evolution
scores, sweeps that compare configurations, reports over seeds, plots and renders.
"""
