"""Capacity, the model behind ``halo plan``: will a model fit on these nodes, and what will the
fabric cost per token."""
