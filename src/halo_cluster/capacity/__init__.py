"""The planner: will a model fit on these nodes, and what will the fabric cost per token."""
