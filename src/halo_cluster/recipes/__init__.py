"""Recipes across the services: ``halo tune`` (every layout run beside the planner's
prediction) and ``halo run``."""
