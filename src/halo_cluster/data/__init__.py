"""Data shipped with halo: hardware, links and models the planner and the demo read."""
